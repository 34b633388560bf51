"""Synthetic workloads: pydantic specs a scenario YAML can embed, and :func:`generate`.

Everything random is drawn from one ``numpy.random.Generator`` seeded by ``seed``, in a
fixed order (arrivals, lengths, shared-prefix choice), so the same spec and seed give
the same table, byte for byte.

Lengths (``lengths``): ``pair`` draws prompt and output lengths independently, each from
``fixed`` / ``uniform`` / ``lognormal`` (by mean and coefficient of variation, clipped);
``empirical`` resamples (prompt, output) pairs jointly from any trace file fragsim reads;
``mixture`` picks a component per request by weight.

Shared system prompts (``shared_prefix``): a ``fraction`` of requests start with one of
``num_prompts`` system prompts of ``prefix_tokens`` tokens, prepended to the drawn
prompt. Every request then carries chained ``prefix_hashes`` over ``block_tokens``-token
blocks: the full blocks of its system prompt share the prompt's ids, every other block
gets a fresh id. Without ``shared_prefix`` no hashes are written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from traces.arrivals import (
    ArrivalSpec,
    BurstyArrival,
    DiurnalArrival,
    PoissonArrival,
    arrival_times,
    mean_rate_per_s,
    rate_periods,
)
from traces.bounds import MAX_REQUESTS, BoundError, check_periods, check_requests, check_span
from traces.loaders import load_table
from traces.table import to_frame
from traces.validate import assemble, list_from

_CFG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
MAX_SYNTH_TOKENS = 10_000_000
MAX_PREFIX_TOKENS = 1 << 20  # one system prompt, tokens
MAX_PREFIX_HASHES = 50_000_000  # prefix-hash entries a workload may hold (all requests)
MAX_WEIGHT = 1e6  # a mixture component's relative weight, in (0, 1e6]
MAX_COMPONENTS = 1_000


class FixedTokens(BaseModel):
    """Every request gets the same length."""

    model_config = _CFG
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=0, le=MAX_SYNTH_TOKENS, description="The length, in tokens.")


class UniformTokens(BaseModel):
    """Lengths uniform over whole numbers in [min_tokens, max_tokens]."""

    model_config = _CFG
    kind: Literal["uniform"] = "uniform"
    min_tokens: int = Field(ge=0, le=MAX_SYNTH_TOKENS, description="Smallest length, tokens.")
    max_tokens: int = Field(
        ge=0, le=MAX_SYNTH_TOKENS, description="Largest length, tokens (inclusive)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> UniformTokens:
        if self.max_tokens < self.min_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"
            )
        return self


class LognormalTokens(BaseModel):
    """Lognormal lengths with the given mean and coefficient of variation, rounded and clipped."""

    model_config = _CFG
    kind: Literal["lognormal"] = "lognormal"
    mean_tokens: float = Field(
        gt=0, le=MAX_SYNTH_TOKENS, description="Mean length before clipping, tokens."
    )
    cv: float = Field(gt=0, le=20, description="Spread: standard deviation / mean.")
    min_tokens: int = Field(
        default=1,
        ge=0,
        le=MAX_SYNTH_TOKENS,
        description="Lengths below are raised to this, tokens.",
    )
    max_tokens: int = Field(
        default=MAX_SYNTH_TOKENS,
        ge=1,
        le=MAX_SYNTH_TOKENS,
        description="Lengths above are cut to this, tokens.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> LognormalTokens:
        if self.max_tokens < self.min_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"
            )
        return self


TokenDist = Annotated[FixedTokens | UniformTokens | LognormalTokens, Field(discriminator="kind")]


class PairLengths(BaseModel):
    """Prompt and output lengths drawn independently."""

    model_config = _CFG
    kind: Literal["pair"] = "pair"
    prompt: TokenDist = Field(description="Prompt-length distribution.")
    output: TokenDist = Field(description="Output-length distribution.")

    @model_validator(mode="after")
    def _prompt_has_a_token(self) -> PairLengths:
        p = self.prompt
        low = p.tokens if isinstance(p, FixedTokens) else p.min_tokens
        if low < 1:
            raise ValueError(
                "prompt lengths must be >= 1 (a request has at least one prompt token); "
                f"got a smallest prompt of {low}"
            )
        return self


class EmpiricalLengths(BaseModel):
    """(prompt, output) pairs resampled with replacement from a trace file."""

    model_config = _CFG
    kind: Literal["empirical"] = "empirical"
    path: Path = Field(description="Any trace file fragsim reads (lengths only are used).")
    format: str | None = Field(default=None, description="Its format; None detects it.")


class MixtureComponent(BaseModel):
    """One component of a length mixture."""

    model_config = _CFG
    weight: float = Field(
        gt=0, le=MAX_WEIGHT, description="Relative weight (weights are normalised)."
    )
    lengths: PairLengths | EmpiricalLengths = Field(
        discriminator="kind", description="Its lengths."
    )


class MixtureLengths(BaseModel):
    """Each request draws its component by weight, then its lengths from it."""

    model_config = _CFG
    kind: Literal["mixture"] = "mixture"
    components: tuple[MixtureComponent, ...] = Field(
        max_length=MAX_COMPONENTS, description="The components (at least one)."
    )

    @field_validator("components")
    @classmethod
    def _some(cls, value: tuple[MixtureComponent, ...]) -> tuple[MixtureComponent, ...]:
        # Not min_length: pydantic would add a second, misleading error when an item fails.
        if not value:
            raise ValueError("give at least one component")
        return value


LengthSpec = Annotated[PairLengths | EmpiricalLengths | MixtureLengths, Field(discriminator="kind")]


class SharedPrefix(BaseModel):
    """A share of requests starts with a common system prompt (expressed as prefix hashes)."""

    model_config = _CFG
    fraction: float = Field(ge=0, le=1, description="Share of requests that carry a system prompt.")
    prefix_tokens: int = Field(
        ge=1, le=MAX_PREFIX_TOKENS, description="System-prompt length, tokens."
    )
    num_prompts: int = Field(
        default=1, ge=1, le=1_000_000, description="Distinct system prompts, picked uniformly."
    )
    block_tokens: int = Field(
        default=16, ge=1, le=1 << 20, description="Block size the hashes cover, tokens."
    )


class SynthSpec(BaseModel):
    """A synthetic workload. Give exactly one of ``duration_s`` and ``num_requests``."""

    model_config = _CFG
    arrival: ArrivalSpec = Field(description="Arrival process.")
    lengths: LengthSpec = Field(description="Prompt/output length distribution.")
    shared_prefix: SharedPrefix | None = Field(
        default=None, description="Shared system prompts, if any."
    )
    num_samples: int = Field(
        default=1, ge=1, le=1024, description="Parallel sampling n for every request."
    )
    beam_width: int = Field(default=1, ge=1, le=1024, description="Beam width for every request.")
    duration_s: float | None = Field(
        default=None, gt=0, le=1e8, description="Generate arrivals before this time, s."
    )
    num_requests: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REQUESTS,
        description="Generate this many requests (at most traces.bounds.MAX_REQUESTS).",
    )

    @field_validator("duration_s", "num_requests")
    @classmethod
    def _bounded(cls, value: float | None, info: ValidationInfo) -> float | None:
        """The workload's size, span and rate periods stay within :mod:`traces.bounds`
        (checked before anything is drawn)."""
        arrival = info.data.get("arrival")
        if value is None or arrival is None:
            return value
        rate = mean_rate_per_s(arrival)
        if info.field_name == "duration_s":
            expected, span_s, what = rate * value, value, f"{value:g} s at {rate:g} req/s"
        else:
            expected, span_s, what = value, value / rate, f"{value:,} requests at {rate:g} req/s"
        try:
            check_requests(expected, str(info.field_name), value, what)
            check_span(span_s, str(info.field_name), value, what)
            check_periods(rate_periods(arrival, span_s), str(info.field_name), value, what)
        except BoundError as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _one_size(self) -> SynthSpec:
        if (self.duration_s is None) == (self.num_requests is None):
            raise ValueError("give exactly one of duration_s and num_requests")
        sp = self.shared_prefix
        if sp is not None and sp.fraction > 0:
            n = (
                float(self.num_requests)
                if self.num_requests is not None
                else mean_rate_per_s(self.arrival) * float(self.duration_s or 0.0)
            )
            hashes = n * sp.fraction * -(-sp.prefix_tokens // sp.block_tokens)
            if not hashes <= MAX_PREFIX_HASHES:
                raise ValueError(
                    f"field shared_prefix.prefix_tokens: got {sp.prefix_tokens}: about "
                    f"{hashes:,.0f} system-prompt hashes ({n:,.0f} requests x "
                    f"{sp.fraction:g} x ceil({sp.prefix_tokens}/{sp.block_tokens})), more "
                    f"than {MAX_PREFIX_HASHES:,} (traces.synth.MAX_PREFIX_HASHES)"
                )
        return self


def _draw(
    dist: FixedTokens | UniformTokens | LognormalTokens, rng: np.random.Generator, n: int
) -> np.ndarray:
    if isinstance(dist, FixedTokens):
        return np.full(n, dist.tokens, dtype=np.int64)
    if isinstance(dist, UniformTokens):
        return rng.integers(dist.min_tokens, dist.max_tokens + 1, n, dtype=np.int64)
    sigma2 = np.log1p(dist.cv**2)
    mu = np.log(dist.mean_tokens) - sigma2 / 2
    x = np.rint(rng.lognormal(mu, np.sqrt(sigma2), n))
    return np.clip(x, dist.min_tokens, dist.max_tokens).astype(np.int64)


def _lengths(
    spec: PairLengths | EmpiricalLengths | MixtureLengths, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(spec, PairLengths):
        prompt = _draw(spec.prompt, rng, n)
        return prompt, _draw(spec.output, rng, n)
    if isinstance(spec, EmpiricalLengths):
        table = load_table(spec.path, format=spec.format, arrivals=PoissonArrival(rate_per_s=1.0))
        pick = rng.integers(0, table.num_rows, n)
        return (
            table.column("prompt_tokens").to_numpy()[pick],
            table.column("output_tokens").to_numpy()[pick],
        )
    weights = np.array([c.weight for c in spec.components], dtype=np.float64)
    weights = weights / weights.max()  # in (0, 1]: the sum cannot overflow
    which = rng.choice(len(weights), size=n, p=weights / weights.sum())
    prompt = np.zeros(n, dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    for k, comp in enumerate(spec.components):
        idx = np.flatnonzero(which == k)
        prompt[idx], output[idx] = _lengths(comp.lengths, rng, len(idx))
    return prompt, output


def _prefix_hashes(
    spec: SharedPrefix, rng: np.random.Generator, prompt: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """Prepend system prompts to a share of requests; build chained block hashes."""
    n = len(prompt)
    shared = rng.random(n) < spec.fraction
    which = rng.integers(0, spec.num_prompts, n)
    prompt = prompt + np.where(shared, spec.prefix_tokens, 0)
    blocks = -(-prompt // spec.block_tokens)
    check_hashes(int(blocks.sum()), spec.block_tokens)
    shared_blocks = np.where(shared, np.minimum(spec.prefix_tokens // spec.block_tokens, blocks), 0)
    per_prompt = spec.prefix_tokens // spec.block_tokens
    total = int(blocks.sum())
    starts = np.cumsum(blocks) - blocks
    pos = np.arange(total) - np.repeat(starts, blocks)
    base = spec.num_prompts * per_prompt  # ids below this are system-prompt blocks
    fresh = base + np.arange(total, dtype=np.int64)
    sys_ids = np.repeat(which * per_prompt, blocks) + pos
    values = np.where(pos < np.repeat(shared_blocks, blocks), sys_ids, fresh)
    return list_from(blocks, pa.array(values, pa.int64())), prompt


def check_hashes(total: int, block_tokens: int) -> None:
    """Refuse, before allocating them, more than :data:`MAX_PREFIX_HASHES` prefix hashes."""
    if total > MAX_PREFIX_HASHES:
        raise BoundError(
            "shared_prefix.block_tokens",
            block_tokens,
            f"the prompts would need {total:,} prefix hashes, more than "
            f"{MAX_PREFIX_HASHES:,} (traces.synth.MAX_PREFIX_HASHES)",
            MAX_PREFIX_HASHES,
        )


def generate(spec: SynthSpec, seed: int) -> pd.DataFrame:
    """A canonical trace drawn from ``spec`` with ``numpy.random.default_rng(seed)``.

    Request ids are 0..n-1 in arrival order; arrivals start after 0 (first gap drawn).
    """
    if not (isinstance(seed, int | np.integer) and seed >= 0):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    arrival = arrival_times(
        spec.arrival, rng, num_requests=spec.num_requests, duration_s=spec.duration_s
    )
    n = len(arrival)
    prompt, output = _lengths(spec.lengths, rng, n)
    cols: dict[str, object] = {
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "num_samples": np.full(n, spec.num_samples, dtype=np.int64),
        "beam_width": np.full(n, spec.beam_width, dtype=np.int64),
    }
    if spec.shared_prefix is not None:
        hashes, cols["prompt_tokens"] = _prefix_hashes(spec.shared_prefix, rng, prompt)
        cols["prefix_hashes"] = hashes
        cols["prefix_block_tokens"] = np.full(n, spec.shared_prefix.block_tokens, dtype=np.int64)
    return to_frame(assemble(cols, n))


def _lognormal(mean: float, cv: float, hi: int) -> LognormalTokens:
    return LognormalTokens(mean_tokens=mean, cv=cv, min_tokens=1, max_tokens=hi)


_CHAT = PairLengths(prompt=_lognormal(1155, 1.0, 16_384), output=_lognormal(211, 1.0, 2_048))
_BIMODAL = MixtureLengths(
    components=(
        MixtureComponent(
            weight=0.7,
            lengths=PairLengths(
                prompt=UniformTokens(min_tokens=50, max_tokens=499),
                output=_lognormal(150, 1.0, 1_024),
            ),
        ),
        MixtureComponent(
            weight=0.3,
            lengths=PairLengths(
                prompt=UniformTokens(min_tokens=15_000, max_tokens=30_000),
                output=_lognormal(400, 0.8, 2_048),
            ),
        ),
    )
)
# Hourly multipliers of a weekday (trough at 04:00, peak mid-afternoon), mean 2 req/s.
_DIURNAL_CURVE = tuple(
    round(2.0 * (1.0 + 0.6 * float(np.sin(2 * np.pi * (h - 10) / 24))), 4) for h in range(24)
)

PRESETS: dict[str, SynthSpec] = {
    # The seed's document-analysis mix: 70 % chat (< 500 prompt tokens), 30 % document
    # ingestion (15,000-30,000); Poisson at 0.5 req/s for an hour (about 1,800 requests).
    "bimodal": SynthSpec(
        arrival=PoissonArrival(rate_per_s=0.5), lengths=_BIMODAL, duration_s=3_600
    ),
    # Azure 2023 conversation-like lengths and rate (about 5.4 req/s) for an hour.
    "chat": SynthSpec(arrival=PoissonArrival(rate_per_s=5.4), lengths=_CHAT, duration_s=3_600),
    # The seed's shared 1,500-token system prompt on 80 % of requests, 16-token blocks.
    "system-prompt": SynthSpec(
        arrival=PoissonArrival(rate_per_s=2.0),
        lengths=PairLengths(prompt=_lognormal(300, 1.0, 8_192), output=_lognormal(200, 1.0, 2_048)),
        shared_prefix=SharedPrefix(fraction=0.8, prefix_tokens=1_500, block_tokens=16),
        duration_s=3_600,
    ),
    # The seed's parallel sampling: n = 4 completions of a ~2,000-token prompt.
    "parallel-sampling": SynthSpec(
        arrival=PoissonArrival(rate_per_s=1.0),
        lengths=PairLengths(
            prompt=_lognormal(2_000, 0.3, 8_192), output=_lognormal(300, 0.8, 2_048)
        ),
        num_samples=4,
        duration_s=3_600,
    ),
    "beam-search": SynthSpec(
        arrival=PoissonArrival(rate_per_s=1.0),
        lengths=PairLengths(prompt=_lognormal(500, 0.8, 4_096), output=_lognormal(100, 0.5, 1_024)),
        beam_width=4,
        duration_s=3_600,
    ),
    # Bimodal lengths arriving in bursts: 2 req/s for ~60 s, then 0.1 req/s for ~240 s.
    "bursty-bimodal": SynthSpec(
        arrival=BurstyArrival(on_rate_per_s=2.0, off_rate_per_s=0.1, mean_on_s=60, mean_off_s=240),
        lengths=_BIMODAL,
        duration_s=3_600,
    ),
    # Six days of chat traffic following a daily curve (mean 2 req/s, about 1.04M requests).
    "diurnal-chat-6d": SynthSpec(
        arrival=DiurnalArrival(rate_curve_per_s=_DIURNAL_CURVE, period_s=86_400),
        lengths=_CHAT,
        duration_s=6 * 86_400,
    ),
}
