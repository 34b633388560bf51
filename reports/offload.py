"""KV offload tiers: one figure, only in the report of a run with ``kv_offload``.

* :func:`offload_tiers` -- per tier, over time: the share of the tier holding objects
  and the seed's ratio (largest free extent / total free) of its pool, each the mean over
  the replicas up at a periodic sample (the ``offload_<kind>_*`` columns of
  ``timeseries.parquet``, ``sim.engine.offload_record``). Below the figure, a table of
  each tier's counters from the summary's ``offload`` section: hits, misses, tokens
  loaded, the time its loads added to TTFT, evictions, bytes moved down and up. A run
  without tiers: None (no panel).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.aggregate import up_samples
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
from sim.results.io import RunResult
from sim.results.summary_model import Offload

TITLE = "KV offload tiers: use and largest free extent / free (mean over replicas up)"
COLORS = {"host": "#1f77b4", "nvme": "#ff7f0e", "remote": "#2ca02c"}
GB = 1e9


def offload_tiers(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure | None:
    """The figure (module docstring); None where the run has no tiers."""
    section = result.summary.offload
    if section is None:
        return None
    up = up_samples(result.timeseries)
    if not len(up):
        return empty_panel(TITLE, "no periodic sample of a replica up")
    end_s = max_time_s(result.timeseries)
    div, unit = time_unit(end_s)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for tier in section.tiers:
        name = f"offload_{tier.kind}_"
        rows = up[up[name + "capacity_bytes"].notna()]
        by_time = rows.assign(
            used_share=rows[name + "used_bytes"] / rows[name + "capacity_bytes"]
        ).groupby("time_s", sort=True)
        used = by_time["used_share"].mean()
        ratio = by_time[name + "largest_contiguous_free_block_ratio"].mean()
        color = COLORS.get(tier.kind, "#7f7f7f")
        label = f"{tier.kind} ({tier.allocator})"
        fig.add_trace(
            go.Scatter(
                x=used.index.to_numpy() / div,
                y=used.to_numpy() * 100.0,
                mode="lines",
                name=f"{label}: used",
                line={"color": color},
                hovertemplate=f"{label} used: %{{y:.1f}} %<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=ratio.index.to_numpy() / div,
                y=ratio.to_numpy(),
                mode="lines",
                name=f"{label}: ratio",
                line={"color": color, "dash": "dot"},
                hovertemplate=f"{label} ratio: %{{y:.3f}}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    fig.update_layout(**base_layout(TITLE, 480))
    fig.update_yaxes(title_text="% of tier used", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="largest free / free", range=[0, 1.05], row=2, col=1)
    fig.update_xaxes(title_text=unit, range=[0, end_s / div], row=2, col=1)
    return with_note(fig, counters_html(section))


def counters_html(section: Offload) -> str:
    """The tiers' counters as a table (the summary's ``offload.tiers``)."""
    head = (
        "<tr><th>tier</th><th>hits</th><th>misses</th><th>tokens loaded</th>"
        "<th>load time in TTFT (s)</th><th>evictions</th><th>GB down</th><th>GB up</th></tr>"
    )
    rows = [
        f"<tr><td>{esc(t.kind)} ({esc(t.allocator)})</td><td>{t.hits:,}</td>"
        f"<td>{t.misses:,}</td><td>{t.hit_tokens:,}</td><td>{t.load_s:,.2f}</td>"
        f"<td>{t.evictions:,}</td><td>{t.bytes_down / GB:,.1f}</td>"
        f"<td>{t.bytes_up / GB:,.1f}</td></tr>"
        for t in section.tiers
    ]
    return f'<table class="answer offload-tiers">{head}{"".join(rows)}</table>'
