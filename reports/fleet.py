"""Figures of a fleet run, of several runs and of sweeps: pure functions to plotly figures.

* :func:`alert_timeline` -- when each alert fired and resolved, per replica (a
  single-replica run: when each of the summary's alerts first fired);
* :func:`replicas_over_time` -- replicas by lifecycle state, with restarts, crashes and
  scale events and their causes;
* :func:`cost_over_time` -- the bill and the replica-hours so far.

Figures over several runs or a sweep live in :mod:`reports.comparison`.

Functions that need a fleet table return None for a single-replica run (``fleet`` None).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.common import (
    FLEET_EVENT_KINDS,
    as_float,
    base_layout,
    esc,
    max_time_s,
    time_unit,
)
from reports.downsample import (
    MAX_MARKERS,
    MAX_SERIES_POINTS,
    minmax_indices,
    shown_label,
    stride_indices,
)
from sim.results.io import RunResult

STATES = (
    ("active", "#2ca02c"),
    ("warming", "#bcbd22"),
    ("loading", "#17becf"),
    ("provisioning", "#1f77b4"),
    ("draining", "#ff7f0e"),
    ("down", "#d62728"),
)
EVENT_STYLE = {
    "restart": ("circle", "#9467bd"),
    "crash": ("x", "#d62728"),
    "scale-up": ("triangle-up", "#2ca02c"),
    "scale-down": ("triangle-down", "#8c564b"),
}
MAX_INTERVALS = 2000
"""Most alert intervals drawn per severity (an even stride; the legend gives the count)."""
SEVERITY_COLOUR = {"high": "#d62728", "medium": "#ff7f0e", "low": "#1f77b4"}


def _intervals(alerts: pd.DataFrame, end_s: float) -> pd.DataFrame:
    """One row per firing interval: ``replica, alert, severity, start_s, end_s,
    response`` (an alert still firing at the end lasts to ``end_s``)."""
    rows: list[dict[str, Any]] = []
    for (replica, name), log in alerts.groupby(["replica", "alert"], sort=True):
        start: dict[Any, Any] | None = None
        for row in log.sort_values("time_s", kind="stable").to_dict("records"):
            if row["state"] == "firing" and start is None:
                start = row
            elif row["state"] == "resolved" and start is not None:
                rows.append(_interval(replica, name, start, float(row["time_s"])))
                start = None
        if start is not None:
            rows.append(_interval(replica, name, start, end_s))
    return pd.DataFrame(
        rows, columns=["replica", "alert", "severity", "start_s", "end_s", "response"]
    )


def _interval(replica: Any, name: Any, start: dict[Any, Any], end_s: float) -> dict[str, Any]:
    return {
        "replica": int(replica),
        "alert": str(name),
        "severity": str(start["severity"]),
        "start_s": float(start["time_s"]),
        "end_s": max(end_s, float(start["time_s"])),
        "response": str(start["response"]),
    }


def alert_timeline(result: RunResult) -> go.Figure:
    """A fleet run: a bar per firing interval on a row per (alert, replica), coloured by
    severity, the seed's response on hover. A single replica: a marker where each of
    the summary's alerts first fired, its condition and count on hover."""
    summary = result.summary
    end_s = max(
        float(summary.get("engine", {}).get("end_s", 0.0)),
        max_time_s(result.timeseries, result.alerts),
    )
    div, unit = time_unit(end_s)
    fig = go.Figure()
    if result.alerts is not None:
        spans = _intervals(result.alerts, end_s)
        labels = [
            f"{a} · replica {r}" for a, r in zip(spans["alert"], spans["replica"], strict=True)
        ]
        spans["row"] = [esc(label) for label in labels]
        for severity, group in spans.groupby("severity", sort=True):
            keep = stride_indices(len(group), MAX_INTERVALS)
            g = group.iloc[keep]
            x: list[float | None] = []
            y: list[str | None] = []
            text: list[str | None] = []
            for row in g.to_dict("records"):
                hover = esc(f"{row['alert']} ({row['severity']}) on replica {row['replica']}: ")
                hover += esc(row["response"])
                x += [float(row["start_s"]) / div, float(row["end_s"]) / div, None]
                y += [str(row["row"]), str(row["row"]), None]
                text += [hover, hover, None]
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    text=text,
                    mode="lines+markers",
                    line={"width": 8, "color": SEVERITY_COLOUR.get(str(severity), "#7f7f7f")},
                    marker={"size": 4},
                    name=esc(shown_label(f"{severity} alerts", len(g), len(group))),
                    hovertemplate="%{text}<extra></extra>",
                )
            )
        rows = len(set(labels))
    else:
        found = summary.get("alerts", [])
        for a in found:
            hover = esc(f"{a['alert']} ({a['severity']}): {a.get('condition', '')}")
            for key in ("matching_failures", "matching_samples"):
                if key in a:
                    hover += esc(f"; {a[key]:,} {key.replace('_', ' ')}")
            fig.add_trace(
                go.Scatter(
                    x=[float(a.get("first_time_s", 0.0)) / div],
                    y=[esc(a["alert"])],
                    mode="markers",
                    marker={"size": 12, "color": SEVERITY_COLOUR.get(a["severity"], "#7f7f7f")},
                    name=esc(f"{a['alert']} (first)"),
                    text=[hover],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
        rows = len(found)
    if not rows:
        fig.add_annotation(
            text="no alerts fired", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )
    fig.update_layout(**base_layout("alerts", min(1400, 220 + 26 * max(rows, 1))))
    fig.update_layout(margin={"l": 260})
    fig.update_xaxes(title_text=unit, range=[0, max(end_s / div, 1e-9)])
    fig.update_yaxes(type="category", automargin=True)
    return fig


def _kept_rows(fleet: pd.DataFrame, column: str) -> pd.DataFrame:
    return fleet.iloc[minmax_indices(as_float(fleet[column]), MAX_SERIES_POINTS)]


def replicas_over_time(result: RunResult) -> go.Figure | None:
    """Replicas by lifecycle state (stacked steps, fleet table), and markers for each
    restart, crash, scale-up and scale-down (events) at the fleet's size then, the cause
    and detail on hover. None for a single replica."""
    fleet = result.fleet
    if fleet is None:
        return None
    fleet = fleet.sort_values("time_s", kind="stable")
    div, unit = time_unit(float(fleet["time_s"].max()) if len(fleet) else 0.0)
    rows = _kept_rows(fleet, "replicas") if len(fleet) else fleet
    fig = go.Figure()
    for state, color in STATES:
        if state not in rows:
            continue
        fig.add_trace(
            go.Scatter(
                x=as_float(rows["time_s"]) / div,
                y=as_float(rows[state]),
                mode="lines",
                name=state,
                stackgroup="states",
                line={"shape": "hv", "width": 0.5, "color": color},
            )
        )
    events = result.events[result.events["kind"].isin(FLEET_EVENT_KINDS)]
    times = as_float(fleet["time_s"])
    size = as_float(fleet["replicas"]) if len(fleet) else np.zeros(0)
    for kind, (symbol, color) in EVENT_STYLE.items():
        found = events[events["kind"] == kind]
        if not len(found):
            continue
        shown = found.iloc[stride_indices(len(found), MAX_MARKERS)]
        at = np.searchsorted(times, as_float(shown["time_s"]), side="right") - 1
        y = size[np.clip(at, 0, max(len(size) - 1, 0))] if len(size) else np.zeros(len(shown))
        text = [
            esc(f"{kind} of replica {r}: {cause}") + (f"<br>{esc(d)}" if d else "")
            for r, cause, d in zip(
                shown["replica"].tolist(),
                shown["cause"].tolist(),
                shown["detail"].fillna("").tolist(),
                strict=True,
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=as_float(shown["time_s"]) / div,
                y=y,
                mode="markers",
                name=shown_label(kind, len(shown), len(found)),
                marker={"symbol": symbol, "color": color, "size": 10, "line": {"width": 1}},
                text=text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.update_layout(**base_layout("replicas by state, restarts and scale events", 420))
    fig.update_yaxes(title_text="replicas", rangemode="tozero")
    fig.update_xaxes(title_text=unit)
    return fig


def cost_over_time(result: RunResult) -> go.Figure | None:
    """The bill so far (USD, left) and the replica-hours so far (right), from the fleet
    table. None for a single replica."""
    fleet = result.fleet
    if fleet is None:
        return None
    fleet = fleet.sort_values("time_s", kind="stable")
    div, unit = time_unit(float(fleet["time_s"].max()) if len(fleet) else 0.0)
    rows = _kept_rows(fleet, "cost_usd") if len(fleet) else fleet
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = as_float(rows["time_s"]) / div
    fig.add_trace(
        go.Scatter(x=x, y=as_float(rows["cost_usd"]), name="cost (USD)", mode="lines"),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=as_float(rows["replica_hours"]),
            name="replica-hours",
            mode="lines",
            line={"dash": "dot"},
        ),
        secondary_y=True,
    )
    fig.update_layout(**base_layout("cost over time", 360))
    fig.update_yaxes(title_text="USD", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="replica-hours", secondary_y=True, rangemode="tozero")
    fig.update_xaxes(title_text=unit)
    return fig
