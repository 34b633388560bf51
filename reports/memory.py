"""KV memory over time, the report's first figure: pure functions from a
:class:`~sim.results.io.RunResult` to a plotly figure.

:func:`replica_memory` draws, as shares of KV capacity, free memory and the largest free
extent (top) and ``largest_contiguous_free_block_ratio`` (bottom) over time, with the
25 %-free line, the ratio thresholds, every allocation failure at the free share it met
(by diagnosis) and every restart:

* a **fleet**: quantile bands per time window of a readable width
  (:func:`~reports.aggregate.fleet_quantiles` over every sample of every replica up in
  the window: p10-p90 filled, median solid; the minimum dotted for the largest extent
  and the ratio), a median per pool where the fleet has several, and in the ratio panel
  the ``top_k`` worst replicas (:func:`~reports.aggregate.worst_replicas`) as thin
  lines (their minimum ratio per window) with their failures at the ratio they met, so
  the figure reads the same at 4 replicas and at 600;
* a **single replica**: the same bands over its own samples when it has more than
  :data:`LINE_MAX_INSTANTS` (days of minutes swing too fast to read as lines), else its
  own lines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.aggregate import (
    RATIO,
    allocation_failures,
    fleet_quantiles,
    quantile_window_s,
    up_samples,
    worst_replicas,
)
from reports.common import (
    DEFAULT_OPTIONS,
    EXTENT_COLOUR,
    FREE_COLOUR,
    RATIO_COLOUR,
    REPLICA_COLOURS,
    ReportOptions,
    as_float,
    base_layout,
    esc,
    high_free_share,
    max_time_s,
    pools_of,
    ratio_thresholds,
    replica_label,
    replica_names,
    replicas_of,
    time_unit,
)
from reports.downsample import (
    MAX_MARKERS,
    MAX_SERIES_POINTS,
    minmax_indices,
    stride_indices,
    window_label,
)
from reports.marks import add_failures, add_restarts
from sim.results.io import RunResult
from sim.results.summary_model import Summary

SERIES = (
    ("free_share", "free memory", FREE_COLOUR, 1, 100.0),
    ("largest_share", "largest free extent", EXTENT_COLOUR, 1, 100.0),
    (RATIO, "largest / free", RATIO_COLOUR, 2, 1.0),
)
"""(column, label, colour, row, scale): what the figure draws, in drawing order."""
POOL_DASHES = ("dash", "dashdot", "longdash", "longdashdot")
LINE_MAX_INSTANTS = 600
"""A single replica with at most this many periodic samples is drawn as lines."""


def replica_memory(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """See the module docstring. Samples of a replica that is down are gaps."""
    ts, events, summary = result.timeseries, result.events, result.summary
    div, unit = time_unit(max_time_s(ts, events))
    samples = up_samples(ts)
    width_s = quantile_window_s(samples)
    replicas = replicas_of(ts)
    lines = len(replicas) <= 1 and samples["time_s"].nunique() <= LINE_MAX_INSTANTS
    every = f"quantiles per {window_label(width_s)} over " + (
        "its samples" if len(replicas) <= 1 else "all replicas' samples"
    )
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.09,
        row_heights=[0.6, 0.4],
        subplot_titles=(
            "free memory and the largest free extent, % of KV capacity"
            + ("" if lines else f" ({every})"),
            "largest_contiguous_free_block_ratio = largest free extent / free memory",
        ),
    )
    if lines:
        _single(fig, ts, div)
        title = "KV memory"
    else:
        _bands(fig, samples, width_s, div)
        if len(replicas) > 1:
            _pools(fig, samples, pools_of(summary), width_s, div)
            share = high_free_share(summary)
            alert = ratio_thresholds(summary)[1]
            worst = worst_replicas(samples, events, options.top_k, share, alert)
            _worst(fig, samples, events, worst, width_s, div, share)
        title = (
            "KV memory"
            if len(replicas) <= 1
            else f"KV memory across the fleet ({len(replicas):,} replicas over the run)"
        )
    add_failures(fig, events, div, row=1)
    add_restarts(fig, events, div, [(1, 0.0, 100.0), (2, 0.0, 1.0)])
    _lines(fig, summary)
    fig.update_layout(**base_layout(title, 680))
    fig.update_yaxes(title_text="% of KV capacity", range=[0, 102], row=1, col=1)
    fig.update_yaxes(title_text="ratio", range=[0, 1.03], row=2, col=1)
    fig.update_xaxes(title_text=unit, row=2, col=1)
    fig.update_xaxes(range=[0, max_time_s(ts, events) / div])
    return fig


def _lines(fig: go.Figure, summary: Summary) -> None:
    share = high_free_share(summary)
    fig.add_hline(
        y=share * 100.0,
        line={"color": "#555", "dash": "dash", "width": 1},
        annotation_text=esc(f"{share:.0%} free: failures above are at high free memory"),
        annotation_position="top left",
        annotation_bgcolor="rgba(255,255,255,0.8)",
        row=1,
        col=1,
    )
    severe, alert = ratio_thresholds(summary)
    for level, label, dash in ((severe, "severe", "dash"), (alert, "alert", "dot")):
        fig.add_hline(
            y=level,
            line={"color": "#d62728", "dash": dash, "width": 1},
            annotation_text=esc(f"{label} < {level:g}"),
            annotation_position="bottom right",
            row=2,
            col=1,
        )


def _single(fig: go.Figure, ts: pd.DataFrame, div: float) -> None:
    """One replica's own lines (all its samples: periodic, at failures, final)."""
    rows = ts.sort_values("time_s", kind="stable")
    up = rows["up"].to_numpy(dtype=bool)
    capacity = np.where(up, as_float(rows["capacity_tokens"]), np.nan)
    t = as_float(rows["time_s"]) / div
    values = {
        "free_share": as_float(rows["free_tokens"]) / capacity,
        "largest_share": as_float(rows["largest_free_extent_tokens"]) / capacity,
        RATIO: np.where(up, as_float(rows[RATIO]), np.nan),
    }
    tokens = {
        "free_share": as_float(rows["free_tokens"]),
        "largest_share": as_float(rows["largest_free_extent_tokens"]),
    }
    for column, label, color, row, scale in SERIES:
        y = values[column] * scale
        keep = minmax_indices(y, MAX_SERIES_POINTS)
        hover = "%{y:.3f}<extra>" + label + "</extra>"
        custom = None
        if column in tokens:
            custom = tokens[column][keep]
            hover = "%{y:.1f} % (%{customdata:,.0f} tokens)<extra>" + label + "</extra>"
        fig.add_trace(
            go.Scatter(
                x=t[keep],
                y=y[keep],
                mode="lines",
                name=label,
                line={"color": color, "width": 1.3},
                customdata=custom,
                hovertemplate=hover,
            ),
            row=row,
            col=1,
        )


