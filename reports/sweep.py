"""The sweep report (``fragsim sweep`` writes ``OUT/report.html``) from the sweep's
summary table (:func:`sim.sweep.summary.summary_frame`: a row per point, each metric's
``_mean`` and ``_ci95_low`` / ``_ci95_high``).

Layout: the base scenario's name as title; the parameters varied and those held, by
readable labels with units (:mod:`sim.sweep.labels`); the results table -- a row per
point, per metric of :data:`TABLE_METRICS` the mean, ``± half the 95 % interval`` where
replications give one, and its difference from the baseline point's mean in percent
(the baseline is the sweep's first point); then a figure per metric of
:data:`FIGURE_METRICS` that any point has:

* two or more parameters varied: heatmaps of the mean over the first two, one panel per
  combination of the others, all panels of a metric on ONE colour scale that starts at
  zero and ends at the largest mean of any panel (a 1.7 % difference reads as nearly one
  colour; a difference from zero to the top reads full range), the mean ± half-interval
  written in each cell;
* one parameter varied: a bar per value with the interval as error bars, from zero;
* none (replications only): the table alone.

A metric missing or zero at every point is left out of the figures (the table shows it).

Bounded size: plotly.js once (``plotly.offline.get_plotlyjs()``, about 4.6 MiB) plus
data that grows with the number of points and stops at a bound: the table lists at most
:data:`MAX_TABLE_POINTS` points (all are in ``summary.csv``), a heatmap at most
:data:`MAX_PANELS` panels -- under 1.5 MiB above plotly.js for any sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from reports.common import base_layout, esc
from reports.html import STYLE, figure_html, write_html
from sim.sweep.labels import mean_cell, mean_ci_cell, metric_label, param_label

TABLE_METRICS: tuple[str, ...] = (
    "failure_rate",
    "allocation_failures",
    "failures_at_high_free",
    "replica_hours",
    "avoidable_replica_hours",
    "cost_usd",
    "ttft_p99_s",
    "e2e_p99_s",
)
"""Metrics in the results table (those missing at every point are left out)."""
FIGURE_METRICS: tuple[str, ...] = (
    "failure_rate",
    "failures_at_high_free",
    "cost_usd",
    "avoidable_replica_hours",
    "ttft_p99_s",
    "e2e_p99_s",
)
"""Metrics drawn, in order (replica-hours is cost over the price: not drawn twice)."""
MAX_TABLE_POINTS = 500
MAX_PANELS = 12
SIZE_BOUND_BYTES = 1_500_000
"""What the report may add to plotly.js (module docstring; tested)."""


def varied(summary: pd.DataFrame, params: Sequence[str]) -> list[str]:
    """The parameters that take more than one value, in the sweep's order."""
    return [p for p in params if summary[p].astype(str).nunique() > 1]


def cells(summary: pd.DataFrame, metric: str) -> list[str]:
    """``mean ± half-interval`` of ``metric`` per row (the mean alone without an
    interval): ``metric`` is a base name, its columns ``METRIC_mean`` and
    ``METRIC_ci95_low`` / ``_high``."""
    nan = np.full(len(summary), np.nan)
    mean = summary[f"{metric}_mean"].to_numpy(dtype=float)
    low = (
        summary[f"{metric}_ci95_low"].to_numpy(dtype=float)
        if f"{metric}_ci95_low" in summary
        else nan
    )
    high = (
        summary[f"{metric}_ci95_high"].to_numpy(dtype=float)
        if f"{metric}_ci95_high" in summary
        else nan
    )
    return [
        mean_ci_cell(m, lo, hi)
        for m, lo, hi in zip(mean.tolist(), low.tolist(), high.tolist(), strict=True)
    ]


