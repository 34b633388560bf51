"""Figures and tables over several runs or a sweep: pure functions.

* :func:`comparison_bars` -- one bar chart per column of
  :func:`sim.fleet.compare.compare_frame`;
* :func:`comparison_table` -- the same numbers as an HTML table;
* :func:`sweep_heatmap` -- a metric over two swept parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.common import base_layout, colour, esc
from sim.fleet.compare import COLUMNS, compare_frame, formatted


def comparison_bars(summaries: Sequence[dict[str, Any]], names: Sequence[str]) -> go.Figure:
    """One bar chart per numeric column of :func:`~sim.fleet.compare.compare_frame`
    (columns missing for every run are left out), a bar per run named by ``names``."""
    frame = compare_frame(summaries)
    labels = dict(COLUMNS)
    columns = [c for c, _ in COLUMNS[1:] if pd.to_numeric(frame[c], errors="coerce").notna().any()]
    cols = 3
    n_rows = max(1, -(-len(columns) // cols))
    fig = make_subplots(
        rows=n_rows,
        cols=cols,
        subplot_titles=[esc(labels[c].strip()) for c in columns],
        vertical_spacing=min(0.5 / n_rows, 0.12),
        horizontal_spacing=0.08,
    )
    x = [esc(n) for n in names]
    for i, column in enumerate(columns):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        fig.add_trace(
            go.Bar(
                x=x,
                y=values,
                marker={"color": [colour(k) for k in range(len(x))]},
                showlegend=False,
                name=esc(labels[column].strip()),
                hovertemplate="%{x}: %{y:,.4g}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_layout(**base_layout("comparison", 200 + 230 * n_rows))
    fig.update_xaxes(showticklabels=len(x) <= 6, automargin=True)
    fig.update_yaxes(rangemode="tozero")
    return fig


def sweep_heatmap(
    frame: pd.DataFrame, x: str, y: str, metric: str, *, title: str | None = None
) -> go.Figure:
    """``metric`` over a two-parameter sweep: one cell per (``x``, ``y``) value pair (the
    mean where replications repeat a pair), the value written in each cell. Parameter
    values are shown as text (escaped), in sorted order."""
    for column in (x, y, metric):
        if column not in frame:
            raise KeyError(f"sweep frame has no column {column!r}")
    grid = frame.pivot_table(index=y, columns=x, values=metric, aggfunc="mean", sort=True)
    z = grid.to_numpy(dtype=float)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[esc(v) for v in grid.columns.tolist()],
            y=[esc(v) for v in grid.index.tolist()],
            colorscale="Viridis",
            colorbar={"title": {"text": esc(metric)}},
            texttemplate="%{z:.3g}",
            hovertemplate=f"{esc(x)} %{{x}}, {esc(y)} %{{y}}: %{{z:.4g}}<extra></extra>",
        )
    )
    fig.update_layout(**base_layout(title or f"{metric} by {x} and {y}", 420))
    fig.update_xaxes(title_text=esc(x), type="category")
    fig.update_yaxes(title_text=esc(y), type="category")
    return fig


def comparison_table(summaries: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """The comparison table (HTML): a row per metric of :data:`~sim.fleet.compare.COLUMNS`,
    a column per run."""
    frame = compare_frame(summaries)
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    rows = [f"<tr><th>metric</th>{head}</tr>"]
    for column, label in COLUMNS[1:]:
        cells = "".join(f"<td>{esc(formatted(column, v))}</td>" for v in frame[column].tolist())
        rows.append(f"<tr><td>{esc(label.strip())}</td>{cells}</tr>")
    return f'<table class="comparison">{"".join(rows)}</table>'
