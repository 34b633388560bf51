"""The OpenMetrics families of a run's KV offload tiers (``fragsim export openmetrics``
of a run with ``kv_offload``; none otherwise): one family per tier and metric, named
``fragsim_offload_<kind>_<metric>`` after the timeseries column it reads
(``offload_<kind>_<metric>``, ``sim.engine.offload_record``), labelled by replica and
pool as every per-replica family. Gauges (the tier's pool) are written at each periodic
or final row, as the GPU pool's are; counters on the scrape clock, as
``fragsim_preemptions`` is. A family per tier rather than a ``tier`` label: OpenMetrics
writes each family whole, and the families of the GPU pool are written replica by
replica from one column each."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from sim.results.summary_model import Summary
from sim.telemetry.openmetrics_counters import column_updates
from sim.telemetry.openmetrics_format import Family

GAUGES: tuple[tuple[str, str, str, str], ...] = (
    ("capacity_bytes", "capacity_bytes", "bytes", "KV capacity of the tier."),
    ("used_bytes", "used_bytes", "bytes", "Tier memory holding stored KV objects."),
    ("free_bytes", "free_bytes", "bytes", "Free tier memory."),
    (
        "largest_free_extent_bytes",
        "largest_free_extent_bytes",
        "bytes",
        "Largest free extent of the tier's allocator.",
    ),
    (
        "largest_contiguous_free_block_ratio",
        "largest_contiguous_free_block_ratio",
        "ratio",
        "Largest free extent / total free tier memory (NaN when full).",
    ),
    ("objects", "objects", "", "KV objects the tier holds."),
)
"""(column metric, family suffix, unit, help) of the tier's gauges."""

COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("hits_total", "hits", "", "Admissions that loaded KV from the tier."),
    ("misses_total", "misses", "", "Admissions with chunks to find that the tier had none of."),
    ("hit_tokens_total", "hit_tokens", "tokens", "Prompt tokens loaded from the tier."),
    ("evictions_total", "evictions", "", "Objects evicted (LRU)."),
    ("store_refusals_total", "store_refusals", "", "Stores larger than the tier."),
    ("bytes_down_total", "down_bytes", "bytes", "Bytes copied into the tier."),
    ("bytes_up_total", "up_bytes", "bytes", "Bytes loaded from the tier toward the GPU."),
    ("load_s_total", "load_seconds", "seconds", "Time the tier's loads added to steps (TTFT)."),
)
"""(column metric, family suffix, unit, help) of the tier's counters."""


def offload_families(summary: Summary) -> list[Family]:
    """The families of the run's tiers (none without ``offload`` in the summary), each
    reading its timeseries column."""
    if summary.offload is None:
        return []
    out = []
    for tier in summary.offload.tiers:
        kind = tier.kind
        for metric, suffix, unit, text in GAUGES:
            out.append(
                Family(
                    f"fragsim_offload_{kind}_{suffix}",
                    "gauge",
                    unit,
                    f"{kind} tier: {text}",
                    f"offload_{kind}_{metric}",
                )
            )
        for metric, suffix, unit, text in COUNTERS:
            out.append(
                Family(
                    f"fragsim_offload_{kind}_{suffix}",
                    "counter",
                    unit,
                    f"{kind} tier: {text}",
                    f"offload_{kind}_{metric}",
                )
            )
    return out


def known_updates(timeseries: Path, column: str) -> Iterator[tuple[float, int, float]]:
    """``column_updates`` of the replicas that have the tier (a NaN row: a replica of a
    pool without it)."""
    for t, replica, value in column_updates(timeseries, column):
        if not math.isnan(value):
            yield t, replica, value
