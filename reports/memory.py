"""Figures of one run's KV memory and latency: pure functions from a
:class:`~sim.results.io.RunResult` to a plotly figure (downsampling:
:mod:`reports.downsample`).

* :func:`replica_memory` -- per replica, free memory and the largest free extent over
  time, failures at the free memory they met, and the ratio with its thresholds;
* :func:`waste_breakdown` -- the vLLM paper's four shares, stacked, over time;
* :func:`uptime_scatter` -- the fragmentation ratio against uptime, per replica;
* :func:`latency_cdfs` -- TTFT, TPOT and end-to-end latency, as the summary defines them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.common import (
    FAILURE_KINDS,
    VISIBLE_REPLICAS,
    as_float,
    base_layout,
    colour,
    esc,
    max_time_s,
    ratio_thresholds,
    replicas_of,
    time_unit,
)
from reports.downsample import (
    MAX_MARKERS,
    MAX_SCATTER_POINTS,
    MAX_SERIES_POINTS,
    bucket_means,
    cdf_points,
    minmax_indices,
    shown_label,
    stride_indices,
)
from sim.results.io import RunResult

SERIES_POINT_BUDGET = 48_000
"""Points per figure over all replicas' series; each series gets its share, at most
:data:`~reports.downsample.MAX_SERIES_POINTS` and at least 200."""
WASTE = (
    ("share_token_states", "token states", "#2ca02c"),
    ("share_reservation", "reservation", "#1f77b4"),
    ("share_internal_fragmentation", "internal fragmentation", "#ff7f0e"),
    ("share_external_fragmentation_free", "external fragmentation & free", "#d3d3d3"),
)


def _points_per_series(series: int) -> int:
    return max(200, min(MAX_SERIES_POINTS, SERIES_POINT_BUDGET // max(series, 1)))


def _visible(k: int) -> bool | str:
    return True if k < VISIBLE_REPLICAS else "legendonly"


def replica_memory(result: RunResult) -> go.Figure:
    """Top: free tokens (solid) and the largest free extent (dotted) per replica, and the
    allocation failures (events ``admission_failure`` / ``growth_failure``) at the free
    memory they happened at. Bottom: ``largest_contiguous_free_block_ratio`` with the
    severe and alert thresholds. Samples of a replica that is down are gaps."""
    ts, events = result.timeseries, result.events
    div, unit = time_unit(max_time_s(ts, events))
    severe, alert = ratio_thresholds(result.summary)
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        row_heights=[0.62, 0.38],
        subplot_titles=("free memory vs largest free extent", "largest / free"),
    )
    replicas = replicas_of(ts)
    budget = _points_per_series(3 * len(replicas))
    for k, replica in enumerate(replicas):
        rows = ts[ts["replica"] == replica].sort_values("time_s", kind="stable")
        t = as_float(rows["time_s"]) / div
        up = rows["up"].to_numpy(dtype=bool)
        group = dict(legendgroup=f"r{replica}", visible=_visible(k))
        for column, label, dash, row in (
            ("free_tokens", "free", "solid", 1),
            ("largest_free_extent_tokens", "largest extent", "dot", 1),
            ("largest_contiguous_free_block_ratio", "ratio", "solid", 2),
        ):
            y = np.where(up, as_float(rows[column]), np.nan)
            keep = minmax_indices(y, budget)
            fig.add_trace(
                go.Scatter(
                    x=t[keep],
                    y=y[keep],
                    mode="lines",
                    name=f"replica {replica}: {label}",
                    line={"color": colour(k), "dash": dash, "width": 1.4},
                    opacity=0.55 if column == "free_tokens" else 1.0,
                    **group,
                ),
                row=row,
                col=1,
            )
    fails = events[events["kind"].isin(FAILURE_KINDS)]
    if len(fails):
        keep = stride_indices(len(fails), MAX_MARKERS)
        shown = fails.iloc[keep]
        text = [
            esc(f"replica {r}: {kind} ({cause}), need {need:,} tokens")
            for r, kind, cause, need in zip(
                shown["replica"].tolist(),
                shown["kind"].tolist(),
                shown["cause"].tolist(),
                shown["need_tokens"].tolist(),
                strict=True,
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=as_float(shown["time_s"]) / div,
                y=as_float(shown["free_tokens"]),
                mode="markers",
                name=shown_label("allocation failures", len(shown), len(fails)),
                marker={"color": "#d62728", "symbol": "x", "size": 5, "opacity": 0.7},
                text=text,
                hovertemplate="%{text}<br>free %{y:,} tokens<extra></extra>",
            ),
            row=1,
            col=1,
        )
    for level, label, dash in ((severe, "severe", "dash"), (alert, "alert", "dot")):
        fig.add_hline(
            y=level,
            line={"color": "#d62728", "dash": dash, "width": 1},
            annotation_text=esc(f"{label} {level:g}"),
            annotation_position="bottom right",
            row=2,
            col=1,
        )
    fig.update_layout(**base_layout(f"{result.summary.get('scenario', '')}: KV memory", 620))
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_yaxes(title_text="ratio", range=[0, 1.05], row=2, col=1)
    fig.update_xaxes(title_text=unit, row=2, col=1)
    return fig


def _periodic(ts: pd.DataFrame) -> pd.DataFrame:
    return ts[(ts["trigger"] == "periodic") & ts["up"].astype(bool)]


def waste_breakdown(result: RunResult) -> go.Figure:
    """The four waste shares of KV capacity over time (periodic samples of replicas that
    are up; over a fleet, capacity-weighted across replicas at each instant), stacked to
    100 %; downsampled by bucket means (which still add up)."""
    periodic = _periodic(result.timeseries)
    columns = [c for c, _, _ in WASTE]
    if len(periodic):
        weights = as_float(periodic["capacity_tokens"])
        weighted = periodic[columns].mul(weights, axis=0)
        weighted["capacity"] = weights
        sums = weighted.groupby(periodic["time_s"].to_numpy(), sort=True).sum()
        shares = sums[columns].div(sums["capacity"].replace(0, np.nan), axis=0)
        times = shares.index.to_numpy(dtype=float)
        values = shares.to_numpy(dtype=float)
    else:
        times, values = np.empty(0), np.empty((0, len(columns)))
    div, unit = time_unit(float(times.max()) if len(times) else 0.0)
    means = bucket_means(np.column_stack([times, values]), MAX_SERIES_POINTS)
    fig = go.Figure()
    for j, (_, label, color) in enumerate(WASTE):
        fig.add_trace(
            go.Scatter(
                x=means[:, 0] / div,
                y=means[:, j + 1] * 100.0,
                mode="lines",
                name=label,
                stackgroup="waste",
                line={"width": 0.5, "color": color},
                hovertemplate=f"{label}: %{{y:.1f}} %<extra></extra>",
            )
        )
    fig.update_layout(**base_layout("waste breakdown (share of KV capacity)", 400))
    fig.update_yaxes(title_text="% of KV capacity", range=[0, 100])
    fig.update_xaxes(title_text=unit)
    return fig


def uptime_scatter(result: RunResult) -> go.Figure:
    """The fragmentation ratio (1 - largest / free, the seed's correlation signal)
    against uptime since the replica's last restart, one colour per replica; periodic
    samples with free memory, at most :data:`~reports.downsample.MAX_SCATTER_POINTS` in
    all (an even stride per replica)."""
    periodic = _periodic(result.timeseries).dropna(subset=["largest_contiguous_free_block_ratio"])
    replicas = replicas_of(periodic)
    div, unit = time_unit(float(periodic["uptime_s"].max()) if len(periodic) else 0.0)
    per_replica = max(1, MAX_SCATTER_POINTS // max(len(replicas), 1))
    fig = go.Figure()
    for k, replica in enumerate(replicas):
        rows = periodic[periodic["replica"] == replica]
        keep = stride_indices(len(rows), per_replica)
        fig.add_trace(
            go.Scatter(
                x=as_float(rows["uptime_s"])[keep] / div,
                y=1.0 - as_float(rows["largest_contiguous_free_block_ratio"])[keep],
                mode="markers",
                name=shown_label(f"replica {replica}", len(keep), len(rows)),
                marker={"color": colour(k), "size": 4, "opacity": 0.6},
                visible=_visible(k),
            )
        )
    corr = result.summary["memory"].get("node_uptime_vs_fragmentation_correlation") or {}
    title = "fragmentation ratio vs uptime"
    if corr.get("spearman_rho") is not None:
        title += f" (Spearman rho {corr['spearman_rho']:.2f})"
    fig.update_layout(**base_layout(title, 400))
    fig.update_yaxes(title_text="1 - largest / free", range=[0, 1.02])
    fig.update_xaxes(title_text=unit.replace("time", "uptime"))
    return fig


def latency_samples(requests: pd.DataFrame) -> dict[str, np.ndarray]:
    """TTFT, TPOT and end-to-end latency (s) of the ``ok`` requests, as
    :func:`sim.results.summary.summarize` defines them: TTFT = first token - arrival;
    TPOT = (finish - first token) / (generated tokens - 1), for requests of more than one
    token; end to end = finish - arrival (``tests/unit/test_reports.py`` holds these to
    the summary's percentiles)."""
    ok = requests[requests["status"] == "ok"]
    arrival, first = as_float(ok["arrival_s"]), as_float(ok["first_token_s"])
    finish = as_float(ok["finish_s"])
    generated = ok["generated_tokens"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(generated > 1, (finish - first) / (generated - 1), np.nan)
    return {"TTFT": first - arrival, "TPOT": tpot, "end to end": finish - arrival}


def latency_cdfs(result: RunResult) -> go.Figure:
    """Three CDFs side by side (each from :data:`~reports.downsample.CDF_POINTS`
    quantiles); a log x axis where the values span more than two decades."""
    samples = latency_samples(result.requests)
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{n} (s)" for n in samples])
    for col, (name, values) in enumerate(samples.items(), start=1):
        x, p = cdf_points(values)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=p,
                mode="lines",
                name=name,
                line={"color": colour(col - 1)},
                hovertemplate=f"{name} %{{x:.4g}} s: p%{{customdata:.1f}}<extra></extra>",
                customdata=p * 100.0,
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        positive = x[x > 0]
        if len(positive) and positive.max() / positive.min() > 100:
            fig.update_xaxes(type="log", row=1, col=col)
        fig.update_xaxes(title_text="seconds", row=1, col=col)
    fig.update_yaxes(title_text="share of ok requests", range=[0, 1.01], row=1, col=1)
    fig.update_layout(**base_layout("latency CDFs (ok requests)", 380))
    return fig
