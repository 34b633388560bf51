"""The summary's ``offload`` section, read off the timeseries' offload columns
(``sim.engine.offload_record``): the counters are cumulative per replica, so a tier's
total is the sum over replicas of each replica's last sample; the pool statistics are
over the periodic samples of replicas up, as ``memory``'s are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import pandas as pd

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


class FreeBlockRatio(TypedDict):
    """A tier's largest free extent over its free memory, over the periodic samples."""

    min: float | None
    mean: float | None
    share_of_samples_below_alert: float | None


class TierRecord(TypedDict):
    """One tier's entry (``sim.results.summary_sections.OffloadTier`` reads it)."""

    kind: str
    allocator: str
    capacity_bytes: int
    hits: int
    misses: int
    hit_tokens: int
    evictions: int
    store_refusals: int
    bytes_down: int
    bytes_up: int
    load_s: float
    mean_used_share: float | None
    min_largest_free_extent_bytes: int | None
    largest_contiguous_free_block_ratio: FreeBlockRatio


class OffloadRecord(TypedDict):
    """The ``offload`` section (``sim.results.summary_sections.Offload`` reads it)."""

    chunk_tokens: int
    loaded_tokens: int
    load_s: float
    tiers: list[TierRecord]


def offload_summary(
    timeseries: pd.DataFrame,
    tiers: Sequence[tuple[str, str]],
    chunk_tokens: int,
    ratio_alert: float,
) -> OffloadRecord | None:
    """The section for ``tiers`` = (kind, allocator kind) in load order; None when the
    timeseries has no offload columns (a run without tiers)."""
    if not tiers or f"offload_{tiers[0][0]}_used_bytes" not in timeseries.columns:
        return None
    last = timeseries.groupby("replica", sort=True).tail(1)
    periodic = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"]]
    out: list[TierRecord] = []
    for kind, allocator in tiers:
        name = f"offload_{kind}_"
        rows = periodic[periodic[name + "capacity_bytes"].notna()]
        total = {c: int(last[f"{name}{c}_total"].fillna(0).sum()) for c in _COUNTERS}
        used = rows[name + "used_bytes"] / rows[name + "capacity_bytes"]
        ratio = rows[name + "largest_contiguous_free_block_ratio"].dropna()
        extent = rows[name + "largest_free_extent_bytes"]
        out.append(
            TierRecord(
                kind=kind,
                allocator=allocator,
                capacity_bytes=int(timeseries[name + "capacity_bytes"].max()),
                hits=total["hits"],
                misses=total["misses"],
                hit_tokens=total["hit_tokens"],
                evictions=total["evictions"],
                store_refusals=total["store_refusals"],
                bytes_down=total["bytes_down"],
                bytes_up=total["bytes_up"],
                load_s=float(last[name + "load_s_total"].fillna(0).sum()),
                mean_used_share=None if rows.empty else float(used.mean()),
                min_largest_free_extent_bytes=None if rows.empty else int(extent.min()),
                largest_contiguous_free_block_ratio=FreeBlockRatio(
                    min=None if ratio.empty else float(ratio.min()),
                    mean=None if ratio.empty else float(ratio.mean()),
                    share_of_samples_below_alert=None
                    if ratio.empty
                    else float((ratio < ratio_alert).mean()),
                ),
            )
        )
    return OffloadRecord(
        chunk_tokens=chunk_tokens,
        loaded_tokens=sum(t["hit_tokens"] for t in out),
        load_s=sum(t["load_s"] for t in out),
        tiers=out,
    )
