"""Arrival processes for synthetic traces and for length-only files.

Each spec is a pydantic model (validated at the config edge, ``extra="forbid"``) with a
``kind`` tag so a scenario YAML can pick one. :func:`arrival_times` draws the arrival
times, in seconds from 0, non-decreasing, from the caller's ``numpy.random.Generator``:
exactly ``num_requests`` of them, or every arrival before ``duration_s``.

- ``poisson``: exponential gaps at ``rate_per_s``.
- ``gamma``: Gamma-distributed gaps with mean ``1 / rate_per_s`` and coefficient of
  variation ``cv`` (cv = 1 is Poisson; > 1 is burstier).
- ``diurnal``: a non-homogeneous Poisson process whose rate follows ``rate_curve_per_s``
  (piecewise constant, equal segments over ``period_s``, repeating), drawn by time
  rescaling: unit-rate Poisson points mapped through the inverse cumulative rate.
- ``bursty``: on/off modulated Poisson; on and off periods are exponential with means
  ``mean_on_s`` / ``mean_off_s``, the rate is ``on_rate_per_s`` / ``off_rate_per_s``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

_CFG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

# Ranges every number of an arrival spec must lie in (finite; docs/errors-and-bounds.md).
MAX_RATE_PER_S = 1e6
MIN_PERIOD_S, MAX_PERIOD_S = 1e-6, 1e9  # bursty mean on/off period lengths
MIN_DIURNAL_PERIOD_S = 1.0  # a diurnal cycle: [1, 1e9] s
MIN_CV, MAX_CV = 1e-3, 100.0


class PoissonArrival(BaseModel):
    """Poisson arrivals (exponential inter-arrival gaps)."""

    model_config = _CFG
    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(
        gt=0, le=MAX_RATE_PER_S, description="Mean arrival rate, requests per second."
    )


class GammaArrival(BaseModel):
    """Renewal arrivals with Gamma gaps: mean 1/rate, coefficient of variation ``cv``."""

    model_config = _CFG
    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(
        gt=0, le=MAX_RATE_PER_S, description="Mean arrival rate, requests per second."
    )
    cv: float = Field(
        ge=MIN_CV, le=MAX_CV, description="Coefficient of variation of the gaps (1 = Poisson)."
    )


class DiurnalArrival(BaseModel):
    """Poisson arrivals whose rate follows a repeating piecewise-constant curve."""

    model_config = _CFG
    kind: Literal["diurnal"] = "diurnal"
    rate_curve_per_s: tuple[Annotated[float, Field(ge=0, le=MAX_RATE_PER_S)], ...] = Field(
        max_length=10_000,
        description="Rate in each equal segment of the period, requests per second (>= 0, not all 0).",
    )
    period_s: float = Field(
        default=86_400.0,
        ge=MIN_DIURNAL_PERIOD_S,
        le=MAX_PERIOD_S,
        description="Length of one cycle of the curve, seconds.",
    )

    @field_validator("rate_curve_per_s")
    @classmethod
    def _rates(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        # Not min_length: pydantic would add a second, misleading error when an item fails.
        if not value or max(value) <= 0:
            raise ValueError("give at least one rate; rates must be >= 0 and not all 0")
        return value


class BurstyArrival(BaseModel):
    """On/off modulated Poisson arrivals with exponential period lengths."""

    model_config = _CFG
    kind: Literal["bursty"] = "bursty"
    on_rate_per_s: float = Field(
        gt=0, le=MAX_RATE_PER_S, description="Arrival rate while on, requests per second."
    )
    off_rate_per_s: float = Field(
        default=0.0, ge=0, le=MAX_RATE_PER_S, description="Arrival rate while off."
    )
    mean_on_s: float = Field(
        ge=MIN_PERIOD_S, le=MAX_PERIOD_S, description="Mean length of an on period, seconds."
    )
    mean_off_s: float = Field(
        ge=MIN_PERIOD_S, le=MAX_PERIOD_S, description="Mean length of an off period, seconds."
    )


ArrivalSpec = Annotated[
    PoissonArrival | GammaArrival | DiurnalArrival | BurstyArrival, Field(discriminator="kind")
]


def mean_rate_per_s(spec: ArrivalSpec) -> float:
    """Long-run mean arrival rate of ``spec``, requests per second."""
    if isinstance(spec, PoissonArrival | GammaArrival):
        return spec.rate_per_s
    if isinstance(spec, DiurnalArrival):
        return float(np.mean(spec.rate_curve_per_s))
    on, off = spec.mean_on_s, spec.mean_off_s
    return (spec.on_rate_per_s * on + spec.off_rate_per_s * off) / (on + off)


def rate_periods(spec: ArrivalSpec, span_s: float) -> float:
    """About how many rate periods (diurnal curve segments, bursty on/off periods) a
    draw of arrivals over ``span_s`` seconds walks through; 0 for renewal processes."""
    if isinstance(spec, DiurnalArrival):
        return span_s * len(spec.rate_curve_per_s) / spec.period_s
    if isinstance(spec, BurstyArrival):
        return 2 * span_s / (spec.mean_on_s + spec.mean_off_s)
    return 0.0


def arrival_times(
    spec: ArrivalSpec,
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Arrival times in seconds (float64, sorted, first gap drawn from 0).

    Exactly one of ``num_requests`` / ``duration_s`` must be given.
    """
    if (num_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of num_requests and duration_s")
    if mean_rate_per_s(spec) <= 0:
        raise ValueError("the arrival process has a mean rate of 0")
    if isinstance(spec, PoissonArrival | GammaArrival):
        return _renewal(spec, rng, num_requests, duration_s)
    if isinstance(spec, DiurnalArrival):
        rates = np.asarray(spec.rate_curve_per_s, dtype=np.float64)
        seg_s = spec.period_s / len(rates)
        return _rescaled(
            lambda k: (np.full(k, seg_s), np.tile(rates, -(-k // len(rates)))[:k]),
            rng,
            num_requests,
            duration_s,
            len(rates),
        )
    on_rate, off_rate = spec.on_rate_per_s, spec.off_rate_per_s
    mean_on, mean_off = spec.mean_on_s, spec.mean_off_s

    def periods(k: int) -> tuple[np.ndarray, np.ndarray]:
        pairs = -(-k // 2)
        lengths = np.empty(2 * pairs)
        lengths[0::2] = rng.exponential(mean_on, pairs)
        lengths[1::2] = rng.exponential(mean_off, pairs)
        rates = np.tile([on_rate, off_rate], pairs)
        return lengths[:k], rates[:k]

    return _rescaled(periods, rng, num_requests, duration_s, 64)


def _renewal(
    spec: PoissonArrival | GammaArrival,
    rng: np.random.Generator,
    n: int | None,
    duration_s: float | None,
) -> np.ndarray:
    def gaps(k: int) -> np.ndarray:
        if isinstance(spec, PoissonArrival):
            return rng.exponential(1.0 / spec.rate_per_s, k)
        shape = 1.0 / spec.cv**2
        return rng.gamma(shape, 1.0 / (shape * spec.rate_per_s), k)

    if n is not None:
        return np.cumsum(gaps(n))
    assert duration_s is not None
    out: list[np.ndarray] = []
    t = 0.0
    batch = max(16, int(duration_s * spec.rate_per_s * 1.1) + 16)
    while t < duration_s:
        times = t + np.cumsum(gaps(batch))
        out.append(times)
        t = float(times[-1])
    times = np.concatenate(out)
    return times[times < duration_s]


def _rescaled(
    periods: Callable[[int], tuple[np.ndarray, np.ndarray]],
    rng: np.random.Generator,
    n: int | None,
    duration_s: float | None,
    batch: int,
) -> np.ndarray:
    """Non-homogeneous Poisson by time rescaling over piecewise-constant rate periods.

    ``periods(k)`` returns the next k (length_s, rate_per_s) pairs; they are drawn lazily
    until they cover the needed cumulative intensity (or duration).
    """
    if n is not None:
        marks = np.cumsum(rng.exponential(1.0, n))
        need_mass, need_time = float(marks[-1]) if n else 0.0, 0.0
    else:
        assert duration_s is not None
        marks = None
        need_mass, need_time = 0.0, duration_s
    lengths_l: list[np.ndarray] = []
    rates_l: list[np.ndarray] = []
    mass = time = 0.0
    while (n is not None and mass < need_mass) or (n is None and time < need_time):
        lengths, rates = periods(batch)
        lengths_l.append(lengths)
        rates_l.append(rates)
        mass += float(np.sum(lengths * rates))
        time += float(np.sum(lengths))
    lengths = np.concatenate(lengths_l) if lengths_l else np.zeros(0)
    rates = np.concatenate(rates_l) if rates_l else np.zeros(0)
    starts = np.concatenate([[0.0], np.cumsum(lengths)])
    cum_mass = np.concatenate([[0.0], np.cumsum(lengths * rates)])
    if marks is None:
        total = float(np.interp(need_time, starts, cum_mass))
        count = rng.poisson(total) if total > 0 else 0
        marks = np.sort(rng.uniform(0.0, total, count))
    seg = np.clip(np.searchsorted(cum_mass, marks, side="right") - 1, 0, max(len(rates) - 1, 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        offset = np.where(rates[seg] > 0, (marks - cum_mass[seg]) / rates[seg], 0.0)
    times = starts[seg] + offset
    return np.maximum.accumulate(times) if len(times) else times
