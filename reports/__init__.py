"""Plotly figures (pure functions of run results) and the self-contained HTML report.

Figures (each ``(RunResult, ReportOptions) -> plotly Figure``; the fleet ones return None
for a single replica; one with nothing to show returns :func:`empty_panel`, which the
report writes as one line): :func:`replica_memory`, :func:`ratio_vs_uptime`,
:func:`failures_over_time`, :func:`waste_breakdown`, :func:`kv_manager_waste` (a KV
manager's run only, else None), :func:`alert_timeline`,
:func:`replicas_over_time`, :func:`cost_over_time`, :func:`latency_cdfs`; a run's verdict
table: :func:`answer_html`; over several runs :func:`comparison_bars`; over a sweep
:func:`sweep_heatmap`. The report: :func:`build_report` (HTML text) and
:func:`write_report` (run directories -> one HTML file). Downsampling rules:
:mod:`reports.downsample`. ``sim`` never imports this package (plotly is the CLI's).
"""

from reports.answer import answer_html
from reports.common import ReportOptions, empty_panel, empty_reason
from reports.comparison import comparison_bars
from reports.fleet import cost_over_time, replicas_over_time
from reports.html import (
    ReportError,
    build_report,
    run_figures,
    run_panels,
    write_html,
    write_report,
)
from reports.kv_manager import kv_manager_waste
from reports.memory import replica_memory
from reports.sweep import sweep_heatmap
from reports.timeline import alert_timeline, failures_over_time
from reports.uptime import ratio_vs_uptime
from reports.usage import latency_cdfs, waste_breakdown

__all__ = [
    "ReportError",
    "ReportOptions",
    "alert_timeline",
    "answer_html",
    "build_report",
    "comparison_bars",
    "cost_over_time",
    "empty_panel",
    "empty_reason",
    "failures_over_time",
    "kv_manager_waste",
    "latency_cdfs",
    "ratio_vs_uptime",
    "replica_memory",
    "replicas_over_time",
    "run_figures",
    "run_panels",
    "sweep_heatmap",
    "waste_breakdown",
    "write_html",
    "write_report",
]
