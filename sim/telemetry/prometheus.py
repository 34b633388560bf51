"""The seed's alerts as a Prometheus rules file: the rules :mod:`sim.telemetry.alerts`
evaluates over a run, written in PromQL over the metrics of :data:`METRICS`, so the
rules validated in simulation are the rules deployed.

Metrics. A serving node that exports these (one series per node, labelled by the
routing label, ``replica`` by default) can run the rules unchanged;
``fragsim export openmetrics`` writes a run's own, the correlation gauge included
(:mod:`sim.telemetry.openmetrics`). Each gauge is the timeseries column of the same meaning;
the failure counter counts the allocation failures (``admission_failure`` /
``growth_failure``) whose free share exceeded ``high_free_share`` (the exporter applies
the threshold); the correlation gauge is the seed's metric
``node_uptime_vs_fragmentation_correlation``, which a node computes itself (below) and
the export computes as ``fragsim alerts`` evaluates it:

=============================================================  ============================  =========================================
Prometheus metric                                              vLLM's (``--metrics vllm``)   fragsim column
=============================================================  ============================  =========================================
``fragsim_largest_contiguous_free_block_ratio``                (none)                        ``largest_contiguous_free_block_ratio``
``fragsim_kv_capacity_tokens``                                 (none)                        ``capacity_tokens``
``fragsim_kv_used_tokens``                                     ``vllm:gpu_cache_usage_perc``  ``used_tokens`` (vLLM: a share of capacity)
``fragsim_kv_free_tokens``                                     (none)                        ``free_tokens``
``fragsim_kv_largest_free_extent_tokens``                      (none)                        ``largest_free_extent_tokens``
``fragsim_kv_free_extents``                                    (none)                        ``free_extent_count``
``fragsim_node_uptime_seconds``                                (none)                        ``uptime_s``
``fragsim_running_requests``                                   ``vllm:num_requests_running``  ``running_requests``
``fragsim_waiting_requests``                                   ``vllm:num_requests_waiting``  ``waiting_requests``
``fragsim_preemptions_total``                                  ``vllm:num_preemptions_total``  ``preemptions_total``
``fragsim_allocation_failures_at_high_free_memory_total``      (none)                        events above ``high_free_share``
``fragsim_node_uptime_vs_fragmentation_correlation``           (none)                        Spearman rho, ``sim.telemetry.alerts``
=============================================================  ============================  =========================================

Rules (Alertmanager conventions): one group ``fragsim`` evaluated every scrape
interval; labels ``severity`` ``critical`` (the seed's ``high``) or ``warning``
(``medium``); annotations ``summary``, ``description``, ``runbook_url`` (a template:
``{alert}`` becomes the alert's name) and the seed's ``response``; durations written
``30s``, ``5m``, ``1h``.

* the failure rule is ``increase(FAILURES[W]) > 0`` over the counter (``W``: the
  failure window, at least two scrape intervals so that the range holds two samples;
  ``increase`` handles a counter reset). It fires while a failure happened in the last
  ``W`` and has no ``for:`` (a failure is an event, not a level). With
  ``--metrics vllm`` it reads ``increase(vllm:num_preemptions_total[W]) > 0 and
  vllm:gpu_cache_usage_perc < 1 - high_free_share``: vLLM preempts when a sequence
  cannot grow, and its gauge tells a preemption at high free memory (vLLM exports no
  failure counter and no contiguity, so the ratio rules keep fragsim's names: the
  rules file's header says which);
* the ratio rules threshold the gauge, the uptime rule the correlation gauge, each
  with its ``for:`` (:data:`sim.telemetry.alert_states.SHIPPED_FOR_S`: none on the severe
  rule, ``30s`` (two scrapes in a row) on the approaching and uptime rules; a rule without a
  ``for:`` fires at its first evaluation);
* the uptime rule thresholds ``fragsim_node_uptime_vs_fragmentation_correlation``:
  Spearman's rho of (uptime, 1 - ratio) over the node's own readings, one every scrape
  interval, in the last ``T`` s (the rule also asks uptime >= ``T``: a restart within the
  window never fires it) (:func:`sim.results.seed_alerts.spearman_rho`: average ranks of
  the readings, Pearson's r of the ranks; NaN when a reading's ratio is NaN, when fewer
  than two readings, or when either series is constant), as the simulation computes it
  at each scrape. The node computes it because PromQL has no ranks: a rule over
  ``avg_over_time`` / ``stddev_over_time`` could compute only Pearson's r, a second
  statistic beside the summary's and the reports'.

* a run with KV offload tiers (``kv_offload``) adds one rule per tier kind,
  ``offload_<kind>_tier_fragmentation``: ``fragsim_offload_<kind>_largest_contiguous_free_block_ratio
  < ratio_alert and (fragsim_offload_<kind>_free_bytes / fragsim_offload_<kind>_capacity_bytes)
  > high_free_share``, ``for: 30s`` (:func:`tier_expression`); other rules files are as
  before.

``fragsim alerts show`` and a run's ``alerts.parquet`` apply the same ``for:`` and
window (:mod:`sim.telemetry.alert_states`): they fire where these rules fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypeAlias, TypedDict

import yaml

from sim.results.offload_summary import TIER_KINDS
from sim.results.seed_alerts import AlertSpec, AlertThresholds, alerts_for, tier_of
from sim.telemetry.alert_states import DEFAULT_TIMING, RuleTiming, with_gauge_hold
from sim.telemetry.alerts import (
    DEFAULT_SCRAPE_INTERVAL_S,
    DEFAULT_THRESHOLDS,
    DEFAULT_TREND_WINDOW_S,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    UPTIME_CORRELATION,
)
from traces.atomic import atomic_path

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
        "high_free_failures",
        "fragsim_allocation_failures_at_high_free_memory_total",
        "counter",
        "Allocation failures while more than high_free_share of KV memory was free.",
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


def tier_metrics(kind: str) -> tuple[tuple[str, str, str, str], ...]:
    """:data:`METRICS`' rows of a KV offload tier's gauges its alert reads
    (``fragsim export openmetrics`` writes them: :mod:`sim.telemetry.openmetrics_offload`)."""
    return (
        (
            f"offload_{kind}_largest_contiguous_free_block_ratio",
            f"fragsim_offload_{kind}_largest_contiguous_free_block_ratio",
            "gauge",
            f"{kind} tier: largest free extent / total free tier memory (NaN when full).",
        ),
        (
            f"offload_{kind}_free_bytes",
            f"fragsim_offload_{kind}_free_bytes",
            "gauge",
            f"{kind} tier: free memory, bytes.",
        ),
        (
            f"offload_{kind}_capacity_bytes",
            f"fragsim_offload_{kind}_capacity_bytes",
            "gauge",
            f"{kind} tier: capacity, bytes.",
        ),
    )


def tier_expression(kind: str, thresholds: AlertThresholds) -> str:
    """A tier alert's PromQL: the tier's ratio below ``ratio_alert`` while its free share
    exceeds ``high_free_share`` (:func:`sim.telemetry.alerts.tier_condition`)."""
    ratio, free, capacity = (name for _, name, _, _ in tier_metrics(kind))
    return (
        f"{ratio} < {_number(thresholds.ratio_alert)}"
        f" and ({free} / {capacity}) > {_number(thresholds.high_free_share)}"
    )


VLLM_METRICS: dict[str, str] = {
    "fragsim_kv_used_tokens": "vllm:gpu_cache_usage_perc",
    "fragsim_running_requests": "vllm:num_requests_running",
    "fragsim_waiting_requests": "vllm:num_requests_waiting",
    "fragsim_preemptions_total": "vllm:num_preemptions_total",
}
"""fragsim metric -> vLLM's metric of the nearest meaning (``vllm:gpu_cache_usage_perc``
is a share of capacity, not tokens)."""

SEVERITIES: dict[str, str] = {"high": "critical", "medium": "warning"}
"""The seed's severity -> Alertmanager's."""

MetricNames = Literal["fragsim", "vllm"]
INSTANCE_LABELS = ("replica", "pod", "instance")


@dataclass(frozen=True)
class RuleOptions:
    """How the rules are written: each rule's ``for:`` and the failure rule's window
    (``timing``; ``for_s`` overrides every gauge rule's ``for:``, ``failure_window_s``
    the window), the runbook URL template (``{alert}``: the alert's name), whose metric
    names and which label names a node (what Alertmanager routes and groups on)."""

    for_s: float | None = None
    failure_window_s: float | None = None
    timing: RuleTiming = DEFAULT_TIMING
    runbook_url: str = "https://runbooks.example.com/fragsim/{alert}"
    metrics: MetricNames = "fragsim"
    instance_label: str = "replica"

    def rule_timing(self) -> RuleTiming:
        """The timing the rules are written with (``timing`` with the overrides)."""
        timing = self.timing
        if self.for_s is not None:
            timing = with_gauge_hold(timing, self.for_s)
        if self.failure_window_s is not None:
            timing = RuleTiming(timing.for_s, self.failure_window_s)
        return timing


DEFAULT_OPTIONS = RuleOptions()


def duration(value_s: float) -> str:
    """A Prometheus duration in its largest whole units: ``5m``, ``1h``, ``1h30m``,
    ``30s``, ``1500ms``."""
    ms = round(value_s * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be >= 1 ms, got {value_s} s")
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms:
        parts.append(f"{ms}ms")
    return "".join(parts)


def _number(value: float) -> str:
    return repr(float(value))


def expressions(
    thresholds: AlertThresholds,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
    options: RuleOptions = DEFAULT_OPTIONS,
) -> dict[str, str]:
    """Alert name -> its PromQL expression."""
    ratio = METRIC["largest_contiguous_free_block_ratio"]
    uptime = METRIC["uptime_s"]
    window = duration(options.rule_timing().window_s(scrape_interval_s))
    by = f"sum by ({options.instance_label}, pool)"  # a P/D fleet's alerts name their pool
    if options.metrics == "vllm":
        preempted = f"{by} (increase({VLLM_METRICS['fragsim_preemptions_total']}[{window}])) > 0"
        used = VLLM_METRICS["fragsim_kv_used_tokens"]
        limit = _number(1.0 - thresholds.high_free_share)
        failure = f"{preempted} and on ({options.instance_label}) {by} ({used}) < {limit}"
    else:
        failure = f"{by} (increase({METRIC['high_free_failures']}[{window}])) > 0"
    rho = METRIC["node_uptime_vs_fragmentation_correlation"]
    return {
        FRAGMENTATION_FAILURE.name: failure,
        SEVERE_FRAGMENTATION.name: f"{ratio} < {_number(thresholds.ratio_severe)}",
        HIGH_FRAGMENTATION.name: f"{ratio} < {_number(thresholds.ratio_alert)}",
        UPTIME_CORRELATION.name: (
            f"{rho} >= {_number(thresholds.uptime_rho_alert)}"
            f" and (1 - {ratio}) > {_number(1.0 - thresholds.ratio_alert)}"
            f" and {uptime} >= {_number(trend_window_s)}"
        ),
    }


def _description(
    spec: AlertSpec,
    th: AlertThresholds,
    trend_window_s: float,
    options: RuleOptions,
    scrape_interval_s: float,
) -> str:
    node = f"Replica {{{{ $labels.{options.instance_label} }}}}"
    kind = tier_of(spec)
    if kind is not None:
        return (
            f"{node}: the {kind} KV tier's largest_contiguous_free_block_ratio is "
            f"{{{{ $value }}}} (< {th.ratio_alert:g}) while more than "
            f"{th.high_free_share * 100:g}% of the tier is free: its allocator evicts and "
            "refuses objects its free memory would hold."
        )
    window = duration(options.rule_timing().window_s(scrape_interval_s))
    failure = (
        f"{node}: preempted while less than {1 - th.high_free_share:g} of KV cache was in "
        f"use in the last {window} (vLLM's nearest sign of the seed's fragmentation)."
        if options.metrics == "vllm"
        else f"{node}: allocation failure(s) in the last {window} while more than "
        f"{th.high_free_share * 100:g}% of KV memory was free: the seed's sign of "
        "fragmentation rather than a capacity shortage."
    )
    return {
        FRAGMENTATION_FAILURE.name: failure,
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
            f">= {th.uptime_rho_alert:g} over {duration(trend_window_s)}) and is past "
            f"{1 - th.ratio_alert:g}."
        ),
    }[spec.name]


AlertRule = TypedDict(
    "AlertRule",
    {
        "alert": str,
        "expr": str,
        "for": NotRequired[str],  # a duration; absent: fires at the first evaluation
        "labels": dict[str, str],
        "annotations": dict[str, str],
    },
)
"""One alerting rule of the rules file, keys in the order written."""


class RuleGroup(TypedDict):
    """A rule group: evaluated together every ``interval``."""

    name: str
    interval: str
    rules: list[AlertRule]


RulesFile: TypeAlias = dict[str, list[RuleGroup]]
"""A Prometheus rules file: ``{"groups": [...]}``."""


def alert_rules(
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
    options: RuleOptions = DEFAULT_OPTIONS,
    tier_kinds: tuple[str, ...] = (),
) -> RulesFile:
    """The rules file: one group ``fragsim`` evaluated every scrape, one rule per alert
    of :func:`~sim.results.seed_alerts.alerts_for` ``tier_kinds`` (the seed's, then one
    per KV offload tier kind: module docstring)."""
    exprs = expressions(thresholds, scrape_interval_s, trend_window_s, options)
    exprs |= {
        spec.name: tier_expression(kind, thresholds)
        for spec in alerts_for(tier_kinds)
        if (kind := tier_of(spec)) is not None
    }
    timing = options.rule_timing()
    rules: list[AlertRule] = []
    for spec in alerts_for(tier_kinds):
        name, expr = spec.name, exprs[spec.name]
        labels = {"severity": SEVERITIES[spec.severity]}
        annotations = {
            "summary": spec.summary,
            "description": _description(
                spec, thresholds, trend_window_s, options, scrape_interval_s
            ),
            "runbook_url": options.runbook_url.replace("{alert}", spec.name),
            "response": spec.response,
        }
        hold_s = timing.hold_s(spec.name)
        if hold_s > 0:
            rule: AlertRule = {
                "alert": name,
                "expr": expr,
                "for": duration(hold_s),
                "labels": labels,
                "annotations": annotations,
            }
        else:  # no hold: fires at the first evaluation
            rule = {"alert": name, "expr": expr, "labels": labels, "annotations": annotations}
        rules.append(rule)
    group: RuleGroup = {"name": "fragsim", "interval": duration(scrape_interval_s), "rules": rules}
    return {"groups": [group]}


def rules_yaml(rules: RulesFile, options: RuleOptions = DEFAULT_OPTIONS) -> str:
    """The rules mapping as YAML text (keys in the order given, block style), under a
    comment naming the metrics the nodes must export."""
    label = options.instance_label
    head = [f"# fragsim: the fleet seed's alerts. Each node must export (label {label}):"]
    used = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
    tiers = tuple(row for tier in TIER_KINDS for row in tier_metrics(tier))
    for _, name, kind, text in METRICS + tiers:
        shown = VLLM_METRICS.get(name, name) if options.metrics == "vllm" else name
        if shown == VLLM_METRICS["fragsim_kv_used_tokens"]:
            text = "KV-cache usage, a share of capacity (0 to 1)."
        if shown in used:
            head.append(f"#   {shown} ({kind}): {text}")
    if options.metrics == "vllm":
        head.append(
            "# vLLM exports no contiguity: the ratio and uptime rules keep fragsim's names."
        )
    head.append(
        "# See sim/telemetry/prometheus.py for the rules' windows and the correlation gauge."
    )
    body = yaml.safe_dump(rules, sort_keys=False, allow_unicode=True, width=1000)
    return "\n".join(head) + "\n" + body


def write_rules(path: str | Path, rules: RulesFile) -> None:
    """Write the rules file atomically (:func:`traces.atomic.atomic_path`: nothing
    half-written; raises ``traces.TraceError`` naming ``path`` when it cannot)."""
    with atomic_path(path) as tmp:
        tmp.write_text(rules_yaml(rules), encoding="utf-8")