def sweep_heatmap(
    frame: pd.DataFrame,
    x: str,
    y: str,
    metric: str,
    *,
    by: Sequence[str] = (),
    title: str | None = None,
) -> go.Figure:
    """``metric`` over ``x`` and ``y``: a cell per value pair (the mean where rows repeat
    a pair), one panel per combination of the ``by`` columns (at most
    :data:`MAX_PANELS`), all on one colour scale from zero (or the lowest value, when
    negative) to the highest. A ``_mean`` metric with ``_ci95_low/high`` columns beside
    it writes ``mean ± half-interval`` in its cells. Parameter values are shown as
    escaped text, in sorted order."""
    for column in (x, y, metric, *by):
        if column not in frame:
            raise KeyError(f"sweep frame has no column {column!r}")
    base = metric.removesuffix("_mean")
    with_ci = metric.endswith("_mean") and f"{base}_ci95_low" in frame
    if with_ci:  # a summary: one row per point, its interval beside its mean
        frame = frame.assign(_text=cells(frame, base))
    groups = list(frame.groupby(list(by), sort=True)) if by else [((), frame)]
    groups = groups[:MAX_PANELS]
    values = pd.to_numeric(frame[metric], errors="coerce")
    top = float(values.max()) if values.notna().any() else 1.0
    low = min(0.0, float(values.min())) if values.notna().any() else 0.0
    cols = min(len(groups), 3)
    rows = -(-len(groups) // cols)
    traces: list[dict[str, Any]] = []
    layout = base_layout(title or metric_label(metric), 140 + 320 * rows)
    layout["annotations"] = []
    hover = f"{esc(param_label(x))} %{{x}}, {esc(param_label(y))} %{{y}}: %{{z:.4g}}<extra></extra>"
    for i, (key, group) in enumerate(groups):
        xs, ys, z, text = _grid(group, x, y, metric, "_text" if with_ci else None)
        n = "" if i == 0 else str(i + 1)
        traces.append(
            {
                "type": "heatmap",
                "z": z,
                "x": [esc(v) for v in xs],
                "y": [esc(v) for v in ys],
                "text": [[esc(t) for t in line] for line in text],
                "texttemplate": "%{text}",
                "coloraxis": "coloraxis",
                "hovertemplate": hover,
                "xaxis": f"x{n}",
                "yaxis": f"y{n}",
            }
        )
        x_domain, y_domain = _domain(i, rows, cols)
        layout[f"xaxis{n}"] = {"domain": x_domain, "anchor": f"y{n}", "type": "category"}
        layout[f"yaxis{n}"] = {"domain": y_domain, "anchor": f"x{n}", "type": "category"}
        layout[f"xaxis{n}"]["title"] = {"text": esc(param_label(x))}
        layout[f"yaxis{n}"]["title"] = {"text": esc(param_label(y))}
        if by:
            words = zip(by, _tuple(key), strict=True)
            layout["annotations"].append(
                {
                    "text": ", ".join(f"{esc(param_label(b))} {esc(v)}" for b, v in words),
                    "x": sum(x_domain) / 2,
                    "y": y_domain[1],
                    "xref": "paper",
                    "yref": "paper",
                    "xanchor": "center",
                    "yanchor": "bottom",
                    "showarrow": False,
                }
            )
    layout["coloraxis"] = {
        "colorscale": "Blues",
        "cmin": low,
        "cmax": top if top > low else low + 1.0,
        "colorbar": {"title": {"text": esc(metric_label(metric)), "side": "right"}},
    }
    return go.Figure({"data": traces, "layout": layout})


def _domain(i: int, rows: int, cols: int) -> tuple[list[float], list[float]]:
    """Panel ``i``'s (x, y) domains in a ``rows`` x ``cols`` grid filled row by row from
    the top, with gaps for axis titles and panel titles."""
    r, c = divmod(i, cols)
    x_gap, y_gap = 0.08 if cols > 1 else 0.0, 0.14 if rows > 1 else 0.0
    x0, y1 = c / cols, 1 - r / rows
    return [x0, x0 + 1 / cols - x_gap], [y1 - 1 / rows + y_gap, y1 - (0.05 if rows > 1 else 0)]


def _grid(
    frame: pd.DataFrame, x: str, y: str, metric: str, text_column: str | None
) -> tuple[list[Any], list[Any], np.ndarray, list[list[str]]]:
    """(x values, y values, the mean of ``metric`` per cell -- NaN where none --, each
    cell's text: ``text_column``'s first, else the mean) with values sorted; rows
    missing ``x`` or ``y`` are left out (as ``pivot_table`` does)."""
    keep = frame[x].notna() & frame[y].notna()
    frame = frame[keep]
    xs, ys = _sorted(frame[x].tolist()), _sorted(frame[y].tolist())
    col, row = {v: i for i, v in enumerate(xs)}, {v: i for i, v in enumerate(ys)}
    total = np.zeros((len(ys), len(xs)))
    count = np.zeros((len(ys), len(xs)))
    given: dict[tuple[int, int], str] = {}
    values = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float).tolist()
    texts = frame[text_column].tolist() if text_column else [None] * len(values)
    for a, b, v, t in zip(frame[x].tolist(), frame[y].tolist(), values, texts, strict=True):
        i, j = row[b], col[a]
        if not math.isnan(v):
            total[i, j] += v
            count[i, j] += 1
        if t is not None:
            given.setdefault((i, j), t)
    z = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    text = [
        [given.get((i, j), mean_cell(float(z[i, j]))) for j in range(len(xs))]
        for i in range(len(ys))
    ]
    return xs, ys, z, text


