"""The seed's central correlation: does fragmentation grow with uptime since the last
restart? :func:`ratio_vs_uptime` draws ``largest_contiguous_free_block_ratio`` against
uptime over *every* periodic sample of every replica up (none is dropped: a fleet of
600 replicas over six days draws the same bounded figure as one replica):

* a 2-D histogram of all samples, each uptime column shaded by its own distribution
  (darker = a larger share of that bin's samples: short-lived replicas put most samples
  at low uptime, and raw counts would wash the long-uptime columns out);
* per uptime bin (:data:`~reports.aggregate.UPTIME_BINS`, equal width) the median ratio
  and its interquartile range, and the mean and the 10th percentile (where most samples
  are unfragmented, ratio 1, the median stays at 1 and the tail tells the story);
* the least-squares line of the ratio on uptime over all samples, and Spearman's rho of
  (uptime, fragmentation ``1 - ratio``) in the title: the one correlation statistic the
  summary and the alerts use (positive: fragmentation grows, the ratio falls, with
  uptime).

A run whose samples hold one ratio only (a paged pool: 1 throughout), or none, has no
trend to draw: its panel is the one line of :func:`~reports.common.empty_panel`.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from reports.aggregate import RATIO, up_samples, uptime_bins, uptime_trend
from reports.common import (
    DEFAULT_OPTIONS,
    RATIO_COLOUR,
    ReportOptions,
    base_layout,
    empty_panel,
    esc,
    ratio_thresholds,
    time_unit,
)
from sim.results.io import RunResult

TITLE = "ratio vs uptime since the last restart"
NO_TREND_RHO = 0.1
"""Below this |rho| the title says there is no monotone trend (the alert's own
threshold, ``uptime_rho_alert``, is 0.5)."""


def ratio_vs_uptime(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure:
    """See the module docstring; the severe and alert thresholds as lines."""
    samples = up_samples(result.timeseries)
    valid = samples.dropna(subset=[RATIO])
    ratios = valid[RATIO].to_numpy(dtype=float)
    if not len(ratios) or float(ratios.min()) == float(ratios.max()):
        why = (
            "no periodic sample of a replica up with free memory"
            if not len(ratios)
            else f"the ratio is {ratios[0]:.2f} in all {len(ratios):,} samples: "
            "no fragmentation to set against uptime"
        )
        return empty_panel(TITLE, why)
    div, unit = time_unit(float(valid["uptime_s"].max()) if len(valid) else 0.0)
    binned = uptime_bins(samples)
    trend = uptime_trend(samples)
    fig = go.Figure()
    centers = (binned.edges_s[:-1] + binned.edges_s[1:]) / 2.0 / div
    ratio_centers = (binned.ratio_edges[:-1] + binned.ratio_edges[1:]) / 2.0
    per_bin = binned.counts.sum(axis=0, keepdims=True)
    share = binned.counts / np.maximum(per_bin, 1)
    fig.add_trace(
        go.Heatmap(
            x=centers,
            y=ratio_centers,
            z=np.where(binned.counts > 0, np.sqrt(share), np.nan),
            customdata=np.dstack([binned.counts, share * 100.0]),
            colorscale=[[0.0, "#ececec"], [1.0, "#555555"]],
            zmin=0.0,
            zmax=1.0,
            showscale=False,
            name="all samples",
            hovertemplate="%{customdata[0]:,} samples, %{customdata[1]:.1f} % of this uptime "
            "bin's<extra>uptime %{x:.3g}, ratio %{y:.2f}</extra>",
        )
    )
    x = binned.centers_s / div
    step = {"shape": "hvh"}
    fig.add_trace(
        go.Scatter(
            x=x,
            y=binned.p25,
            mode="lines",
            line={"width": 0, "color": RATIO_COLOUR, **step},
            showlegend=False,
            hoverinfo="skip",
            legendgroup="iqr",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=binned.p75,
            mode="lines",
            fill="tonexty",
            fillcolor="rgba(23,190,207,0.3)",
            line={"width": 0, "color": RATIO_COLOUR, **step},
            name="interquartile range per uptime bin",
            legendgroup="iqr",
            hoverinfo="skip",
        )
    )
    for y, label, color, dash, width in (
        (binned.median, "median", "#0b7285", "solid", 2.2),
        (binned.mean, "mean", "#1f77b4", "solid", 1.4),
        (binned.p10, "10th percentile", "#1f77b4", "dot", 1.4),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"color": color, "width": width, "dash": dash, **step},
                name=f"{label} per uptime bin",
                customdata=binned.samples,
                hovertemplate=f"{label} %{{y:.3f}} over %{{customdata:,}} samples<extra></extra>",
            )
        )
    if trend.slope_per_s is not None and trend.intercept is not None:
        top = float(binned.edges_s[-1])
        per_s, per = trend_unit(top)
        fig.add_trace(
            go.Scatter(
                x=[0.0, top / div],
                y=[trend.intercept, trend.intercept + trend.slope_per_s * top],
                mode="lines",
                line={"color": "#d62728", "width": 2, "dash": "dash"},
                name=f"least-squares trend ({trend.slope_per_s * per_s:+.3g} per {per} of uptime)",
                hoverinfo="skip",
            )
        )
    severe, alert = ratio_thresholds(result.summary)
    for level, label, dash in ((severe, "severe", "dash"), (alert, "alert", "dot")):
        fig.add_hline(
            y=level,
            line={"color": "#d62728", "dash": dash, "width": 1},
            annotation_text=esc(f"{label} < {level:g}"),
            annotation_position="bottom right",
        )
    fig.update_layout(**base_layout(_title(trend.rho, trend.samples), 460))
    fig.update_yaxes(title_text="largest / free ratio", range=[0, 1.03])
    fig.update_xaxes(
        title_text=unit.replace("time", "uptime since the last restart"),
        range=[0, float(binned.edges_s[-1]) / div],
    )
    return fig


def trend_unit(longest_uptime_s: float) -> tuple[float, str]:
    """``(seconds, name)`` of the unit the trend's slope is given per: an hour where the
    longest uptime is under two days (a slope per day of a one-hour run reads as a
    change the run never saw), else a day."""
    return (3600.0, "hour") if longest_uptime_s < 2 * 86400.0 else (86400.0, "day")


def _title(rho: float | None, samples: int) -> str:
    head = f"ratio vs uptime, all {samples:,} samples"
    if rho is None:
        return head + " (no correlation: too few samples or a constant ratio)"
    if abs(rho) < NO_TREND_RHO:
        way = "no monotone trend with uptime"
    else:
        way = "fragmentation " + ("grows" if rho > 0 else "falls") + " with uptime"
    return f"{head}: Spearman ρ(uptime, 1 − ratio) = {rho:+.2f} ({way})"
