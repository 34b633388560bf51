"""Figures of a fleet's size and bill: pure functions to plotly figures; each returns
None for a single-replica run (``fleet`` None).

* :func:`replicas_over_time` -- replicas by lifecycle state (stacked; a state no
  replica was ever in left out), and below it the scale events counted per window
  (scale-ups up, avoidable ones apart; scale-downs down), restarts and crashes per
  window, each panel only where the run has such events (a fleet that never scales has
  none, and its title says so: the replicas panel then carries the time axis).
  Counting per window keeps the figure readable at a thousand scale events (one marker
  each buried the states);
* :func:`cost_over_time` -- the bill so far with its avoidable part as its own series
  (top), and the replica-hours so far, total and avoidable (bottom): two panels, since
  with one price the two are proportional and drawn on one plot they look like one line.

*Avoidable*: bought by a scale-up every one of whose triggering failures was a
fragmentation failure (``sim.fleet``: more replicas do not fix fragmentation). The
fleet table's ``avoidable_*`` columns and the scale-up's ``; avoidable`` detail say so; a
run written before they existed shows the summary's total only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.aggregate import window_counts
from reports.common import DEFAULT_OPTIONS, ReportOptions, as_float, base_layout, time_unit
from reports.downsample import MAX_SERIES_POINTS, minmax_indices, window_label
from sim.results.io import RunResult

STATES = (
    ("active", "#2ca02c"),
    ("warming", "#bcbd22"),
    ("loading", "#17becf"),
    ("provisioning", "#1f77b4"),
    ("draining", "#ff7f0e"),
    ("down", "#d62728"),
)
AVOIDABLE_TAG = "; avoidable"
"""How a scale-up's ``detail`` says it was avoidable (``sim.fleet.lifecycle``)."""
EVENT_BARS = (
    ("scale-up (avoidable)", "#d62728", 1, "scale events"),
    ("scale-up", "#2ca02c", 1, "scale events"),
    ("scale-down", "#8c564b", -1, "scale events"),
    ("restart", "#9467bd", 1, "restarts and crashes"),
    ("crash", "#222222", 1, "restarts and crashes"),
)
"""(series, colour, sign, panel) of the events-per-window bars."""
NONE_OF = {
    ("scale events",): "no scale events",
    ("restarts and crashes",): "no restarts or crashes",
    ("scale events", "restarts and crashes"): "no scale events, restarts or crashes",
}
"""What the figure's title says of the event panels a run has nothing for."""


def _fleet(result: RunResult) -> pd.DataFrame | None:
    fleet = result.fleet
    return None if fleet is None else fleet.sort_values("time_s", kind="stable")


def _kept_rows(fleet: pd.DataFrame, column: str) -> pd.DataFrame:
    return fleet.iloc[minmax_indices(as_float(fleet[column]), MAX_SERIES_POINTS)]


def event_times(events: pd.DataFrame) -> dict[str, np.ndarray]:
    """Times of each series of :data:`EVENT_BARS`: scale-ups split by their avoidable tag."""
    out = {}
    ups = events[events["kind"] == "scale-up"]
    avoidable = ups["detail"].fillna("").astype(str).str.endswith(AVOIDABLE_TAG).to_numpy()
    out["scale-up (avoidable)"] = as_float(ups["time_s"])[avoidable]
    out["scale-up"] = as_float(ups["time_s"])[~avoidable]
    for kind in ("scale-down", "restart", "crash"):
        out[kind] = as_float(events.loc[events["kind"] == kind, "time_s"])
    return out


