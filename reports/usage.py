"""How a run used its KV memory and how fast it answered: pure figure functions.

* :func:`waste_breakdown` -- the vLLM paper's four shares of KV capacity, stacked, over
  time. The fourth, *external fragmentation & free* (everything no request holds or has
  reserved: DESIGN.md's definition, unchanged), is drawn as its two parts so that free
  memory and fragmentation read apart: the part in the largest free extent (usable by
  one request) and the rest, scattered in smaller extents. The two add up to the share;
  for a paged pool (ratio 1) the second is zero.
* :func:`latency_cdfs` -- TTFT, TPOT and end-to-end latency, as the summary defines them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.aggregate import RATIO, quantile_window_s, up_samples, window_index
from reports.common import (
    DEFAULT_OPTIONS,
    ReportOptions,
    as_float,
    base_layout,
    colour,
    empty_panel,
    max_time_s,
    time_unit,
    value_axis,
)
from reports.downsample import cdf_points, window_label
from sim.results.io import RunResult

FREE_SHARE = "share_external_fragmentation_free"
WASTE = (
    ("share_token_states", "token states", "#2ca02c", None),
    ("share_reservation", "reservation", "#1f77b4", None),
    ("share_internal_fragmentation", "internal fragmentation", "#ff7f0e", None),
    ("free_scattered", "free, outside the largest extent (fragmented)", "#7f7f7f", "free"),
    ("free_largest", "free, in the largest extent (usable by one request)", "#dcdcdc", "free"),
)
"""(column, label, colour, legend group), bottom to top of the stack."""
WASTE_TITLE = "waste breakdown: what KV capacity holds (the vLLM paper's four shares)"


def waste_shares(
    timeseries: pd.DataFrame, width_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(times_s, shares, means)``: per window of ``width_s`` (``times_s`` its middle),
    the shares of :data:`WASTE` (columns in that order) over every sample of the
    replicas up in it, capacity-weighted (so each row still adds up to 1); ``means``:
    each share's mean over all the samples, as the summary's ``waste_breakdown``
    averages them. ``free_largest`` = the external-fragmentation-&-
    free share x the ratio (the largest usable extent / free), ``free_scattered`` = the
    rest of that share."""
    samples = up_samples(timeseries)
    if samples.empty:
        return np.empty(0), np.empty((0, len(WASTE))), np.full(len(WASTE), np.nan)
    free = as_float(samples[FREE_SHARE])
    ratio = np.nan_to_num(as_float(samples[RATIO]), nan=0.0)
    parts = samples.assign(free_largest=free * ratio, free_scattered=free * (1.0 - ratio))
    return window_shares(parts, [c for c, *_ in WASTE], width_s)


def window_shares(
    samples: pd.DataFrame, columns: list[str], width_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(times_s, shares, means)`` of share-of-capacity ``columns`` of ``samples`` (up
    samples, :func:`~reports.aggregate.up_samples`): per window of ``width_s`` from
    t = 0 (``times_s`` its middle), each column capacity-weighted over the window's
    samples (NaN counted as 0); ``means``: each column's plain mean over all the
    samples, as the summary averages them."""
    weights = as_float(samples["capacity_tokens"])
    weighted = samples[columns].mul(weights, axis=0)
    weighted["capacity"] = weights
    key = window_index(as_float(samples["time_s"]), width_s)
    sums = weighted.groupby(key, sort=True).sum()
    shares = sums[columns].div(sums["capacity"].replace(0, np.nan), axis=0)
    means = samples[columns].mean().to_numpy(dtype=float)
    times = (shares.index.to_numpy(dtype=float) + 0.5) * width_s
    return times, shares.to_numpy(dtype=float), means


def waste_breakdown(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """The shares of :func:`waste_shares` stacked to 100 %, per window of the memory
    figure's width (:func:`~reports.aggregate.quantile_window_s`); the legend, top of
    the stack first, gives each share's mean and groups the fourth share's two parts
    under its name."""
    samples = up_samples(result.timeseries)
    if not len(samples):
        return empty_panel(WASTE_TITLE, "no periodic sample of a replica up")
    width_s = quantile_window_s(samples)
    times, values, means_of = waste_shares(result.timeseries, width_s)
    div, unit = time_unit(max_time_s(result.timeseries))
    means = np.column_stack([times, values])
    mean_free = float(means_of[3] + means_of[4])
    fig = go.Figure()
    for j, (_, label, color, group) in enumerate(WASTE):
        extra = {}
        if group is not None:
            extra = {
                "legendgroup": group,
                "legendgrouptitle_text": f"external fragmentation & free ({mean_free:.0%} mean)",
            }
        fig.add_trace(
            go.Scatter(
                x=means[:, 0] / div,
                y=means[:, j + 1] * 100.0,
                mode="lines",
                name=f"{label}: {means_of[j]:.1%} mean",
                stackgroup="waste",
                line={"width": 0.5, "color": color},
                fillcolor=color,
                hovertemplate=f"{label}: %{{y:.1f}} %<extra></extra>",
                **extra,
            )
        )
    title = f"{WASTE_TITLE}, mean per {window_label(width_s)}"
    fig.update_layout(**base_layout(title, 420))
    fig.update_layout(legend={"traceorder": "reversed"})
    fig.update_yaxes(title_text="% of KV capacity", range=[0, 100])
    fig.update_xaxes(title_text=unit, range=[0, max_time_s(result.timeseries) / div])
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


LATENCY_TITLE = "latency CDFs (ok requests)"


def latency_cdfs(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """Three CDFs side by side (each from :data:`~reports.downsample.CDF_POINTS`
    quantiles), each x axis fitted to its own data (:func:`~reports.common.value_axis`:
    logarithmic where the values span more than a decade, the range from the fastest to
    the slowest request); a panel without values says so in its place. No ok request at
    all: an empty panel saying so."""
    samples = latency_samples(result.requests)
    if not any(np.isfinite(v).any() for v in samples.values()):
        return empty_panel(LATENCY_TITLE, "no request finished ok: no latency to draw")
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{n} (s)" for n in samples])
    for col, (name, values) in enumerate(samples.items(), start=1):
        x, p = cdf_points(values)
        if not len(x):
            fig.add_annotation(
                text=f"no {name} values (no ok request of more than one token)",
                showarrow=False,
                xref=f"x{col} domain",
                yref=f"y{col} domain",
                x=0.5,
                y=0.5,
            )
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
        fig.update_xaxes(title_text="seconds", **value_axis(x), row=1, col=col)
    fig.update_yaxes(title_text="share of ok requests", range=[0, 1.01], row=1, col=1)
    fig.update_yaxes(range=[0, 1.01], row=1, col=2)
    fig.update_yaxes(range=[0, 1.01], row=1, col=3)
    fig.update_layout(**base_layout(LATENCY_TITLE, 380))
    return fig
