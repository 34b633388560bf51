"""The ``ALERTS`` and ``ALERTS_FOR_STATE`` series of :mod:`sim.telemetry.openmetrics`: what
Prometheus's rule evaluation would have written for the exported rules
(:mod:`sim.telemetry.prometheus`, fragsim's metric names, label ``replica``) had it evaluated
them over the run, from fragsim's own evaluation (:func:`sim.telemetry.alerts.evaluate_alerts`,
each rule's ``for:``: :mod:`sim.telemetry.alert_states`). Prometheus evaluates rules on its
own clock only, never over backfilled history: without these, a backfilled Prometheus
has no alert history.

As ``AlertingRule.Eval`` writes them (``rules/alerting.go``), at every evaluation
instant ``t_k`` of the run's scrape grid while an alert is active on a replica:

* ``ALERTS{alertname, alertstate, severity, <series labels>} 1`` with ``alertstate``
  ``pending`` from its first instant (``activeAt``) until it fires, ``firing`` from the
  instant it fires (with ``for: 0``, at once) to the last before it resolves;
* ``ALERTS_FOR_STATE{alertname, severity, <series labels>}``, value ``activeAt`` in
  whole Unix seconds (Go's ``Time.Unix``), at the same instants.

The series labels are those of the rule's expression result: ``replica`` and ``pool``
(the gauges' labels; the failure rule sums ``by (replica, pool)``, so that a
disaggregated fleet's alerts say which pool, prefill or decode); ``severity`` is the
rule's (``critical`` / ``warning``).
After an alert resolves its series have no more samples. Prometheus writes a staleness
marker at the resolving evaluation, which OpenMetrics text cannot carry: an instant
query in the 5-minute look-back after the last sample still returns it (docs/alerts.md
gives the query that does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
import pyarrow.parquet as pq

from sim.results.offload_summary import TIER_KINDS
from sim.results.seed_alerts import TIER_ALERTS
from sim.telemetry.alert_states import DEFAULT_TIMING, RuleTiming
from sim.telemetry.alerts import TIER_GAUGES, evaluate_alerts, scrape_times, tier_column
from sim.telemetry.openmetrics_format import escape, number, stamp, timestamps_ms

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from sim.results.seed_alerts import AlertThresholds

ALERTS_NAME = "ALERTS"
FOR_STATE_NAME = "ALERTS_FOR_STATE"
SEVERITIES = {"high": "critical", "medium": "warning"}
"""``sim.telemetry.prometheus.SEVERITIES`` (a test holds them equal)."""
POOL_LABELLED = (
    "fragmentation_driven_allocation_failure",
    "severe_fragmentation",
    "high_fragmentation_approaching_threshold",
    "node_uptime_vs_fragmentation_correlation",
    *(spec.name for spec in TIER_ALERTS),
)
"""The rules whose result carries the series' ``pool`` label: every one (the failure
rule sums ``by (replica, pool)``)."""


@dataclass(frozen=True)
class AlertInputs:
    """What the alerts are evaluated with: the run's (its summary's ``fleet.alerts``)."""

    thresholds: AlertThresholds
    timing: RuleTiming = DEFAULT_TIMING


@dataclass(frozen=True)
class Sample:
    """One sample of either family: its instant (Unix ms), labels text and value."""

    ms: int
    labels: str
    value: float


def alert_samples(
    log: pd.DataFrame, times_s: object, origin_s: float, pool: Callable[[int], str]
) -> tuple[list[Sample], list[Sample]]:
    """The ``ALERTS`` and ``ALERTS_FOR_STATE`` samples of an alert log (module
    docstring), each in time order, then by labels."""
    stamps = timestamps_ms(np.asarray(times_s, dtype=float), origin_s)
    index = {round(float(t) * 1000): k for k, t in enumerate(np.asarray(times_s).tolist())}
    alerts: list[Sample] = []
    states: list[Sample] = []
    for _, rows in log.groupby(["replica", "alert", "active_since_s"], sort=True):
        first = rows.iloc[0]  # the group's key, typed
        replica, name = int(first["replica"]), str(first["alert"])
        since_s = float(first["active_since_s"])
        start = index[round(since_s * 1000)]
        by_state = dict(zip(rows["state"].tolist(), rows["time_s"].tolist(), strict=True))
        end = index[round(by_state["resolved"] * 1000)] if "resolved" in by_state else len(stamps)
        fired = index[round(by_state["firing"] * 1000)] if "firing" in by_state else end
        severity = SEVERITIES[str(rows["severity"].iloc[0])]
        series = f'replica="{replica}"'
        if name in POOL_LABELLED:
            series += f',pool="{escape(pool(replica))}"'
        head = f'alertname="{name}"'
        pending = f'{{{head},alertstate="pending",{series},severity="{severity}"}}'
        firing = f'{{{head},alertstate="firing",{series},severity="{severity}"}}'
        for_state = f'{{{head},{series},severity="{severity}"}}'
        active_at_s = float(int(stamps[start]) // 1000)
        for k in range(start, end):
            ms = int(stamps[k])
            alerts.append(Sample(ms, pending if k < fired else firing, 1.0))
            states.append(Sample(ms, for_state, active_at_s))
    order = lambda s: (s.ms, s.labels)  # noqa: E731
    return sorted(alerts, key=order), sorted(states, key=order)


def write_alert_families(
    out: TextIO,
    run_dir: Path,
    origin_s: float,
    pool: Callable[[int], str],
    inputs: AlertInputs,
    scrape_interval_s: float,
    trend_window_s: float,
) -> None:
    """Evaluate the run's alerts and write both families whole (module docstring)."""
    columns = ["time_s", "replica", "trigger", "up", "uptime_s"]
    columns.append("largest_contiguous_free_block_ratio")
    path = run_dir / "timeseries.parquet"
    present = set(pq.read_schema(path).names)
    tiers = [tier_column(k, g) for k in TIER_KINDS for g in TIER_GAUGES]
    columns += [name for name in tiers if name in present]  # a run with tiers: their alerts
    timeseries = pq.read_table(path, columns=columns).to_pandas()
    timeseries["trigger"] = timeseries["trigger"].astype(str)
    events = pq.read_table(
        run_dir / "events.parquet", columns=["time_s", "replica", "kind", "free_share"]
    ).to_pandas()
    events["kind"] = events["kind"].astype(str)
    log = evaluate_alerts(
        timeseries,
        events,
        scrape_interval_s=scrape_interval_s,
        thresholds=inputs.thresholds,
        trend_window_s=trend_window_s,
        timing=inputs.timing,
    )
    times = scrape_times(timeseries, scrape_interval_s)
    alerts, states = alert_samples(log, times, origin_s, pool)
    out.write(f"# HELP {ALERTS_NAME} Alerts pending or firing, as Prometheus's rules write them.\n")
    out.write(f"# TYPE {ALERTS_NAME} gauge\n")
    for s in alerts:
        out.write(f"{ALERTS_NAME}{s.labels} {number(s.value)} {stamp(s.ms)}\n")
    out.write(f"# HELP {FOR_STATE_NAME} The Unix second each active alert became active.\n")
    out.write(f"# TYPE {FOR_STATE_NAME} gauge\n")
    for s in states:
        out.write(f"{FOR_STATE_NAME}{s.labels} {number(s.value)} {stamp(s.ms)}\n")