def replicas_over_time(
    result: RunResult, options: ReportOptions = DEFAULT_OPTIONS
) -> go.Figure | None:
    """See the module docstring."""
    fleet = _fleet(result)
    if fleet is None:
        return None
    end_s = max(float(fleet["time_s"].max()) if len(fleet) else 0.0, 1e-9)
    div, unit = time_unit(end_s)
    times = event_times(result.events)
    windows = window_counts(times, end_s)
    panels = [
        panel
        for panel in dict.fromkeys(p for *_, p in EVENT_BARS)
        if any(len(times[series]) for series, *_, p in EVENT_BARS if p == panel)
    ]
    every = window_label(windows.width_s)
    missing = [p for p in dict.fromkeys(p for *_, p in EVENT_BARS) if p not in panels]
    title = "replicas and scale events"
    if missing:
        title += " (" + NONE_OF[tuple(missing)] + " in this run)"
    fig = make_subplots(
        rows=1 + len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        row_heights=[0.55] + [0.45 / len(panels)] * len(panels) if panels else [1.0],
        subplot_titles=["replicas by lifecycle state"]
        + [f"{p} per {every}" + (" (up +, down −)" if p == "scale events" else "") for p in panels],
    )
    rows = _kept_rows(fleet, "replicas") if len(fleet) else fleet
    for state, color in STATES:
        if state not in rows or not (as_float(fleet[state]) > 0).any():
            continue
        fig.add_trace(
            go.Scatter(
                x=as_float(rows["time_s"]) / div,
                y=as_float(rows[state]),
                mode="lines",
                name=state,
                stackgroup="states",
                line={"shape": "hv", "width": 0.5, "color": color},
                legendgroup="states",
                legendgrouptitle_text="replicas by state",
            ),
            row=1,
            col=1,
        )
    x = (windows.starts_s + windows.width_s / 2.0) / div
    unrecorded = "" if "avoidable_cost_usd" in fleet else " (avoidable not recorded by this run)"
    for rank, (series, color, sign, panel) in enumerate(EVENT_BARS):
        if panel not in panels or not len(times[series]):
            continue
        counts = windows.counts[series]
        fig.add_trace(
            go.Bar(
                x=x,
                y=sign * counts,
                width=windows.width_s / div,
                name=f"{series}{unrecorded if series == 'scale-up' else ''}: {len(times[series]):,}",
                marker={"color": color, "line": {"width": 0}},
                customdata=counts,
                hovertemplate=f"%{{customdata:,}} {series}<extra></extra>",
                legendgroup="events",
                legendrank=1000 + rank,
                legendgrouptitle_text=f"events per {every}",
            ),
            row=2 + panels.index(panel),
            col=1,
        )
    fig.update_layout(**base_layout(title, (380, 480, 560)[len(panels)]))
    fig.update_layout(barmode="relative", bargap=0.0)
    fig.update_yaxes(title_text="replicas", rangemode="tozero", row=1, col=1)
    for i in range(len(panels)):
        fig.update_yaxes(title_text="events", row=2 + i, col=1)
    fig.update_xaxes(title_text=unit, range=[0, end_s / div], row=1 + len(panels), col=1)
    return fig


def cost_over_time(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure | None:
    """See the module docstring."""
    fleet = _fleet(result)
    if fleet is None:
        return None
    div, unit = time_unit(float(fleet["time_s"].max()) if len(fleet) else 0.0)
    rows = _kept_rows(fleet, "cost_usd") if len(fleet) else fleet
    f = result.summary.fleet
    run_totals = (
        {}
        if f is None
        else {
            "avoidable_cost_usd": float(f.avoidable_cost_usd),
            "avoidable_replica_hours": float(f.avoidable_replica_hours),
        }
    )
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=("cost so far (USD)", "replica-hours so far"),
    )
    x = as_float(rows["time_s"]) / div
    for row, total, avoidable, what, fmt, spec in (
        (1, "cost_usd", "avoidable_cost_usd", "USD", "$%{y:,.2f}", "${:,.2f}"),
        (2, "replica_hours", "avoidable_replica_hours", "replica-hours", "%{y:,.1f} h", "{:,.1f}"),
    ):
        y_total = as_float(rows[total])
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y_total,
                mode="lines",
                name=f"total {what}" + (f": {spec.format(y_total[-1])}" if len(y_total) else ""),
                line={"color": "#1f77b4", "width": 1.6},
                legendgroup=total,
                hovertemplate=f"total {fmt}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        if avoidable in rows:
            y = as_float(rows[avoidable])
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    fill="tozeroy",
                    fillcolor="rgba(214,39,40,0.25)",
                    name=f"avoidable {what} (scale-ups for fragmentation)"
                    + (f": {spec.format(y[-1])}" if len(y) else ""),
                    line={"color": "#d62728", "width": 1.4},
                    hovertemplate=f"avoidable {fmt}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        elif avoidable in run_totals and len(x):
            fig.add_trace(
                go.Scatter(
                    x=[x[-1]],
                    y=[run_totals[avoidable]],
                    mode="markers",
                    marker={"color": "#d62728", "size": 10, "symbol": "diamond"},
                    name=f"avoidable {what}: run total (not recorded over time by this run)",
                    hovertemplate=f"avoidable {fmt}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    fig.update_layout(**base_layout("cost and replica-hours, total and avoidable", 520))
    fig.update_yaxes(title_text="USD", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="replica-hours", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=unit, row=2, col=1)
    return fig
