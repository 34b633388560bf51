"""The offload tiers' columns of ``timeseries.parquet``: one set per tier kind, named
``offload_<kind>_<metric>`` (``offload_host_used_bytes``), joined to the table only in
runs with tiers (every other run's table is as before).

Each sample of a replica appends one value to every column of every tier kind the run
has seen: NaN where that replica has no such tier. A kind first seen late (a fleet whose
pools differ) is backfilled with NaN. Values are floats (NaN needs them); the counters
(``*_total``) run on from the replica's start, across restarts.
"""

from __future__ import annotations

import math

import pandas as pd

from sim.engine.offload import TIER_KINDS, OffloadTiers, Tier, tier_ratio

METRICS: tuple[str, ...] = (
    "capacity_bytes",
    "used_bytes",
    "free_bytes",
    "largest_free_extent_bytes",
    "free_extent_count",
    "largest_contiguous_free_block_ratio",
    "objects",
    "hits_total",
    "misses_total",
    "hit_tokens_total",
    "evictions_total",
    "store_refusals_total",
    "bytes_down_total",
    "bytes_up_total",
    "load_s_total",
)
"""Each tier's metrics, in column order: the tier's pool as its allocator reports it (in
bytes: token slots x the replica's KV bytes per token; the ratio is the seed's largest
free extent / total free, NaN when full) and its counters (``sim.engine.offload.Tier``)."""


def column(kind: str, metric: str) -> str:
    return f"offload_{kind}_{metric}"


def tier_values(tier: Tier) -> list[float]:
    """One sample of ``tier``, in :data:`METRICS` order."""
    s = tier.allocator.stats()
    bpt = tier.kv_bytes_per_token
    return [
        float(s.capacity_tokens * bpt),
        float(s.used_tokens * bpt),
        float(s.free_tokens * bpt),
        float(s.largest_free_extent_tokens * bpt),
        float(s.free_extent_count),
        tier_ratio(s.free_tokens, s.largest_free_extent_tokens),
        float(len(tier.objects)),
        float(tier.hits),
        float(tier.misses),
        float(tier.hit_tokens),
        float(tier.evictions),
        float(tier.store_refusals),
        float(tier.bytes_down),
        float(tier.bytes_up),
        tier.load_s,
    ]


class OffloadSamples:
    """The tiers' columns as recorded (see the module docstring)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[float]] = {}
        self.kinds: list[str] = []
        self.rows = 0

    def add(self, offload: OffloadTiers | None) -> None:
        """Append one sample of a replica's tiers (None: it has none)."""
        if offload is not None:
            for tier in offload.tiers:
                if tier.spec.kind not in self.kinds:
                    self._start(tier.spec.kind)
        if not self.kinds:
            self.rows += 1
            return
        columns = self.columns
        seen: set[str] = set()
        if offload is not None:
            for tier in offload.tiers:
                kind = tier.spec.kind
                seen.add(kind)
                for metric, value in zip(METRICS, tier_values(tier), strict=True):
                    columns[column(kind, metric)].append(value)
        for kind in self.kinds:
            if kind not in seen:
                for metric in METRICS:
                    columns[column(kind, metric)].append(math.nan)
        self.rows += 1

    def _start(self, kind: str) -> None:
        self.kinds.append(kind)
        for metric in METRICS:
            self.columns[column(kind, metric)] = [math.nan] * self.rows

    def frame(self) -> pd.DataFrame:
        """The columns, tier kinds in :data:`TIER_KINDS` order."""
        names = [column(k, m) for k in TIER_KINDS if k in self.kinds for m in METRICS]
        return pd.DataFrame({name: self.columns[name] for name in names})
