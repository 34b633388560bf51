"""The summary's ``offload`` section, read off the timeseries' offload columns
(``sim.engine.offload_record``): the counters are cumulative per replica, so a tier's
total is the sum over replicas of each replica's last sample; the pool statistics are
over the periodic samples of replicas up, as ``memory``'s are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def offload_summary(
    timeseries: pd.DataFrame,
    tiers: Sequence[tuple[str, str]],
    chunk_tokens: int,
    ratio_alert: float,
) -> dict[str, Any] | None:
    """The section for ``tiers`` = (kind, allocator kind) in load order; None when the
    timeseries has no offload columns (a run without tiers)."""
    if not tiers or f"offload_{tiers[0][0]}_used_bytes" not in timeseries.columns:
        return None
    last = timeseries.groupby("replica", sort=True).tail(1)
    periodic = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"]]
    out = []
    for kind, allocator in tiers:
        name = f"offload_{kind}_"
        rows = periodic[periodic[name + "capacity_bytes"].notna()]
        entry: dict[str, Any] = {
            "kind": kind,
            "allocator": allocator,
            "capacity_bytes": int(timeseries[name + "capacity_bytes"].max()),
        }
        for counter in _COUNTERS:
            entry[counter] = int(last[f"{name}{counter}_total"].fillna(0).sum())
        entry["load_s"] = float(last[name + "load_s_total"].fillna(0).sum())
        used = rows[name + "used_bytes"] / rows[name + "capacity_bytes"]
        ratio = rows[name + "largest_contiguous_free_block_ratio"].dropna()
        extent = rows[name + "largest_free_extent_bytes"]
        entry["mean_used_share"] = None if rows.empty else float(used.mean())
        entry["min_largest_free_extent_bytes"] = None if rows.empty else int(extent.min())
        entry["largest_contiguous_free_block_ratio"] = {
            "min": None if ratio.empty else float(ratio.min()),
            "mean": None if ratio.empty else float(ratio.mean()),
            "share_of_samples_below_alert": None
            if ratio.empty
            else float((ratio < ratio_alert).mean()),
        }
        out.append(entry)
    return {
        "chunk_tokens": chunk_tokens,
        "loaded_tokens": sum(t["hit_tokens"] for t in out),
        "load_s": sum(t["load_s"] for t in out),
        "tiers": out,
    }
