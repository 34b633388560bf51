"""A KV manager's waste by cause (``hybrid_kv``, ``split_pools``, ``window_pools``): one
figure, only in such a run's report.

* :func:`kv_manager_waste` -- the manager's five causes of waste (the ``share_*`` columns
  ``timeseries.parquet`` gains in its runs, ``sim.engine.recorder.KV_WASTE_COLUMNS``)
  stacked over time, capacity-weighted per window as :func:`reports.usage.waste_breakdown`
  draws the four shares (the same helper, :func:`reports.usage.window_shares`, the same
  window width). Below the figure (:func:`reports.common.with_note`), how the manager laid
  the memory out (the summary's ``kv_layout``, per pool in a fleet of several) and a
  table of each cause's mean (the summary's ``memory.kv_manager_waste``), what it is and
  which of the four shares it splits. A run of a single-pool allocator: None (no panel).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from reports.aggregate import quantile_window_s, up_samples
from reports.common import (
    DEFAULT_OPTIONS,
    ReportOptions,
    base_layout,
    empty_panel,
    esc,
    max_time_s,
    time_unit,
    with_note,
)
from reports.downsample import window_label
from reports.usage import window_shares
from sim.engine.recorder import KV_WASTE_COLUMNS
from sim.results.io import RunResult
from sim.results.summary_model import Summary

INNER = "reservation + internal fragmentation"
OUTER = "external fragmentation & free"
CAUSES = (
    ("share_padding", "padding", "#8c564b", INNER, "padding layers of a group, state pages padded to the block size"),
    ("share_window_reserve", "window reserve", "#9467bd", INNER, "sliding-window blocks held beyond the window (the admission reserve)"),
    ("share_reserved_ahead", "reserved ahead", "#1f77b4", INNER, "blocks reserved at admission for tokens not yet generated"),
    ("share_partial_blocks", "partial blocks", "#ff7f0e", INNER, "the unfilled part of owned blocks (a table's last, a window's first)"),
    ("share_stranded_pool", "stranded pool", "#d62728", OUTER, "free memory in pools that are not the bottleneck (unusable at the split)"),
)  # fmt: skip
"""(column, label, colour, the four-way share it is part of, what it is), bottom to top;
the columns are ``KV_WASTE_COLUMNS`` in order (``tests/unit/test_report_kv_manager.py``)."""
TITLE = "KV manager waste by cause over time (% of KV capacity)"


def kv_manager_waste(
    result: RunResult, options: ReportOptions = DEFAULT_OPTIONS
) -> go.Figure | None:
    """The causes of :data:`CAUSES` stacked (their top: all the manager's waste), per
    window of :func:`~reports.aggregate.quantile_window_s`, each legend entry with the
    cause's mean; the layout notes and the table of means below it. The shares are of
    the KV manager's replicas' capacity: in a fleet whose other pools run a single-pool
    allocator (their samples NaN in those columns) those replicas are left out, as the
    summary's means leave them out. None where the run's timeseries has no KV manager's
    columns; an empty panel where it has no periodic sample of such a replica up."""
    if KV_WASTE_COLUMNS[0] not in result.timeseries.columns:
        return None
    up = up_samples(result.timeseries)
    samples = up[up[KV_WASTE_COLUMNS[0]].notna()]  # a mixed fleet: the KV manager's pools
    if not len(samples):
        return empty_panel(TITLE, "no periodic sample of a KV manager's replica up")
    width_s = quantile_window_s(samples)
    times, shares, means = window_shares(samples, list(KV_WASTE_COLUMNS), width_s)
    end_s = max_time_s(result.timeseries)
    div, unit = time_unit(end_s)
    fig = go.Figure()
    for j, (_, label, color, _part, _what) in enumerate(CAUSES):
        fig.add_trace(
            go.Scatter(
                x=times / div,
                y=shares[:, j] * 100.0,
                mode="lines",
                name=f"{label}: {means[j]:.1%} mean",
                stackgroup="kv",
                line={"width": 0.5, "color": color},
                fillcolor=color,
                hovertemplate=f"{label}: %{{y:.2f}} %<extra></extra>",
            )
        )
    fig.update_layout(**base_layout(f"{TITLE}, mean per {window_label(width_s)}", 380))
    fig.update_layout(legend={"traceorder": "reversed"})
    fig.update_yaxes(title_text="% of KV capacity", rangemode="tozero")
    fig.update_xaxes(title_text=unit, range=[0, end_s / div])
    return with_note(fig, layout_html(result.summary) + causes_html(result.summary, means))


def layout_notes(summary: Summary) -> list[tuple[str | None, str]]:
    """``(pool, note)``: how the manager laid the memory out, the summary's ``kv_layout``
    (pool None), else each fleet pool's with its name (a fleet of several pools)."""
    if summary.kv_layout:
        return [(None, note) for note in summary.kv_layout]
    pools = summary.fleet.pools if summary.fleet is not None else []
    return [(p.name, note) for p in pools for note in p.kv_layout or ()]


def layout_html(summary: Summary) -> str:
    """:func:`layout_notes` as a list ("" where the summary has none)."""
    items = [
        f"<li>{'' if pool is None else f'pool {esc(pool)}: '}{esc(note)}</li>"
        for pool, note in layout_notes(summary)
    ]
    if not items:
        return ""
    return f'<p class="def">how the KV manager laid the memory out:</p><ul>{"".join(items)}</ul>'


def causes_html(summary: Summary, means: np.ndarray) -> str:
    """Each cause's mean share of KV capacity (the summary's ``kv_manager_waste``, else
    ``means``, those of the drawn samples), what it is and which share it splits."""
    recorded = summary.memory.kv_manager_waste or {}
    rows = []
    for j, (column, label, _color, part, what) in enumerate(CAUSES):
        value = recorded.get(column.removeprefix("share_"), float(means[j]))
        mean = "—" if value is None or not np.isfinite(value) else f"{value:.1%}"
        rows.append(
            f"<tr><td>{esc(label)}</td><td>{mean}</td>"
            f'<td class="def">{esc(what)}</td><td class="def">{esc(part)}</td></tr>'
        )
    head = "<tr><th>cause</th><th>mean</th><th>what it is</th><th>part of</th></tr>"
    return f'<table class="answer kv-causes">{head}{"".join(rows)}</table>'