def _bands(fig: go.Figure, samples: pd.DataFrame, width_s: float, div: float) -> None:
    """Per series: the p10-p90 band, the median and the minimum per window."""
    q = fleet_quantiles(samples, tuple(c for c, *_ in SERIES), width_s)
    t = as_float(q["time_s"]) / div
    count = np.column_stack([q["samples"].to_numpy(), q["replicas"].to_numpy()])
    for column, label, color, row, scale in SERIES:
        fig.add_trace(
            go.Scatter(
                x=t,
                y=as_float(q[f"{column}_p10"]) * scale,
                mode="lines",
                showlegend=False,
                hoverinfo="skip",
                legendgroup=column,
                line={
                    "width": 0.8,
                    "color": color,
                },  # the band's lower edge, visible under another band
            ),
            row=row,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=t,
                y=as_float(q[f"{column}_p90"]) * scale,
                mode="lines",
                fill="tonexty",
                fillcolor=_tint(color, 0.25),
                name=f"{label}: p10-p90",
                hoverinfo="skip",
                legendgroup=column,
                line={"width": 0, "color": color},
            ),
            row=row,
            col=1,
        )
        for q_name, dash, width, what in (
            ("p50", "solid", 1.8, "median"),
            ("min", "dot", 1.2, "minimum"),
        ):
            if column == "free_share" and q_name == "min":
                continue  # the busiest replica: a capacity story, told by the failures
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=as_float(q[f"{column}_{q_name}"]) * scale,
                    mode="lines",
                    name=f"{label}: {what}",
                    legendgroup=column,
                    line={"color": color, "width": width, "dash": dash},
                    customdata=count,
                    hovertemplate=f"{what} %{{y:.3g}} of %{{customdata[0]}} samples "
                    f"(%{{customdata[1]}} replicas)<extra>{label}</extra>",
                ),
                row=row,
                col=1,
            )


