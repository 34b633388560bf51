"""The seed's alerts as a Prometheus rules file: the rules :mod:`sim.fleet.alerts`
evaluates over a run, written in PromQL over the metrics of :data:`METRICS`, so the
rules validated in simulation are the rules deployed.

Metrics. A serving node that exports these (one series per node; fragsim's ``replica``
is the ``replica`` label) can run the rules unchanged. Each gauge is the timeseries
column of the same meaning; the failure histogram is the event log's allocation
failures (``admission_failure`` / ``growth_failure``) observed at their free share; the
correlation gauge is the seed's metric ``node_uptime_vs_fragmentation_correlation``,
which the node computes itself (below):

======================================================  ========================================
Prometheus metric                                       fragsim column
======================================================  ========================================
``fragsim_largest_contiguous_free_block_ratio``         ``largest_contiguous_free_block_ratio``
``fragsim_kv_capacity_tokens``                          ``capacity_tokens``
``fragsim_kv_used_tokens``                              ``used_tokens``
``fragsim_kv_free_tokens``                              ``free_tokens``
``fragsim_kv_largest_free_extent_tokens``               ``largest_free_extent_tokens``
``fragsim_kv_free_extents``                             ``free_extent_count``
``fragsim_node_uptime_seconds``                         ``uptime_s``
``fragsim_running_requests``                            ``running_requests``
``fragsim_waiting_requests``                            ``waiting_requests``
``fragsim_preemptions_total``                           ``preemptions_total``
``fragsim_allocation_failure_free_share`` (histogram)   events: ``free_share`` by ``cause``
``fragsim_node_uptime_vs_fragmentation_correlation``    Spearman rho, ``sim.fleet.alerts``
======================================================  ========================================

The histogram must have a bucket at ``high_free_share`` (``le="0.25"`` by default): the
failures above the threshold are ``_count - _bucket{le="0.25"}`` (``le`` is <=, so this
is exactly "exceeds 25 %"). The node must export the ratio as NaN when nothing is free
(PromQL comparisons with NaN are false: no alert, as in simulation). Create the
histogram's series for both causes at 0 when the process starts: a series born within a
scrape window has no earlier value to subtract, and its first failures would not fire.

Rules (group interval = the scrape interval, ``for: 0s``: fire at the first evaluation
the condition holds, as the simulation does):

* the failure rule counts failures between this scrape and the previous one
  (``X - X offset I``); a counter reset (a restarted process) within that window hides
  that window's failures, where the simulation still counts them;
* the uptime rule thresholds ``fragsim_node_uptime_vs_fragmentation_correlation``:
  Spearman's rho of (uptime, 1 - ratio) over the node's own readings, one every scrape
  interval, in the last ``W`` s (the rule also asks uptime >= ``W``: a restart within the
  window never fires it) (:func:`sim.results.seed_alerts.spearman_rho`: average ranks of the readings, Pearson's
  r of the ranks; NaN when a reading's ratio is NaN, when fewer than two readings, or
  when either series is constant), as the simulation computes it at each scrape. The
  node computes it because PromQL has no ranks: a rule over ``avg_over_time`` /
  ``stddev_over_time`` could compute only Pearson's r, a second statistic beside the
  summary's and the reports'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.fleet.alerts import (
    ALERTS,
    DEFAULT_SCRAPE_INTERVAL_S,
    DEFAULT_THRESHOLDS,
    DEFAULT_TREND_WINDOW_S,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    UPTIME_CORRELATION,
)
from sim.results.seed_alerts import AlertSpec, AlertThresholds

METRICS: tuple[tuple[str, str, str, str], ...] = (
    # (fragsim column, Prometheus metric, type, help)
    (
        "largest_contiguous_free_block_ratio",
        "fragsim_largest_contiguous_free_block_ratio",
        "gauge",
        "Largest usable free KV extent / total free KV memory (NaN when nothing is free).",
    ),
    ("capacity_tokens", "fragsim_kv_capacity_tokens", "gauge", "KV-cache capacity, tokens."),
    ("used_tokens", "fragsim_kv_used_tokens", "gauge", "KV slots holding tokens."),
    ("free_tokens", "fragsim_kv_free_tokens", "gauge", "Free KV slots, tokens."),
    (
        "largest_free_extent_tokens",
        "fragsim_kv_largest_free_extent_tokens",
        "gauge",
        "Largest usable free KV extent, tokens.",
    ),
    ("free_extent_count", "fragsim_kv_free_extents", "gauge", "Number of free KV extents."),
    ("uptime_s", "fragsim_node_uptime_seconds", "gauge", "Seconds since the last restart."),
    ("running_requests", "fragsim_running_requests", "gauge", "Requests in the batch."),
    ("waiting_requests", "fragsim_waiting_requests", "gauge", "Requests queued."),
    ("preemptions_total", "fragsim_preemptions_total", "counter", "Preemptions so far."),
    (
        "free_share",
        "fragsim_allocation_failure_free_share",
        "histogram",
        "Allocation failures (label cause: fragmentation/capacity), observed at the share "
        "of KV memory free when they happened.",
    ),
    (
        "node_uptime_vs_fragmentation_correlation",
        "fragsim_node_uptime_vs_fragmentation_correlation",
        "gauge",
        "Spearman rho of (uptime, 1 - largest_contiguous_free_block_ratio) over this node's "
        "readings, one per scrape interval, of the last trend window (NaN: no rho).",
    ),
)
"""The one map from fragsim's columns to Prometheus metric names (the module docstring
lists it as a table)."""

METRIC = {column: name for column, name, _, _ in METRICS}


def _seconds(value_s: float) -> str:
    """A PromQL duration: whole milliseconds, ``30s``, ``1500ms``."""
    ms = round(value_s * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be >= 1 ms, got {value_s} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _number(value: float) -> str:
    return repr(float(value))


def expressions(
    thresholds: AlertThresholds,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
) -> dict[str, str]:
    """Alert name -> its PromQL expression."""
    interval = _seconds(scrape_interval_s)
    ratio = METRIC["largest_contiguous_free_block_ratio"]
    uptime = METRIC["uptime_s"]
    hist = METRIC["free_share"]
    le = f'{{le="{thresholds.high_free_share:g}"}}'

    def new(series: str) -> str:
        return f"sum by (replica) ({series} - {series} offset {interval})"

    frag = f"(1 - {ratio})"
    rho = METRIC["node_uptime_vs_fragmentation_correlation"]
    return {
        FRAGMENTATION_FAILURE.name: f"{new(hist + '_count')} - {new(hist + '_bucket' + le)} > 0",
        SEVERE_FRAGMENTATION.name: f"{ratio} < {_number(thresholds.ratio_severe)}",
        HIGH_FRAGMENTATION.name: f"{ratio} < {_number(thresholds.ratio_alert)}",
        UPTIME_CORRELATION.name: (
            f"{rho} >= {_number(thresholds.uptime_rho_alert)}"
            f" and {frag} > {_number(1.0 - thresholds.ratio_alert)}"
            f" and {uptime} >= {_number(trend_window_s)}"
        ),
    }


def _description(spec: AlertSpec, th: AlertThresholds, trend_window_s: float) -> str:
    node = "Replica {{ $labels.replica }}"
    return {
        FRAGMENTATION_FAILURE.name: (
            f"{node}: {{{{ $value }}}} allocation failure(s) since the last scrape while "
            f"more than {th.high_free_share * 100:g}% of KV memory was free: the seed's sign "
            "of fragmentation rather than a capacity shortage (the histogram's cause label "
            "tells a request larger than all free memory apart)."
        ),
        SEVERE_FRAGMENTATION.name: (
            f"{node}: largest_contiguous_free_block_ratio is {{{{ $value }}}} "
            f"(< {th.ratio_severe:g}): severe fragmentation."
        ),
        HIGH_FRAGMENTATION.name: (
            f"{node}: largest_contiguous_free_block_ratio is {{{{ $value }}}} "
            f"(< {th.ratio_alert:g})."
        ),
        UPTIME_CORRELATION.name: (
            f"{node}: fragmentation rises with uptime (Spearman rho = {{{{ $value }}}} "
            f">= {th.uptime_rho_alert:g} over {trend_window_s:g} s) and is past "
            f"{1 - th.ratio_alert:g}."
        ),
    }[spec.name]


def alert_rules(
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
) -> dict[str, Any]:
    """The rules file as a mapping: one group ``fragsim`` evaluated every scrape, one
    rule per alert of :data:`~sim.fleet.alerts.ALERTS`."""
    exprs = expressions(thresholds, scrape_interval_s, trend_window_s)
    rules = [
        {
            "alert": spec.name,
            "expr": exprs[spec.name],
            "for": "0s",
            "labels": {"severity": spec.severity},
            "annotations": {
                "summary": spec.summary,
                "description": _description(spec, thresholds, trend_window_s),
                "response": spec.response,
            },
        }
        for spec in ALERTS
    ]
    return {
        "groups": [{"name": "fragsim", "interval": _seconds(scrape_interval_s), "rules": rules}]
    }


def rules_yaml(rules: dict[str, Any]) -> str:
    """The rules mapping as YAML text (keys in the order given, block style), under a
    comment naming the metrics the nodes must export."""
    head = ["# fragsim: the fleet seed's alerts. Each node must export (label replica):"]
    head += [f"#   {name} ({kind}): {text}" for _, name, kind, text in METRICS]
    head.append("# See sim/fleet/prometheus.py for the histogram's buckets and the gauge's window.")
    body = yaml.safe_dump(rules, sort_keys=False, allow_unicode=True, width=1000)
    return "\n".join(head) + "\n" + body


def write_rules(path: str | Path, rules: dict[str, Any]) -> None:
    """Write the rules file atomically (:func:`traces.writers.atomic_path`: nothing
    half-written; raises ``traces.TraceError`` naming ``path`` when it cannot)."""
    from traces.writers import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(rules_yaml(rules), encoding="utf-8")
