"""Readable labels, with units, for what tables and reports show: a run's metrics
(``sim.sweep.summary.METRICS``, ``sim.results.compare.COLUMNS``) and a sweep's parameters
(dotted scenario paths such as ``fleet.router.kind``).

A parameter without an entry in :data:`PARAM_LABELS` is labelled from its path: the last
name (the one before a trailing ``kind``), prefixed by the section that holds it
(``arrival``, ``restart``...; list indices and the ``synth`` / ``fleet`` levels skipped),
underscores as spaces, and the unit its suffix names in parentheses
(``fleet.restart.every_s`` -> ``restart every (s)``).

A mean over replications is written by :func:`mean_ci_cell` (``12.3 ± 0.4``) in the
terminal's sweep summary and in the sweep report alike.
"""

from __future__ import annotations

import math

METRIC_LABELS: dict[str, str] = {
    "requests": "requests",
    "failed_requests": "requests failed or rejected",
    "failure_rate": "failure rate (share of requests)",
    "allocation_failures": "allocation failures",
    "fragmentation_failures": "fragmentation failures",
    "failures_at_high_free": "failures at > 25 % free memory",
    "restarts": "restarts",
    "replicas_mean": "replicas (time mean)",
    "replicas_peak": "replicas (peak)",
    "replica_hours": "replica-hours",
    "avoidable_replica_hours": "avoidable replica-hours",
    "cost_usd": "cost ($)",
    "cost_per_million_output_tokens_usd": "$ per 1M output tokens",
    "output_tokens_per_s": "output tokens/s",
    "ttft_p50_s": "TTFT p50 (s)",
    "ttft_p99_s": "TTFT p99 (s)",
    "tpot_p50_s": "TPOT p50 (s)",
    "tpot_p99_s": "TPOT p99 (s)",
    "e2e_p50_s": "end-to-end p50 (s)",
    "e2e_p99_s": "end-to-end p99 (s)",
}
"""Metric column -> label with its unit."""

PARAM_LABELS: dict[str, str] = {
    "allocator.kind": "allocator",
    "fleet.router.kind": "router",
    "fleet.restart.kind": "restart policy",
    "fleet.autoscaler.kind": "autoscaler",
    "fleet.pools.0.count": "replicas",
    "fleet.pools": "pools",
    "workload.synth.arrival.rate_per_s": "arrival rate (req/s)",
    "workload.synth.duration_s": "duration (s)",
    "seed": "seed",
}
"""Sweep parameter path -> label, where the rule in the module docstring reads badly."""

UNITS: tuple[tuple[str, str], ...] = (
    ("_per_s", "/s"),
    ("_s", "s"),
    ("_tokens", "tokens"),
    ("_blocks", "blocks"),
    ("_bytes", "bytes"),
    ("_usd", "$"),
)
"""Name suffix -> unit, the first that matches."""

_SKIPPED = {"synth", "fleet", "workload"}


def metric_label(column: str) -> str:
    """The label of a metric column; a summary column's ``_mean`` suffix is dropped
    (``cost_usd_mean`` -> ``cost ($)``); an unknown column is labelled by its name's
    rule (module docstring)."""
    name = column.removesuffix("_mean")
    return METRIC_LABELS.get(name) or _with_unit(name)


def param_label(path: str) -> str:
    """The label of a sweep parameter (module docstring)."""
    if path in PARAM_LABELS:
        return PARAM_LABELS[path]
    parts = [p for p in path.split(".") if p and not p.isdigit()]
    if len(parts) > 1 and parts[-1] == "kind":
        parts.pop()
    if not parts:
        return path
    name = _with_unit(parts[-1])
    sections = [p for p in parts[:-1] if p not in _SKIPPED]
    return f"{sections[-1].replace('_', ' ')} {name}" if sections else name


def _with_unit(name: str) -> str:
    for suffix, unit in UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name.removesuffix(suffix).replace('_', ' ')} ({unit})"
    return name.replace("_", " ")


def mean_cell(value: float) -> str:
    """A mean for a table cell: about three significant digits, thousands separated
    (``1,234``, ``123``, ``12.3``, ``1.23``, ``0.0123``); a dash for NaN."""
    if math.isnan(value):
        return "—"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1 or size == 0:
        return f"{value:.2f}"
    return f"{value:.3g}"


def mean_ci_cell(mean: float, low: float, high: float) -> str:
    """``12.3 ± 0.4``: a mean and the half-width of its interval ``low..high`` (the mean
    alone where either bound is NaN; a dash where the mean is)."""
    half = (high - low) / 2
    if math.isnan(mean) or math.isnan(half):
        return mean_cell(mean)
    return f"{mean_cell(mean)} ± {mean_cell(half)}"
