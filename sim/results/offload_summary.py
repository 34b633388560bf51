"""The summary's ``offload`` section, read off the timeseries' offload columns
(``sim.engine.offload_record``): the counters are cumulative per replica, so a tier's
total is the sum over replicas of each replica's last sample; the pool statistics are
over the periodic samples of replicas up, as ``memory``'s are."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sim.results.summary_sections import Offload, OffloadTier, RatioStats, finite

TIER_KINDS = ("host", "nvme", "remote")
"""``sim.engine.offload.TIER_KINDS`` (this layer sits below the engine; a test holds
them equal)."""

_COUNTERS = (
    "hits",
    "misses",
    "hit_tokens",
    "evictions",
    "store_refusals",
    "bytes_down",
    "bytes_up",
)


def offload_summary(
    timeseries: pd.DataFrame,
    tiers: Sequence[tuple[str, str]],
    chunk_tokens: int,
    ratio_alert: float,
) -> Offload | None:
    """The section for ``tiers`` = (kind, allocator kind) in load order; None when the
    timeseries has no offload columns (a run without tiers)."""
    if not tiers or f"offload_{tiers[0][0]}_used_bytes" not in timeseries.columns:
        return None
    last = timeseries.groupby("replica", sort=True).tail(1)
    periodic = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"]]
    out: list[OffloadTier] = []
    for kind, allocator in tiers:
        name = f"offload_{kind}_"
        rows = periodic[periodic[name + "capacity_bytes"].notna()]
        total = {c: int(last[f"{name}{c}_total"].fillna(0).sum()) for c in _COUNTERS}
        used = rows[name + "used_bytes"] / rows[name + "capacity_bytes"]
        extent = rows[name + "largest_free_extent_bytes"]
        out.append(
            OffloadTier(
                kind=kind,
                allocator=allocator,
                capacity_bytes=int(timeseries[name + "capacity_bytes"].max()),
                **total,
                load_s=float(last[name + "load_s_total"].fillna(0).sum()),
                mean_used_share=None if rows.empty else finite(float(used.mean())),
                min_largest_free_extent_bytes=None if rows.empty else int(extent.min()),
                largest_contiguous_free_block_ratio=RatioStats.of_samples(
                    rows[name + "largest_contiguous_free_block_ratio"], ratio_alert
                ),
            )
        )
    return Offload(
        chunk_tokens=chunk_tokens,
        loaded_tokens=sum(t.hit_tokens for t in out),
        load_s=sum(t.load_s for t in out),
        tiers=out,
    )
