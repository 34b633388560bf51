"""The comparison over several runs, against a baseline: pure functions.

* :func:`comparison_table` -- the answer first: each run's one-line verdict in rank
  order, then a table with a row per metric, the baseline's value and, per other run,
  its value and its difference (and percent) from the baseline's, coloured better or
  worse (every compared metric is lower-is-better);
* :func:`comparison_bars` -- a horizontal bar per run for each compared metric, the
  baseline's bar grey and its value a dashed line across each panel, bars green where
  lower, red where higher (grey within :data:`NEUTRAL_PCT` of the baseline); a metric
  the same for every run has no panel, the title names it and its value.

The baseline is the run at position ``baseline`` (the first by default, as ``fragsim
report`` and ``fragsim compare`` order them); ranks and verdicts are
:func:`sim.results.compare.with_deltas`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.common import base_layout, empty_panel, esc
from sim.results.compare import (
    COLUMNS,
    DELTA_METRICS,
    compare_frame,
    delta_text,
    formatted,
    with_deltas,
)
from sim.results.summary_model import Summary
from sim.sweep.labels import metric_label

BETTER, WORSE, BASELINE = "#2ca02c", "#d62728", "#7f7f7f"
"""Bar and cell colours: lower than the baseline, higher, the baseline itself."""
NEUTRAL_PCT = 1.0
"""A bar within this many percent of the baseline's is drawn grey, as the baseline's."""


def comparison_frame(
    summaries: Sequence[Summary], names: Sequence[str], baseline: int = 0
) -> pd.DataFrame:
    """:func:`~sim.results.compare.with_deltas` over the runs' summaries (display order:
    the baseline first, then by rank)."""
    return with_deltas(compare_frame(summaries), list(names), baseline)


def comparison_table(summaries: Sequence[Summary], names: Sequence[str], baseline: int = 0) -> str:
    """The verdicts (ranked) and the delta table, as HTML (module docstring). Metrics
    outside :data:`~sim.results.compare.DELTA_METRICS` follow, values only."""
    frame = comparison_frame(summaries, names, baseline)
    records = [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
    base, others = records[0], records[1:]  # records keep each column's type
    verdicts = "".join(f"<li>rank {int(r['rank'])}: {esc(r['verdict'])}</li>" for r in others)
    head = f"<th>metric</th><th>{esc(base['run'])}<br>(baseline, rank {int(base['rank'])})</th>"
    head += "".join(f'<th colspan="2">{esc(r["run"])} (rank {int(r["rank"])})</th>' for r in others)
    sub = "<th></th><th>value</th>" + "<th>value</th><th>Δ vs baseline</th>" * len(others)
    rows = [f"<tr>{head}</tr>", f"<tr>{sub}</tr>"]
    for metric in DELTA_METRICS:
        cells = [f"<td><b>{esc(metric_label(metric))}</b></td>", _value(metric, base[metric])]
        for r in others:
            delta = float(r[f"{metric}_delta"])
            text = delta_text(metric, delta, float(r[f"{metric}_delta_pct"]))
            style = "" if text in ("0", "—") else _colour_style(delta < 0)
            cells += [_value(metric, r[metric]), f"<td{style}>{esc(text)}</td>"]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    for metric, label in COLUMNS[1:]:
        if metric in DELTA_METRICS:
            continue
        cells = [f'<td class="sub">{esc(label.strip())}</td>', _value(metric, base[metric])]
        cells += [_value(metric, r[metric]) + "<td></td>" for r in others]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    table = f'<table class="comparison">{"".join(rows)}</table>'
    rule = "ranked by dollars saved against it, ties by fewer allocation failures"
    if all(math.isnan(float(r["cost_saved_usd"])) for r in records):
        rule = "no prices to compare: ranked by fewer allocation failures"
    return (
        f"<p>baseline: <b>{esc(base['run'])}</b>; {rule}.</p>"
        f'<ul class="verdicts">{verdicts}</ul>'
        f'<div style="overflow-x:auto">{table}</div>'
    )


def _drawn(values: pd.Series) -> bool:
    """Worth a panel: some run has a value other than zero."""
    numbers = pd.to_numeric(values, errors="coerce")
    return bool((numbers.notna() & (numbers != 0)).any())


def _same(values: pd.Series) -> bool:
    """Nothing to compare: every run has a value and it is the same (within 0.05 %)."""
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    if not len(numbers) or np.isnan(numbers).any():
        return False
    return bool(np.ptp(numbers) <= 5e-4 * max(float(np.abs(numbers).max()), 1e-12))


def _bar_colour(delta: float, pct: float) -> str:
    """Grey for no change or one under :data:`NEUTRAL_PCT`; else better or worse."""
    if math.isnan(delta) or delta == 0 or (not math.isnan(pct) and abs(pct) < NEUTRAL_PCT):
        return BASELINE
    return BETTER if delta < 0 else WORSE


def _value(metric: str, value: Any) -> str:
    return f"<td>{esc(formatted(metric, value))}</td>"


def _colour_style(better: bool) -> str:
    return f' style="color:{BETTER if better else WORSE}"'


def comparison_bars(
    summaries: Sequence[Summary], names: Sequence[str], baseline: int = 0
) -> go.Figure:
    """A panel per metric of :data:`~sim.results.compare.DELTA_METRICS` (those missing or
    zero for every run left out; those the same for every run left out and named, with
    their value, in the title), a horizontal bar per run in display order (the baseline on
    top, grey, its value a dashed line), each bar labelled with its value and its
    difference from the baseline in percent."""
    frame = comparison_frame(summaries, names, baseline)
    drawn = [m for m in DELTA_METRICS if _drawn(frame[m])]
    same = [m for m in drawn if _same(frame[m])]
    metrics = [m for m in drawn if m not in same]
    title = "against the baseline: " + str(frame["run"].iloc[0])
    if not metrics:
        return empty_panel(title, "no compared metric differs between the runs")
    cols = 2
    n_rows = max(1, -(-len(metrics) // cols))
    panel_px = max(140, 26 * len(frame) + 50)
    gap_px = 70  # a panel's x tick labels and the next panel's title
    height = 80 + panel_px * n_rows + gap_px * (n_rows - 1)
    fig = make_subplots(
        rows=n_rows,
        cols=cols,
        shared_yaxes=True,
        subplot_titles=[esc(metric_label(m)) for m in metrics],
        vertical_spacing=gap_px / (height - 110),  # of the plotting area (less margins)
        horizontal_spacing=0.06,
    )
    y = [esc(n) for n in frame["run"]]
    for i, metric in enumerate(metrics):
        values = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
        deltas = frame[f"{metric}_delta"].to_numpy(dtype=float)
        pcts = frame[f"{metric}_delta_pct"].to_numpy(dtype=float)
        colours = [BASELINE] + [
            _bar_colour(d, p) for d, p in zip(deltas[1:], pcts[1:], strict=True)
        ]
        top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
        inside = [v > 0.3 * top for v in values]  # short bars write their text outside
        text = [formatted(metric, values[0]) + " (baseline)"] + [
            formatted(metric, v) + ("" if math.isnan(p) else f" ({p:+.1f} %)")
            for v, p in zip(values[1:], pcts[1:], strict=True)
        ]
        row, col = i // cols + 1, i % cols + 1
        fig.add_trace(
            go.Bar(
                x=values,
                y=y,
                orientation="h",
                marker={"color": colours},
                text=[esc(t) for t in text],
                textposition=["inside" if i else "outside" for i in inside],
                cliponaxis=False,
                showlegend=False,
                name=esc(metric_label(metric)),
                hovertemplate="%{y}: %{x:,.4g}<extra></extra>",
            ),
            row=row,
            col=col,
        )
        if not math.isnan(values[0]):
            fig.add_vline(x=values[0], line={"dash": "dash", "color": BASELINE}, row=row, col=col)
    if same:
        title += "; the same for every run: " + ", ".join(
            f"{metric_label(m)} {formatted(m, frame[m].iloc[0])}" for m in same
        )
    fig.update_layout(**base_layout(title, height))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(rangemode="tozero")
    return fig
