"""Marks several figures put over their time axis: allocation failures by diagnosis and
restarts. Each adds a bounded number of points (:data:`~reports.downsample.MAX_MARKERS`)
and says in its legend entry how many of how many it shows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from reports.aggregate import allocation_failures
from reports.common import (
    CAPACITY_COLOUR,
    FRAGMENTATION_COLOUR,
    RESTART_COLOUR,
    as_float,
    esc,
    replica_label,
    replica_names,
)
from reports.downsample import MAX_MARKERS, shown_label, stride_indices

MAX_RESTART_LINES = 500
"""Most restart lines per panel (an even stride beyond)."""
CAUSES = (
    ("fragmentation", "fragmentation failures", "x", FRAGMENTATION_COLOUR),
    ("capacity", "capacity failures", "circle-open", CAPACITY_COLOUR),
)
"""The allocator's causes as the report names and draws them (``sim.telemetry.alerts``'s
diagnoses: fragmentation on a capable node / capacity shortage)."""


def _marker_size(markers: int) -> dict[str, float]:
    """Smaller and fainter markers where thousands would hide what they sit on."""
    return {"size": 6, "opacity": 0.8} if markers <= 1000 else {"size": 4.5, "opacity": 0.55}


def add_failures(
    fig: go.Figure, events: pd.DataFrame, div: float, *, row: int, col: int = 1
) -> None:
    """Each allocation failure at (its time, its free share in %), one trace per cause,
    at most :data:`MAX_MARKERS` in all (an even stride per cause)."""
    fails = allocation_failures(events)
    for cause, label, symbol, color in CAUSES:
        found = fails[fails["cause"] == cause]
        if not len(found):
            continue
        shown = found.iloc[stride_indices(len(found), MAX_MARKERS // len(CAUSES))]
        names = replica_names(shown)
        text = [
            esc(f"{replica_label(names, r)}: {kind} ({cause}), need {need:,} tokens, free {free:,}")
            for r, kind, need, free in zip(
                shown["replica"].tolist(),
                shown["kind"].tolist(),
                shown["need_tokens"].tolist(),
                shown["free_tokens"].tolist(),
                strict=True,
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=as_float(shown["time_s"]) / div,
                y=as_float(shown["free_share"]) * 100.0,
                mode="markers",
                name=shown_label(label, len(shown), len(found)),
                marker={"color": color, "symbol": symbol, **_marker_size(len(fails))},
                text=text,
                hovertemplate="%{text}<br>free %{y:.1f} % of KV memory<extra></extra>",
            ),
            row=row,
            col=col,
        )


def add_restarts(
    fig: go.Figure,
    events: pd.DataFrame,
    div: float,
    spans: list[tuple[int, float, float]],
    *,
    legend: bool = True,
) -> None:
    """A thin vertical line at each restart (events ``restart``), from ``low`` to
    ``high`` on each ``(row, low, high)`` of ``spans``; one legend entry (the first
    row's trace), the cause and replica on hover."""
    restarts = events[events["kind"] == "restart"]
    if not len(restarts):
        return
    shown = restarts.iloc[stride_indices(len(restarts), MAX_RESTART_LINES)]
    t = as_float(shown["time_s"]) / div
    names = replica_names(shown)
    text = [
        esc(f"restart of {replica_label(names, r)}: {cause}")
        for r, cause in zip(shown["replica"].tolist(), shown["cause"].tolist(), strict=True)
    ]
    for i, (row, low, high) in enumerate(spans):
        x = np.column_stack([t, t, np.full(len(t), np.nan)]).ravel()
        y = np.tile([low, high, np.nan], len(t))
        hover = [h for h in text for h in (h, h, "")]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                name=shown_label("restarts", len(shown), len(restarts)),
                line={"color": RESTART_COLOUR, "width": 1, "dash": "dot"},
                opacity=0.7,
                legendgroup="restarts",
                showlegend=legend and i == 0,
                text=hover,
                hovertemplate="%{text}<extra></extra>",
                connectgaps=False,
            ),
            row=row,
            col=1,
        )
