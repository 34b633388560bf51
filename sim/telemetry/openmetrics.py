"""A run's timeseries as OpenMetrics text with timestamps, for backfilling a real
Prometheus (``promtool tsdb create-blocks-from openmetrics FILE DATA_DIR``).

Time. Simulated second ``t`` is the wall-clock instant ``origin + t`` (``origin``: a
Unix time in seconds, default :data:`DEFAULT_ORIGIN_S` = 2024-01-01T00:00:00Z, fixed so
the same run gives the same bytes). Timestamps are written in seconds with three
decimals: Prometheus stores milliseconds, so two samples of one series in the same
millisecond are one sample (the first row at that instant is kept).

Series. Each per-replica metric of :data:`REPLICA_METRICS` has one series per replica
with labels ``replica`` (fragsim's replica id) and ``pool`` (the node pool the replica
was made in: the summary's ``fleet.pools[].replicas``, which list the autoscaler's
replicas in the pool it added them to; a run folder written before those lists: the
pools in order hold the initial replicas, by their counts, and later replicas the
first pool, fragsim's default scale pool; a single-replica run has pool
``default``). Every periodic or final row of ``timeseries.parquet`` is one sample of
each gauge: the rows sampled at an allocation failure (``trigger`` ``failure``) are not
in the gauges, since a scrape reads a gauge on its own clock and the alerts never see
them (:func:`sim.telemetry.alerts.scraped`) -- with them, a rule over the backfilled gauges
would fire where ``alerts.parquet`` does not. A gauge sampled every ``sample_interval_s``
reads in Prometheus as the alerts read it (the latest periodic sample at or before a
scrape) while that interval is within Prometheus's 5-minute look-back; writing the
gauges at every scrape would multiply the file for the same readings. The counters
(``fragsim_preemptions``, and ``fragsim_allocation_failures_at_high_free_memory``,
which counts a replica's allocation failures -- ``admission_failure`` /
``growth_failure`` events -- whose free share exceeded ``high_free_share``) are written
on the scrape clock instead (:mod:`sim.telemetry.openmetrics_counters`): at each scrape
instant of a replica, the value a Prometheus scraping every ``scrape_interval_s`` would
have read, so ``increase()`` over the failure rule's window sees each failure
``alerts.parquet`` counts, however sparsely the run was sampled. From ``fleet.parquet`` (fleet
runs only), ``fragsim_fleet_replicas{state=...}`` counts the replicas in each
lifecycle state. ``ALERTS`` and ``ALERTS_FOR_STATE`` are the exported rules' alerts as
Prometheus's rule evaluation would have written them (:mod:`sim.telemetry.openmetrics_alerts`;
``--no-alerts`` leaves them out). Free and largest free memory are also written in bytes, at the KV
bytes per token of a replica the summary records for its pool (``kv_bytes_per_token``;
``fleet.pools[].kv_bytes_per_token`` where pools differ), or the number given, which
overrides it; a run folder that records none (written before fragsim did) gets no
byte families unless the number is given.

Correlation. ``fragsim_node_uptime_vs_fragmentation_correlation`` is the seed's
uptime-trend statistic as ``fragsim alerts`` evaluates it
(:func:`sim.telemetry.alerts.uptime_correlation`, the function that writes
``alerts.parquet``): at each scrape instant ``t_k = t_0 + k * scrape_interval_s`` of
the run (:func:`sim.telemetry.alerts.scrape_times`) where a replica reports
(:func:`sim.telemetry.alerts.scraped`: up, between its first and final samples; and not
after its last periodic or final sample: a replica scaled down is sampled no more, and
no row says it is gone), Spearman's rho of (uptime, 1 - ratio) over its scrapes of the
last ``trend_window_s``; NaN where there is no rho (a NaN ratio in the window, fewer
than two scrapes, a constant series) and at the first scrape after each stretch a
replica reports (where a live exporter's series would go stale: a rule reading it
stops at once rather than after Prometheus's 5-minute look-back). The exported rule ``node_uptime_vs_fragmentation_correlation``
(:mod:`sim.telemetry.prometheus`) thresholds it: PromQL has no ranks. The scrape interval
and trend window must be the run's (the summary's ``fleet.alerts``, which
``fragsim export openmetrics`` reads) for the counters and this gauge to fire where
``alerts.parquet`` does.

Layout. Each metric family is written whole (``# HELP``, ``# TYPE``, ``# UNIT``, then
its samples: families are never interleaved); within a family the samples follow
the table's order (time, then replica), so each series is in time order; the file
ends with ``# EOF``. A family's samples are read from the Parquet file batch by batch
(:data:`BATCH_ROWS` rows, only the columns it needs): memory does not grow with the
run's length, except for the correlation, which holds the periodic samples' uptime and
ratio (and one replica's scrapes at a time), as the run's own alert evaluation did, and
the scrape clock's instants and the failure times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np
import pyarrow.parquet as pq

from sim.results.seed_alerts import FAILURE_KINDS
from sim.results.summary_model import Summary
from sim.telemetry.alerts import scraped, trend_window_scrapes, uptime_correlation
from sim.telemetry.openmetrics_alerts import AlertInputs, write_alert_families
from sim.telemetry.openmetrics_counters import (
    ScrapeClock,
    column_updates,
    counter_family,
    failure_updates,
    scrape_clock,
)
from sim.telemetry.openmetrics_format import (
    Family,
    Labels,
    batches,
    header,
    number,
    stamp,
    timestamps_ms,
)
from sim.telemetry.openmetrics_offload import known_updates, offload_families

DEFAULT_ORIGIN_S = 1_704_067_200
"""2024-01-01T00:00:00Z: simulated time 0 in the exported timestamps."""
FAILURE_TRIGGER = "failure"
"""The ``trigger`` of a timeseries row sampled at an allocation failure (not scraped)."""
LIFECYCLE_STATES = ("provisioning", "loading", "warming", "active", "draining", "down")
"""The state columns of ``fleet.parquet``."""


REPLICA_METRICS: tuple[Family, ...] = (
    Family(
        "fragsim_largest_contiguous_free_block_ratio",
        "gauge",
        "ratio",
        "Largest usable free KV extent / total free KV memory (NaN when nothing is free).",
        "largest_contiguous_free_block_ratio",
    ),
    Family(
        "fragsim_kv_capacity_tokens", "gauge", "tokens", "KV-cache capacity.", "capacity_tokens"
    ),
    Family("fragsim_kv_used_tokens", "gauge", "tokens", "KV slots holding tokens.", "used_tokens"),
    Family("fragsim_kv_free_tokens", "gauge", "tokens", "Free KV slots.", "free_tokens"),
    Family(
        "fragsim_kv_largest_free_extent_tokens",
        "gauge",
        "tokens",
        "Largest usable free KV extent.",
        "largest_free_extent_tokens",
    ),
    Family(
        "fragsim_kv_free_extents", "gauge", "", "Number of free KV extents.", "free_extent_count"
    ),
    Family(
        "fragsim_node_uptime_seconds",
        "gauge",
        "seconds",
        "Time since the last restart.",
        "uptime_s",
    ),
    Family("fragsim_running_requests", "gauge", "", "Requests in the batch.", "running_requests"),
    Family("fragsim_waiting_requests", "gauge", "", "Requests queued.", "waiting_requests"),
    Family("fragsim_preemptions", "counter", "", "Preemptions so far.", "preemptions_total"),
)
"""The per-replica families read straight from ``timeseries.parquet``."""

BYTE_METRICS: tuple[Family, ...] = (
    Family("fragsim_kv_free_bytes", "gauge", "bytes", "Free KV memory.", "free_tokens"),
    Family(
        "fragsim_kv_largest_free_extent_bytes",
        "gauge",
        "bytes",
        "Largest usable free KV extent.",
        "largest_free_extent_tokens",
    ),
)
"""Written when the KV bytes per token are known (times each replica's bytes per token)."""

UPTIME_CORRELATION = Family(
    "fragsim_node_uptime_vs_fragmentation_correlation",
    "gauge",
    "",
    "Spearman rho of (uptime, 1 - largest_contiguous_free_block_ratio) over this "
    "replica's scrapes of the last trend window (NaN: no rho).",
    "",
)
"""The seed's ``node_uptime_vs_fragmentation_correlation`` at each scrape (module
docstring); named as :data:`sim.telemetry.prometheus.METRICS` names it (a test holds them
equal)."""
CORRELATION_COLUMNS = (
    "time_s",
    "replica",
    "trigger",
    "up",
    "uptime_s",
    "largest_contiguous_free_block_ratio",
)
"""The timeseries columns the correlation reads (:func:`sim.telemetry.alerts.scraped`)."""

FAILURES = Family(
    "fragsim_allocation_failures_at_high_free_memory",
    "counter",
    "",
    "Allocation failures while more than the high-free share of KV memory was free.",
    "",
)
REPLICAS_BY_STATE = Family(
    "fragsim_fleet_replicas", "gauge", "", "Replicas in each lifecycle state.", ""
)


def _pool_index(summary: Summary) -> Callable[[int], int] | None:
    """Replica id -> the index of its pool in the summary's ``fleet.pools``; None for a
    single-replica run (module docstring)."""
    if summary.fleet is None:
        return None
    pools = summary.fleet.pools
    listed = [p.replicas for p in pools]
    if all(replicas is not None for replicas in listed):
        member = {int(r): i for i, replicas in enumerate(listed) for r in replicas or ()}
        return lambda replica: member.get(replica, 0)
    ends: list[int] = []
    end = 0
    for p in pools:
        end += int(p.count)
        ends.append(end)

    def index(replica: int) -> int:
        return next((i for i, end_id in enumerate(ends) if replica < end_id), 0)

    return index


def pool_of(summary: Summary) -> Callable[[int], str]:
    """Replica id -> its pool's name (module docstring)."""
    index = _pool_index(summary)
    if index is None or summary.fleet is None:
        return lambda _replica: "default"
    names = [p.name for p in summary.fleet.pools]
    return lambda replica: names[index(replica)]


def kv_bytes_per_token_of(summary: Summary) -> Callable[[int], int] | None:
    """Replica id -> the KV bytes per token the summary records for its pool (the
    pool's own where pools record one, else the run's); None where the summary records
    none (a run folder written before fragsim recorded it)."""
    index = _pool_index(summary)
    pools = summary.fleet.pools if index is not None and summary.fleet is not None else []
    per_pool = [p.kv_bytes_per_token for p in pools]
    if index is not None and all(b is not None for b in per_pool):
        known = [int(b or 0) for b in per_pool]
        return lambda replica: known[index(replica)]
    run_wide = summary.kv_bytes_per_token
    if run_wide is not None:
        return lambda _replica: run_wide
    return None


def _replica_family(
    out: TextIO,
    family: Family,
    timeseries: Path,
    origin_s: float,
    labels: Labels,
    value_at: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
) -> None:
    """One per-replica gauge: a sample per periodic or final timeseries row, the first
    row of a replica at each millisecond."""
    header(out, family)
    columns = ["time_s", "replica", "trigger", family.column]
    last_ms: dict[int, int] = {}
    for batch in batches(timeseries, columns):
        values = batch[family.column] if value_at is None else value_at(batch)
        for replica, ms, value, trigger in zip(
            batch["replica"].tolist(),
            timestamps_ms(batch["time_s"], origin_s).tolist(),
            values.tolist(),
            batch["trigger"].tolist(),
            strict=True,
        ):
            if trigger == FAILURE_TRIGGER:
                continue
            before = last_ms.get(replica)
            if before is not None and ms <= before:
                continue
            last_ms[replica] = ms
            out.write(f"{family.name}{labels(replica)} {number(value)} {stamp(ms)}\n")


def high_free_failures(events: Path, high_free_share: float) -> dict[int, np.ndarray]:
    """Replica -> the sorted times of its allocation failures above ``high_free_share``
    (read batch by batch; only the failures are kept)."""
    found: dict[int, list[np.ndarray]] = {}
    columns = ["time_s", "replica", "kind", "free_share"]
    for batch in batches(events, columns):
        kind = batch["kind"].astype(str)
        hit = np.isin(kind, FAILURE_KINDS) & (batch["free_share"] > high_free_share)
        for replica in np.unique(batch["replica"][hit]).tolist():
            mine = hit & (batch["replica"] == replica)
            found.setdefault(int(replica), []).append(batch["time_s"][mine].astype(float))
    return {r: np.sort(np.concatenate(parts)) for r, parts in found.items()}


def _fleet_family(out: TextIO, fleet: Path, origin_s: float) -> None:
    header(out, REPLICAS_BY_STATE)
    for state in LIFECYCLE_STATES:
        last = -1
        for batch in batches(fleet, ["time_s", state]):
            for ms, value in zip(
                timestamps_ms(batch["time_s"], origin_s).tolist(),
                batch[state].tolist(),
                strict=True,
            ):
                if ms <= last:
                    continue
                last = ms
                out.write(
                    f'{REPLICAS_BY_STATE.name}{{state="{state}"}} {number(value)} {stamp(ms)}\n'
                )


def _per_replica(
    column: str, factor: Callable[[int], int]
) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A batch's ``column`` times each row's replica's ``factor``."""

    def values(batch: dict[str, np.ndarray]) -> np.ndarray:
        replicas = batch["replica"]
        unique, where = np.unique(replicas, return_inverse=True)
        scale = np.array([factor(int(r)) for r in unique.tolist()], dtype=np.int64)
        return batch[column] * scale[where]

    return values


def _correlation_family(
    out: TextIO,
    timeseries: Path,
    origin_s: float,
    labels: Labels,
    clock: ScrapeClock,
    scrape_interval_s: float,
    trend_window_s: float,
) -> None:
    """The correlation gauge (module docstring): each replica's series whole, in time
    order, replica by replica."""
    header(out, UPTIME_CORRELATION)
    times = clock.times_s
    if not len(times):
        return
    stamps = timestamps_ms(times, origin_s).tolist()
    window = trend_window_scrapes(trend_window_s, scrape_interval_s)
    kept = pq.read_table(
        timeseries,
        columns=list(CORRELATION_COLUMNS),
        filters=[("trigger", "in", ["periodic", "final"])],
    ).to_pandas()
    kept["trigger"] = kept["trigger"].astype(str)
    for replica, rows in kept.groupby("replica", sort=True):
        # its scrapes from its first sample to the first after its last (none has data
        # before: the windows are the same as over the whole run)
        first_s, last_s = float(rows["time_s"].min()), float(rows["time_s"].max())
        lo = int(np.searchsorted(times, first_s, side="left"))
        hi = min(len(times), int(np.searchsorted(times, last_s, side="right")) + 1)
        scrapes = scraped(rows, times[lo:hi], int(replica))
        # reporting: as the alerts read it, and not after its last sample (a replica
        # scaled down is sampled no more; no row says it is gone)
        live = scrapes["has_data"].to_numpy(dtype=bool) & (times[lo:hi] <= last_s)
        rho = uptime_correlation(scrapes, window, live)
        written = live | np.concatenate([[False], live[:-1]])
        text = labels(int(replica))
        last = -1
        for k in np.flatnonzero(written).tolist():
            ms = stamps[lo + k]
            if ms <= last:
                continue
            last = ms
            value = float(rho[k]) if live[k] else math.nan
            out.write(f"{UPTIME_CORRELATION.name}{text} {number(value)} {stamp(ms)}\n")


def write_openmetrics(
    out: TextIO,
    run_dir: Path,
    summary: Summary,
    *,
    origin_s: float = DEFAULT_ORIGIN_S,
    high_free_share: float = 0.25,
    kv_bytes_per_token: int | None = None,
    scrape_interval_s: float = 30.0,
    trend_window_s: float = 3600.0,
    alerts: AlertInputs | None = None,
) -> bool:
    """Write the run in ``run_dir`` (already checked, its ``summary`` read) to ``out``
    as the module docstring says; ``kv_bytes_per_token`` overrides the summary's.
    ``scrape_interval_s`` (the counters' and the correlation's) and ``trend_window_s``
    (the correlation's) default to :data:`sim.telemetry.alerts.DEFAULT_SCRAPE_INTERVAL_S` and
    :data:`~sim.telemetry.alerts.DEFAULT_TREND_WINDOW_S` (a test holds them equal);
    ``alerts``: also write ``ALERTS`` / ``ALERTS_FOR_STATE`` evaluated with these
    (:mod:`sim.telemetry.openmetrics_alerts`). True when memory was also written in bytes. Raises
    :class:`sim.telemetry.openmetrics_counters.TooManyScrapes` before
    writing anything."""
    labels = Labels(pool_of(summary))
    timeseries = run_dir / "timeseries.parquet"
    clock = scrape_clock(timeseries, scrape_interval_s)
    for family in REPLICA_METRICS:
        if family.kind == "counter":
            updates = column_updates(timeseries, family.column)
            counter_family(out, family, clock, origin_s, labels, updates)
        else:
            _replica_family(out, family, timeseries, origin_s, labels)
    per_token = kv_bytes_per_token_of(summary)
    if kv_bytes_per_token is not None:
        per_token = lambda _replica: kv_bytes_per_token  # noqa: E731
    if per_token is not None:
        for family in BYTE_METRICS:
            scaled = _per_replica(family.column, per_token)
            _replica_family(out, family, timeseries, origin_s, labels, scaled)
    for family in offload_families(summary):  # KV offload tiers: a run with kv_offload
        if family.kind == "counter":
            updates = known_updates(timeseries, family.column)
            counter_family(out, family, clock, origin_s, labels, updates)
        else:
            _replica_family(out, family, timeseries, origin_s, labels)
    failures = high_free_failures(run_dir / "events.parquet", high_free_share)
    counter_family(out, FAILURES, clock, origin_s, labels, failure_updates(failures))
    _correlation_family(out, timeseries, origin_s, labels, clock, scrape_interval_s, trend_window_s)
    fleet = run_dir / "fleet.parquet"
    if fleet.exists():
        _fleet_family(out, fleet, origin_s)
    if alerts is not None:
        pool = pool_of(summary)
        write_alert_families(
            out, run_dir, origin_s, pool, alerts, scrape_interval_s, trend_window_s
        )
    out.write("# EOF\n")
    return per_token is not None
