"""Summary statistics of a trace, computed in one streaming pass.

:func:`describe` takes a DataFrame, an Arrow table, or an iterable of either (chunks of
one trace, in order) and keeps O(distinct token counts + distinct prefix hashes) state,
never the rows. Percentiles are exact (nearest rank over a histogram of the integer
token counts: the smallest value with at least q % of requests at or below it).

Prefix reuse, with an unlimited cache: walking the trace in order, a request's hit is
its longest run of leading prefix-hash blocks already seen in an earlier request, in
tokens (``min(k * prefix_block_tokens, prompt_tokens)``); every hash of the request is
then seen. ``prefix_reuse_token_ratio`` = hit tokens / prompt tokens over the trace;
``prefix_hit_fraction_mean`` = mean over requests with a prompt of hit / prompt tokens.
Both are ``None`` when the trace has no prefix hashes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traces.table import from_frame

PERCENTILES = (50, 90, 99)
DENSE_LIMIT = 1 << 22  # token counts below this are histogrammed densely (32 MiB at most)


@dataclass
class _Histogram:
    """Exact counts of non-negative integers: dense below DENSE_LIMIT, sparse above."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    big_values: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    big_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    total: int = 0

    def add(self, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        self.total += int(values.sum())
        big = values >= DENSE_LIMIT
        if big.any():
            merged = np.concatenate([self.big_values, values[big]])
            weights = np.concatenate([self.big_counts, np.ones(int(big.sum()), dtype=np.int64)])
            self.big_values, inverse = np.unique(merged, return_inverse=True)
            self.big_counts = np.bincount(inverse, weights=weights).astype(np.int64)
            values = values[~big]
        binc = np.bincount(values)
        if len(binc) > len(self.counts):
            binc[: len(self.counts)] += self.counts
            self.counts = binc
        else:
            self.counts[: len(binc)] += binc

    def summary(self) -> dict[str, float | int | None]:
        nz = np.flatnonzero(self.counts)
        values = np.concatenate([nz, self.big_values])
        counts = np.concatenate([self.counts[nz], self.big_counts])
        n = int(counts.sum())
        if n == 0:
            return {"mean": None, "min": None, "max": None, **{f"p{q}": None for q in PERCENTILES}}
        cum = np.cumsum(counts)
        out: dict[str, float | int | None] = {
            "mean": self.total / n,
            "min": int(values[0]),
            "max": int(values[-1]),
        }
        for q in PERCENTILES:
            out[f"p{q}"] = int(values[np.searchsorted(cum, np.ceil(q / 100 * n), side="left")])
        return out


@dataclass
class _PrefixReuse:
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    hit_tokens: int = 0
    prompt_tokens: int = 0
    fraction_sum: float = 0.0
    requests: int = 0
    any_hashes: bool = False

    def add(self, hashes: pa.Array, block: np.ndarray, prompt: np.ndarray) -> None:
        lengths = (
            pc.fill_null(pc.list_value_length(hashes), 0)
            .to_numpy(zero_copy_only=False)
            .astype(np.int64)
        )
        values = pc.list_flatten(hashes).to_numpy(zero_copy_only=False).astype(np.int64)
        hit_blocks = np.zeros(len(lengths), dtype=np.int64)
        if len(values):
            self.any_hashes = True
            row = np.repeat(np.arange(len(lengths)), lengths)
            starts = np.cumsum(lengths) - lengths
            pos = np.arange(len(values)) - np.repeat(starts, lengths)
            uniq, first_idx, inverse = np.unique(values, return_index=True, return_inverse=True)
            seen_before_chunk = np.isin(uniq, self.seen, assume_unique=True)
            seen = seen_before_chunk[inverse] | (row[first_idx][inverse] < row)
            key = np.where(seen, len(values) + 1, pos)  # position of the first unseen block
            has = lengths > 0
            first_miss = (
                np.minimum.reduceat(key, starts[has]) if has.any() else np.zeros(0, np.int64)
            )
            hit_blocks[has] = np.minimum(first_miss, lengths[has])
            self.seen = np.union1d(self.seen, uniq)
        hit = np.minimum(hit_blocks * block, prompt)
        self.hit_tokens += int(hit.sum())
        self.prompt_tokens += int(prompt.sum())
        with_prompt = prompt > 0
        self.fraction_sum += float((hit[with_prompt] / prompt[with_prompt]).sum())
        self.requests += int(with_prompt.sum())

    def summary(self) -> dict[str, float | int | None]:
        if not self.any_hashes:
            return {
                "prefix_reuse_token_ratio": None,
                "prefix_hit_fraction_mean": None,
                "prefix_hit_tokens": None,
                "distinct_prefix_blocks": 0,
            }
        return {
            "prefix_reuse_token_ratio": self.hit_tokens / self.prompt_tokens
            if self.prompt_tokens
            else 0.0,
            "prefix_hit_fraction_mean": self.fraction_sum / self.requests if self.requests else 0.0,
            "prefix_hit_tokens": self.hit_tokens,
            "distinct_prefix_blocks": len(self.seen),
        }


def _tables(
    source: pd.DataFrame | pa.Table | Iterable[pd.DataFrame | pa.Table],
) -> Iterable[pa.Table]:
    chunks = [source] if isinstance(source, pd.DataFrame | pa.Table) else source
    for chunk in chunks:
        yield from_frame(chunk) if isinstance(chunk, pd.DataFrame) else chunk


def describe(
    source: pd.DataFrame | pa.Table | Iterable[pd.DataFrame | pa.Table],
) -> dict[str, object]:
    """Rows, span, rate, token-length statistics and prefix reuse of a trace (see module doc).

    Keys: ``rows``, ``first_arrival_s``, ``span_s`` (last - first arrival), ``rate_per_s``
    (rows / span; None for a zero span), ``prompt_tokens`` and ``output_tokens`` (dicts of
    mean/min/max/p50/p90/p99), ``total_prompt_tokens``, ``total_output_tokens``,
    ``num_samples_mean``, ``beam_width_mean``, ``sessions``, and the prefix-reuse keys.
    """
    prompt_h, output_h, reuse = _Histogram(), _Histogram(), _PrefixReuse()
    rows = 0
    first = last = None
    samples = beams = 0
    sessions = np.zeros(0, dtype=np.int64)
    for t in _tables(source):
        if t.num_rows == 0:
            continue
        arrival = t.column("arrival_s").to_numpy()
        lo, hi = float(arrival.min()), float(arrival.max())
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
        prompt = t.column("prompt_tokens").to_numpy()
        prompt_h.add(prompt)
        output_h.add(t.column("output_tokens").to_numpy())
        reuse.add(
            t.column("prefix_hashes").combine_chunks(),
            t.column("prefix_block_tokens").to_numpy(),
            prompt,
        )
        samples += int(pc.sum(t.column("num_samples")).as_py())
        beams += int(pc.sum(t.column("beam_width")).as_py())
        sid = t.column("session_id").drop_null()
        if len(sid):
            sessions = np.union1d(sessions, sid.to_numpy())
        rows += t.num_rows
    span = (last - first) if first is not None and last is not None else 0.0
    return {
        "rows": rows,
        "first_arrival_s": first,
        "span_s": span,
        "rate_per_s": rows / span if span > 0 else None,
        "prompt_tokens": prompt_h.summary(),
        "output_tokens": output_h.summary(),
        "total_prompt_tokens": prompt_h.total,
        "total_output_tokens": output_h.total,
        "num_samples_mean": samples / rows if rows else None,
        "beam_width_mean": beams / rows if rows else None,
        "sessions": len(sessions),
        **reuse.summary(),
    }