def _pools(
    fig: go.Figure, samples: pd.DataFrame, pools: dict[int, str], width_s: float, div: float
) -> None:
    """A median line per pool, where the fleet has more than one pool."""
    if len(set(pools.values())) < 2:
        return
    named = samples.assign(pool=samples["replica"].map(pools))
    for i, (pool, rows) in enumerate(named.groupby("pool", sort=True)):
        q = fleet_quantiles(rows, ("free_share", RATIO), width_s)
        t = as_float(q["time_s"]) / div
        for column, label, color, row, scale in (SERIES[0], SERIES[2]):
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=as_float(q[f"{column}_p50"]) * scale,
                    mode="lines",
                    name=esc(f"pool {pool}: median {label}"),
                    line={"color": color, "width": 1.2, "dash": POOL_DASHES[i % len(POOL_DASHES)]},
                ),
                row=row,
                col=1,
            )


def _worst(
    fig: go.Figure,
    samples: pd.DataFrame,
    events: pd.DataFrame,
    worst: list[tuple[int, int]],
    width_s: float,
    div: float,
    high_free_share: float,
) -> None:
    """Each of the worst replicas in the ratio panel, in a colour of its own: its
    minimum ratio per window (thin) and its allocation failures at the ratio they met
    (largest free extent / free then; x fragmentation, o capacity); one legend entry
    each (:func:`worst_label`)."""
    fails = allocation_failures(events)
    names = replica_names(samples)
    for rank, (replica, failures) in enumerate(worst):
        mine_samples = samples[samples["replica"] == replica]
        q = fleet_quantiles(mine_samples, (RATIO,), width_s)
        color = REPLICA_COLOURS[rank % len(REPLICA_COLOURS)]
        label = esc(replica_label(names, replica))
        mine = fails[fails["replica"] == replica]
        high = int((as_float(mine["free_share"]) > high_free_share).sum())
        lowest = float(np.nanmin(as_float(mine_samples[RATIO]), initial=1.0))
        name = esc(worst_label(replica_label(names, replica), rank, failures, high, lowest))
        group = f"replica-{replica}"
        fig.add_trace(
            go.Scatter(
                x=as_float(q["time_s"]) / div,
                y=as_float(q[f"{RATIO}_min"]),
                mode="lines",
                name=name,
                legendgroup=group,
                line={"color": color, "width": 1.1},
                hovertemplate=f"minimum %{{y:.3f}}<extra>{label}</extra>",
            ),
            row=2,
            col=1,
        )
        mine = mine.iloc[stride_indices(len(mine), MAX_MARKERS // 10)]
        free = as_float(mine["free_tokens"])
        largest = as_float(mine["largest_free_extent_tokens"])
        ratio = np.divide(largest, free, out=np.full(len(free), np.nan), where=free > 0)
        symbols = np.where(mine["cause"].to_numpy() == "fragmentation", "x", "circle-open")
        fig.add_trace(
            go.Scatter(
                x=as_float(mine["time_s"]) / div,
                y=ratio,
                mode="markers",
                name=name,
                legendgroup=group,
                showlegend=False,
                marker={"color": color, "symbol": symbols, "size": 6},
                text=[esc(str(c)) for c in mine["cause"].tolist()],
                hovertemplate=f"%{{text}} failure at ratio %{{y:.3f}}<extra>{label}</extra>",
            ),
            row=2,
            col=1,
        )


def worst_label(label: str, rank: int, failures: int, high: int, lowest_ratio: float) -> str:
    """A worst replica's legend entry: its rank and why it is there -- its failures (and
    those at high free memory), or, for one that never failed, how low its ratio fell
    (``replica 7 (worst #2: no failures, ratio down to 0.52)``)."""
    if failures:
        why = f"{failures:,} failure" + ("" if failures == 1 else "s") + f", {high:,} at high free"
    else:
        why = f"no failures, ratio down to {lowest_ratio:.2f}"
    return f"{label} (worst #{rank + 1}: {why})"


def _tint(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
