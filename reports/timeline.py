"""What happened when: pure figure functions over a run's time axis.

* :func:`failures_over_time` -- allocation failures per window, split by diagnosis
  (fragmentation on a capable node / capacity shortage), and how many of them were at
  high free memory;
* :func:`alert_timeline` -- per alert and time window, how many replicas had it firing
  at some point of the window (a heatmap of one row per alert, whatever the fleet's
  size: firings last a scrape or two, too short to read as lines over days). A fleet
  run's alert log is its ``alerts.parquet``; a single replica has none written, so its
  log is evaluated here as ``fragsim alerts show`` evaluates it
  (:func:`sim.telemetry.alerts.evaluate_alerts` over its samples and failures, with the
  run's thresholds).

A run with nothing to draw (no failures, no alert firing) gets the one-line
:func:`~reports.common.empty_panel`. Alert names, severities and counts are read from
the run (the alert log, the summary), never written here; the log is read by its
``time_s, replica, alert, severity, state`` columns only (``state`` ``firing`` starts an
interval, ``resolved`` ends it; other states and other columns are ignored).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from reports.aggregate import Windows, allocation_failures, window_counts, window_index
from reports.common import (
    CAPACITY_COLOUR,
    DEFAULT_OPTIONS,
    FRAGMENTATION_COLOUR,
    ReportOptions,
    as_float,
    base_layout,
    empty_panel,
    esc,
    high_free_share,
    max_time_s,
    ratio_thresholds,
    time_unit,
)
from reports.downsample import window_label
from sim.results.io import RunResult
from sim.results.seed_alerts import AlertThresholds
from sim.telemetry.alerts import evaluate_alerts


def _end_s(result: RunResult) -> float:
    engine_end = float(result.summary.engine.end_s)
    return max(engine_end, max_time_s(result.timeseries, result.events))


FAILURES_TITLE = "allocation failures over time, by diagnosis"
ALERTS_TITLE = "alerts: replicas with each alert firing, per window"
SINGLE_ALERTS_TITLE = "alerts: when each alert was firing, per window"


def failures_over_time(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """Stacked bars per window (:func:`~reports.aggregate.window_counts`): allocation
    failures by cause (a cause with none left out); a line: those at high free memory
    (any cause). A run without allocation failures: an empty panel saying so."""
    fails = allocation_failures(result.events)
    if not len(fails):
        return empty_panel(FAILURES_TITLE, "no allocation failures in this run")
    end_s = _end_s(result)
    div, unit = time_unit(end_s)
    share = high_free_share(result.summary)
    times = as_float(fails["time_s"])
    causes = fails["cause"].astype(str).to_numpy()
    high = as_float(fails["free_share"]) > share
    windows = window_counts(
        {
            "fragmentation": times[causes == "fragmentation"],
            "capacity": times[causes == "capacity"],
            "high": times[high],
        },
        end_s,
    )
    x = (windows.starts_s + windows.width_s / 2.0) / div
    fig = go.Figure()
    for cause, label, color in (
        (
            "fragmentation",
            "fragmentation (enough free in total, no extent large enough)",
            FRAGMENTATION_COLOUR,
        ),
        ("capacity", "capacity (less free memory than the request needs)", CAPACITY_COLOUR),
    ):
        total = int(windows.counts[cause].sum())
        if not total:
            continue
        fig.add_trace(
            go.Bar(
                x=x,
                y=windows.counts[cause],
                width=windows.width_s / div,
                name=f"{label}: {total:,}",
                marker={"color": color, "line": {"width": 0}},
                hovertemplate=f"%{{y:,}} {cause} failures<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=windows.counts["high"],
            mode="lines",
            line={"shape": "hvh", "color": "#222", "width": 1.2, "dash": "dot"},
            name=f"of which at > {share:.0%} free memory (any cause): {int(high.sum()):,}",
            hovertemplate=f"%{{y:,}} at > {share:.0%} free<extra></extra>",
        )
    )
    title = f"allocation failures per {window_label(windows.width_s)}, by diagnosis"
    fig.update_layout(**base_layout(title, 380))
    fig.update_layout(barmode="stack", bargap=0.0)
    fig.update_yaxes(title_text="failures", rangemode="tozero")
    fig.update_xaxes(title_text=unit, range=[0, end_s / div])
    return fig


def firing_intervals(alerts: pd.DataFrame, end_s: float) -> pd.DataFrame:
    """One row per firing interval of the log: ``alert, replica, start_s, end_s`` (an
    alert still firing at the end lasts to ``end_s``)."""
    rows: list[tuple[str, int, float, float]] = []
    log = alerts.sort_values(["alert", "replica", "time_s"], kind="stable")
    for (name, replica_key), group in log.groupby(["alert", "replica"], sort=True):
        replica = int(str(replica_key))
        start: float | None = None
        for state, t in zip(group["state"].tolist(), group["time_s"].tolist(), strict=True):
            if state == "firing" and start is None:
                start = float(t)
            elif state == "resolved" and start is not None:
                rows.append((str(name), replica, start, float(t)))
                start = None
        if start is not None:
            rows.append((str(name), replica, start, max(end_s, start)))
    return pd.DataFrame(rows, columns=["alert", "replica", "start_s", "end_s"])


def alert_windows(
    alerts: pd.DataFrame, end_s: float, max_windows: int = 150
) -> tuple[Windows, dict[str, np.ndarray]]:
    """``(windows, replicas)``: the alerts' firings (starts) counted per window
    (:func:`~reports.aggregate.window_counts`), and per alert the number of distinct
    replicas on which it was firing at some point of each window."""
    spans = firing_intervals(alerts, end_s)
    starts = {str(n): as_float(g["start_s"]) for n, g in spans.groupby("alert", sort=True)}
    windows = window_counts(starts, end_s, max_windows)
    n, width = len(windows.starts_s), windows.width_s
    first = window_index(as_float(spans["start_s"]), width, n)
    ends = np.maximum(as_float(spans["end_s"]) - 1e-9, 0.0)
    last = np.maximum(window_index(ends, width, n), first)
    lengths = last - first + 1
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    covered = pd.DataFrame(
        {
            "alert": np.repeat(spans["alert"].to_numpy(), lengths),
            "replica": np.repeat(spans["replica"].to_numpy(), lengths),
            "window": np.repeat(first, lengths) + offsets,
        }
    ).drop_duplicates()
    replicas = {}
    for name in starts:
        mine = covered[covered["alert"] == name]
        replicas[name] = np.bincount(mine["window"].to_numpy(dtype=np.int64), minlength=n)
    return windows, replicas


def alert_log(result: RunResult) -> tuple[pd.DataFrame, str]:
    """``(log, source)``: the run's alert log and where it comes from -- a fleet's
    ``alerts.parquet``, or for a single replica the log ``fragsim alerts show``
    evaluates over its samples and failures (the run's thresholds, the default scrape
    interval and trend window)."""
    if result.alerts is not None:
        return result.alerts, "alerts.parquet"
    severe, alert = ratio_thresholds(result.summary)
    thresholds = AlertThresholds(
        high_free_share=high_free_share(result.summary), ratio_alert=alert, ratio_severe=severe
    )
    log = evaluate_alerts(result.timeseries, result.events, thresholds=thresholds)
    return log, "evaluated as fragsim alerts show evaluates them"


def alert_timeline(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """See the module docstring: one row per alert that fired, high severity first; an
    empty panel where none fired."""
    end_s = _end_s(result)
    log, source = alert_log(result)
    firing = log[log["state"] == "firing"] if len(log) else log
    if not len(firing):
        title = ALERTS_TITLE if result.alerts is not None else SINGLE_ALERTS_TITLE
        return empty_panel(title, f"no alert fired ({source})")
    div, unit = time_unit(end_s)
    fig = go.Figure()
    fleet = result.alerts is not None
    rows = _alert_heatmap(fig, log, end_s, div, fleet)
    title = ALERTS_TITLE if fleet else SINGLE_ALERTS_TITLE
    fig.update_layout(**base_layout(f"{title} ({source})", 160 + 50 * rows))
    fig.update_xaxes(title_text=unit, range=[0, max(end_s / div, 1e-9)])
    fig.update_yaxes(type="category", automargin=True)
    return fig


def _alert_heatmap(
    fig: go.Figure, alerts: pd.DataFrame, end_s: float, div: float, fleet: bool
) -> int:
    """A heatmap: a row per alert (high severity first), a column per window, the colour
    the replicas firing (a fleet; one colour for a single replica, no scale); hover adds
    the firings that started in the window."""
    windows, replicas = alert_windows(alerts, end_s)
    severity = alerts.drop_duplicates("alert").set_index("alert")["severity"].astype(str)
    rank = {"high": 0, "medium": 1, "low": 2}
    names = sorted(replicas, key=lambda a: (rank.get(str(severity.get(a, "")), 3), a))
    firing = alerts[alerts["state"] == "firing"]
    labels = []
    for name in names:
        mine = firing[firing["alert"] == name]
        what = f"{_count(len(mine), 'firing')}, {_count(mine['replica'].nunique(), 'replica')}"
        labels.append(esc(f"{name} ({severity.get(name, '')}): {what}"))
    z = np.array([replicas[n] for n in names], dtype=float)
    fires = np.array([windows.counts[n] for n in names])
    x = (windows.starts_s + windows.width_s / 2.0) / div
    per = window_label(windows.width_s)
    fig.add_trace(
        go.Heatmap(
            x=x,
            y=labels,
            z=np.where(z > 0, z, np.nan),
            customdata=fires,
            colorscale=[[0.0, "#fcbba1"], [1.0, "#99000d"]],
            zmin=1,
            zmax=max(float(np.nanmax(z, initial=1.0)), 2.0) if fleet else 1.0,
            ygap=2,
            showscale=fleet,
            colorbar={"title": {"text": "replicas<br>firing"}, "thickness": 12},
            hovertemplate=("%{z} replicas firing, " if fleet else "firing, ")
            + "%{customdata} firings started in this "
            + per
            + "<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    return len(names)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
