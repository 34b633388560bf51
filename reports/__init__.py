"""Plotly figures (pure functions of run results) and the self-contained HTML report.

Figures (each ``RunResult -> plotly Figure``; the fleet ones return None for a single
replica): :func:`replica_memory`, :func:`waste_breakdown`, :func:`uptime_scatter`,
:func:`latency_cdfs`, :func:`alert_timeline`, :func:`replicas_over_time`,
:func:`cost_over_time`; over several runs :func:`comparison_bars`; over a sweep
:func:`sweep_heatmap`. The report: :func:`build_report` (HTML text) and
:func:`write_report` (run directories -> one HTML file). Downsampling rules:
:mod:`reports.downsample`. ``sim`` never imports this package (plotly is the CLI's).
"""

from reports.comparison import comparison_bars
from reports.fleet import alert_timeline, cost_over_time, replicas_over_time
from reports.html import ReportError, build_report, run_figures, write_html, write_report
from reports.memory import latency_cdfs, replica_memory, uptime_scatter, waste_breakdown
from reports.sweep import sweep_heatmap

__all__ = [
    "ReportError",
    "alert_timeline",
    "build_report",
    "comparison_bars",
    "cost_over_time",
    "latency_cdfs",
    "replica_memory",
    "replicas_over_time",
    "run_figures",
    "sweep_heatmap",
    "uptime_scatter",
    "waste_breakdown",
    "write_html",
    "write_report",
]