def _sorted(values: list[Any]) -> list[Any]:
    unique = list(dict.fromkeys(values))
    try:
        return sorted(unique)
    except TypeError:  # values of several types: by their text
        return sorted(unique, key=str)


def _tuple(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key,)


def sweep_bars(frame: pd.DataFrame, x: str, metric: str) -> go.Figure:
    """``metric``'s mean per value of ``x`` (in the frame's order), the 95 % interval as
    error bars where the frame has one, the axis from zero."""
    base = metric.removesuffix("_mean")
    mean = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    error = None
    if f"{base}_ci95_high" in frame:
        high = frame[f"{base}_ci95_high"].to_numpy(dtype=float)
        error = {"type": "data", "array": (high - mean).tolist(), "visible": True}
    fig = go.Figure(
        go.Bar(
            x=[esc(v) for v in frame[x].tolist()],
            y=mean,
            error_y=error,
            text=[esc(t) for t in cells(frame, base)],
            textposition="inside",
            insidetextanchor="middle",
            hovertemplate="%{x}: %{y:.4g}<extra></extra>",
        )
    )
    fig.update_layout(**base_layout(metric_label(metric), 380))
    fig.update_xaxes(title_text=esc(param_label(x)), type="category")
    fig.update_yaxes(title_text=esc(metric_label(metric)), rangemode="tozero")
    return fig


def results_table(summary: pd.DataFrame, params: Sequence[str]) -> str:
    """The results as HTML: a row per point (at most :data:`MAX_TABLE_POINTS`), the
    varied parameters, the runs that finished, and per metric of :data:`TABLE_METRICS`
    ``mean ± half-interval`` over the difference from the first point in percent."""
    shown = varied(summary, params) or list(params)
    metrics = [
        m for m in TABLE_METRICS if f"{m}_mean" in summary and summary[f"{m}_mean"].notna().any()
    ]
    head = ["point", *(param_label(p) for p in shown), "runs", *map(metric_label, metrics)]
    rows = ["<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    top = summary.iloc[:MAX_TABLE_POINTS]
    texts = {m: cells(top, m) for m in metrics}
    means = {m: top[f"{m}_mean"].to_numpy(dtype=float).tolist() for m in metrics}
    for i, row in enumerate(top.to_dict("records")):
        failed = int(row.get("failed_runs", 0) or 0)
        runs = f"{int(row['replications'])}" + (f" ({failed} failed)" if failed else "")
        line = [str(int(row["point"])), *(esc(row[p]) for p in shown), runs]
        line += [f"{esc(texts[m][i])}<br>{_vs_first(means[m], i)}" for m in metrics]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in line) + "</tr>")
    more = ""
    if len(summary) > MAX_TABLE_POINTS:
        more = f"<p>first {MAX_TABLE_POINTS:,} of {len(summary):,} points; all in summary.csv</p>"
    return f'<div style="overflow-x:auto"><table class="sweep">{"".join(rows)}</table></div>{more}'


