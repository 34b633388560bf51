"""Downsampling for plots: what a report keeps of a large run, and why.

A six-day fleet run holds millions of requests and hundreds of thousands of samples; a
browser draws a few thousand SVG points per trace comfortably. Every figure reduces its
data with one of three rules, each bounded, each deterministic (same frames in, same
points out):

* **time series** (:func:`minmax_indices`): the samples are cut into ``max_points // 2``
  buckets of equal count, in time order, and each bucket keeps its minimum and its
  maximum (in time order). A spike or a dip of one sample survives, which a plain stride
  or a mean would drop; the line is at most ``max_points`` points long.
* **shares that add up** (:func:`bucket_means`): the waste breakdown's four shares are
  averaged per bucket of equal count, so each kept point still adds up to 100 %.
* **distributions** (:func:`cdf_points`): a CDF is drawn from ``points`` quantiles
  (evenly spaced probabilities from 0 to 1), whatever the number of requests.
* **markers** (:func:`stride_indices`): failures, restarts and alert intervals are
  capped by an even stride (every k-th, ``k = ceil(n / cap)``); the legend says how many
  of how many are shown.
* **counts per window** (:func:`window_width_s`): events too many to mark one by one
  (scale events, failures over time) are counted per window of a readable width (1 min,
  5 min, ..., 1 day), the narrowest giving at most ~150 windows.
"""

from __future__ import annotations

import math

import numpy as np

MAX_SERIES_POINTS = 2000
"""Most points a time series keeps per replica (min/max buckets)."""
CDF_POINTS = 1000
"""Quantiles per CDF."""
MAX_MARKERS = 5000
"""Most failure (or event) markers per figure."""
MAX_SCATTER_POINTS = 5000
"""Most points of a scatter (all replicas together)."""


def minmax_indices(values: np.ndarray, max_points: int = MAX_SERIES_POINTS) -> np.ndarray:
    """Indices (sorted) of the points kept of ``values`` (in time order): all of them when
    there are at most ``max_points``, else each bucket's minimum and maximum over
    ``max_points // 2`` buckets of equal count. NaN never counts as a minimum or a
    maximum; a bucket of NaN only keeps its first point (a gap stays a gap)."""
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    buckets = max(max_points // 2, 1)
    bucket = np.arange(n) * buckets // n
    v = np.asarray(values, dtype=float)
    low = np.where(np.isnan(v), np.inf, v)
    high = np.where(np.isnan(v), -np.inf, v)
    # within each bucket (sorted by bucket, then value), the first is the min, the last the max
    by_low = np.lexsort((low, bucket))
    by_high = np.lexsort((high, bucket))
    starts = np.searchsorted(bucket, np.arange(buckets), side="left")
    ends = np.searchsorted(bucket, np.arange(buckets), side="right") - 1
    return np.unique(np.concatenate([by_low[starts], by_high[ends]]))


def bucket_means(columns: np.ndarray, max_points: int = MAX_SERIES_POINTS) -> np.ndarray:
    """Row means of ``columns`` (shape ``(n, k)``) over ``max_points`` buckets of equal
    count (NaN ignored); the rows themselves when there are at most ``max_points``."""
    n = len(columns)
    if n <= max_points:
        return np.asarray(columns, dtype=float)
    bucket = np.arange(n) * max_points // n
    out = np.empty((max_points, columns.shape[1]))
    for j in range(columns.shape[1]):
        col = np.asarray(columns[:, j], dtype=float)
        ok = ~np.isnan(col)
        sums = np.bincount(bucket[ok], weights=col[ok], minlength=max_points)
        valid = np.bincount(bucket[ok], minlength=max_points)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, j] = np.where(valid > 0, sums / np.maximum(valid, 1), np.nan)
    return out


def cdf_points(values: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(x, p)``: the empirical CDF of ``values`` (NaN dropped) at ``points`` evenly
    spaced probabilities (all the sorted values when there are fewer)."""
    v = np.asarray(values, dtype=float)
    v = np.sort(v[~np.isnan(v)])
    if len(v) <= points:
        return v, np.arange(1, len(v) + 1) / max(len(v), 1)
    p = np.linspace(0.0, 1.0, points)
    return np.quantile(v, p), p


def stride_indices(n: int, cap: int = MAX_MARKERS) -> np.ndarray:
    """Every k-th index of ``range(n)``, ``k = ceil(n / cap)``: at most ``cap``."""
    step = max(1, math.ceil(n / cap)) if cap > 0 else max(n, 1)
    return np.arange(0, n, step)


def shown_label(name: str, shown: int, total: int) -> str:
    """A legend entry that says when markers were thinned: ``failures (5,000 of 12,345)``."""
    if shown == total:
        return f"{name} ({total:,})"
    return f"{name} ({shown:,} of {total:,} shown)"


WINDOW_WIDTHS_S = (60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0)
"""Readable window widths; past the last, whole days."""


def window_width_s(span_s: float, max_windows: int) -> float:
    """The narrowest of :data:`WINDOW_WIDTHS_S` (then whole days) that cuts ``span_s``
    into at most ``max_windows`` windows."""
    for width in WINDOW_WIDTHS_S:
        if span_s / width <= max_windows:
            return width
    return 86400.0 * math.ceil(span_s / 86400.0 / max_windows)


def window_label(width_s: float) -> str:
    """``5 min``, ``1 h``, ``2 days``: a window width as a reader says it."""
    if width_s < 3600.0:
        return f"{width_s / 60.0:g} min"
    if width_s < 86400.0:
        return f"{width_s / 3600.0:g} h"
    days = width_s / 86400.0
    return f"{days:g} day" + ("s" if days != 1 else "")