def _vs_first(means: list[float], i: int) -> str:
    """The difference of ``means[i]`` from ``means[0]`` (the baseline), in percent."""
    if i == 0:
        return '<small style="color:#777">baseline</small>'
    ref, value = means[0], means[i]
    if math.isnan(ref) or math.isnan(value):
        return ""
    if ref == 0:
        if value == 0:
            return '<small style="color:#777">±0 %</small>'
        return ""
    pct = 100.0 * (value - ref) / abs(ref)
    colour = "#777" if abs(pct) < 0.05 else "#2ca02c" if pct < 0 else "#d62728"
    return f'<small style="color:{colour}">{pct:+.1f} %</small>'


def figures(summary: pd.DataFrame, params: Sequence[str]) -> list[go.Figure]:
    """The report's figures (module docstring): heatmaps, bars, or none."""
    axes = varied(summary, params)
    present = [m for m in FIGURE_METRICS if _drawn(summary, f"{m}_mean")]
    if not axes:
        return []
    if len(axes) == 1:
        return [sweep_bars(summary, axes[0], f"{m}_mean") for m in present]
    x, y, *by = axes
    return [sweep_heatmap(summary, x, y, f"{m}_mean", by=by) for m in present]


def _drawn(summary: pd.DataFrame, column: str) -> bool:
    """Worth a figure: present, and not zero at every point."""
    if column not in summary:
        return False
    values = pd.to_numeric(summary[column], errors="coerce")
    return bool(values.notna().any() and (values.fillna(0) != 0).any())


def build_sweep_report(summary: pd.DataFrame, params: Sequence[str], title: str) -> str:
    """The report's HTML (module docstring): same summary, same bytes."""
    axes = varied(summary, params)
    held = [p for p in params if p not in axes]
    lines = [
        f"<p>{len(summary):,} points; varied: "
        + (", ".join(esc(param_label(p)) for p in axes) or "nothing (replications only)")
        + "</p>"
    ]
    if held:
        fixed = ", ".join(f"{esc(param_label(p))} {esc(summary[p].iloc[0])}" for p in held)
        lines.append(f"<p>held: {fixed}</p>")
    lines.append(
        "<p>mean ± half the 95 % interval over replications; below it, the difference "
        "from the first point (the baseline) in percent, green lower, red higher. Axes and "
        "colour scales start at zero.</p>"
    )
    parts = [*lines, "<h2>results</h2>", results_table(summary, params)]
    figs = figures(summary, params)
    if len(axes) > 2 and figs:
        groups = summary.groupby(axes[2:]).ngroups
        if groups > MAX_PANELS:
            parts.append(f"<p>heatmaps: first {MAX_PANELS} of {groups} panels</p>")
    if figs:
        parts.append("<h2>figures</h2>")
    divs = [figure_html(fig, i) for i, fig in enumerate(figs)]
    if all(len(fig.data) == 1 for fig in figs):  # single panels: two to a row
        divs = [
            f'<div style="display:grid;grid-template-columns:1fr 1fr;gap:1em">{"".join(divs)}</div>'
        ]
    parts += divs
    heading = f"sweep: {title}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(heading)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>'
        f"<h1>{esc(heading)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def write_sweep_report(
    summary: pd.DataFrame, params: Sequence[str], out: str | Path, title: str
) -> Path:
    """Write :func:`build_sweep_report` to ``out`` atomically; ``traces.TraceError`` when
    it cannot be written."""
    return write_html(build_sweep_report(summary, params, title), out)
