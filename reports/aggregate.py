"""What a run report aggregates before it draws: pure functions of a run's frames, no
plotly (tested on their own). Each returns a bounded table whatever the run's size.

* :func:`fleet_quantiles` -- per time window, the quantiles of a per-replica quantity
  (free share, largest extent share, the ratio) over every sample of every replica up
  in the window: min, p10, p50 and p90 (:data:`QUANTILES`). Windows of a readable width
  (:func:`quantile_window_s`) rather than single instants: a replica's pool swings
  within minutes, and per-instant quantiles over a few replicas swing with it.
* :func:`worst_replicas` -- the k replicas a reader should look at first.
* :func:`uptime_bins` -- the ratio against uptime over *all* samples: per uptime bin the
  median and interquartile range, and the counts of a 2-D histogram.
* :func:`uptime_trend` -- Spearman rho of (uptime, fragmentation ``1 - ratio``) and a
  least-squares line of the ratio on uptime, over all samples.
* :func:`window_counts` -- events counted per time window of a readable width.
* :func:`window_index` -- the window a time falls in (every binning here goes through it).

Samples: the periodic samples of replicas that are up (failure-time samples would weight
the instants of failures; a replica that is down has no pool).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports.common import as_float
from reports.downsample import window_width_s
from sim.results.seed_alerts import FAILURE_KINDS, spearman_rho

QUANTILES = (("min", 0.0), ("p10", 0.10), ("p50", 0.50), ("p90", 0.90))
"""The fleet quantiles drawn over time: the worst replica (min) and the 10th, 50th and
90th percentiles across replicas."""
MAX_WINDOWS = 60
"""Most time windows of a quantile series (:func:`quantile_window_s`)."""
UPTIME_BINS = 40
"""Uptime bins of the ratio-vs-uptime panel (equal width from 0 to the longest uptime)."""
RATIO_BINS = 25
"""Ratio bins (0 to 1) of the panel's 2-D histogram."""
RATIO = "largest_contiguous_free_block_ratio"


def up_samples(timeseries: pd.DataFrame) -> pd.DataFrame:
    """The periodic samples of replicas that are up, with ``free_share`` and
    ``largest_share`` (of KV capacity) added."""
    ts = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"].astype(bool)]
    capacity = as_float(ts["capacity_tokens"])
    capacity = np.where(capacity > 0, capacity, np.nan)
    return ts.assign(
        free_share=as_float(ts["free_tokens"]) / capacity,
        largest_share=as_float(ts["largest_free_extent_tokens"]) / capacity,
    )


def quantile_window_s(samples: pd.DataFrame, max_windows: int = MAX_WINDOWS) -> float:
    """The window of :func:`fleet_quantiles`: the narrowest readable width
    (:func:`~reports.downsample.window_width_s`) giving at most ``max_windows`` windows
    over the samples' span and holding at least two sample instants on average."""
    instants = np.unique(as_float(samples["time_s"])) if len(samples) else np.zeros(1)
    span = float(instants[-1] - instants[0])
    per_window = max(1, min(max_windows, len(instants) // 2))
    return window_width_s(max(span, 1e-9), per_window)


def window_index(times_s: np.ndarray, width_s: float, windows: int | None = None) -> np.ndarray:
    """The window of ``width_s`` (from t = 0) each time falls in, ``floor(t / width_s)``
    as int64; with ``windows`` clipped to ``0 .. windows - 1`` (the windows covering the
    run: a time on its end falls in the last one). A window's middle is
    ``(index + 0.5) * width_s``."""
    index = (np.asarray(times_s, dtype=float) // width_s).astype(np.int64)
    return index if windows is None else np.clip(index, 0, windows - 1)


def fleet_quantiles(
    samples: pd.DataFrame, columns: tuple[str, ...], width_s: float
) -> pd.DataFrame:
    """One row per window of ``width_s`` (from t = 0) that has samples, in time order:
    ``time_s`` (the window's middle), ``samples`` (pooled: replicas x instants),
    ``replicas`` (distinct) and ``{column}_{q}`` for each of ``columns`` and
    :data:`QUANTILES` (NaN values are skipped; all NaN gives NaN)."""
    out_columns = ["time_s", "samples", "replicas"]
    out_columns += [f"{c}_{q}" for c in columns for q, _ in QUANTILES]
    if samples.empty:
        return pd.DataFrame(columns=out_columns, dtype=float)
    key = window_index(as_float(samples["time_s"]), width_s)
    frame = pd.DataFrame({"key": key, "replica": samples["replica"].to_numpy()})
    for c in columns:
        frame[c] = as_float(samples[c])
    groups = frame.groupby("key", sort=True)
    size = groups.size()
    out = pd.DataFrame(
        {
            "time_s": (size.index.to_numpy(dtype=float) + 0.5) * width_s,
            "samples": size.to_numpy(),
            "replicas": groups["replica"].nunique().to_numpy(),
        },
        index=size.index,
    )
    for c in columns:
        for q, p in QUANTILES:
            out[f"{c}_{q}"] = groups[c].quantile(p) if p > 0 else groups[c].min()
    return out.reset_index(drop=True)[out_columns]


def allocation_failures(events: pd.DataFrame) -> pd.DataFrame:
    """The events that are allocation failures (``admission_failure`` / ``growth_failure``)."""
    return events[events["kind"].isin(FAILURE_KINDS)]


def worst_replicas(
    samples: pd.DataFrame,
    events: pd.DataFrame,
    k: int,
    high_free_share: float,
    ratio_alert: float | None = None,
) -> list[tuple[int, int]]:
    """``(replica, failures)`` of the ``k`` worst replicas among those sampled: most
    allocation failures at high free memory (free share > ``high_free_share``), then
    most allocation failures, then the lowest median ratio, then the lowest id. With
    ``ratio_alert``, a replica that never failed and whose ratio never fell below it is
    not among the worst (fewer than ``k`` then): nothing about it to look at."""
    if k <= 0 or samples.empty:
        return []
    replicas = np.unique(samples["replica"].to_numpy(dtype=np.int64))
    fails = allocation_failures(events)
    high = fails[fails["free_share"] > high_free_share]
    count = fails["replica"].value_counts()
    count_high = high["replica"].value_counts()
    median = samples.groupby("replica")[RATIO].median()
    table = pd.DataFrame(
        {
            "replica": replicas,
            "high": count_high.reindex(replicas, fill_value=0).to_numpy(),
            "all": count.reindex(replicas, fill_value=0).to_numpy(),
            "median": median.reindex(replicas).fillna(1.0).to_numpy(),
        }
    )
    if ratio_alert is not None:
        lowest = samples.groupby("replica")[RATIO].min().reindex(replicas).fillna(1.0)
        table = table[(table["all"] > 0) | (lowest.to_numpy() < ratio_alert)]
    table = table.sort_values(
        ["high", "all", "median", "replica"], ascending=[False, False, True, True], kind="stable"
    )
    top = table.head(k)
    return [(int(r), int(n)) for r, n in zip(top["replica"], top["all"], strict=True)]


@dataclass(frozen=True)
class UptimeBins:
    """The ratio against uptime, binned: ``centers_s`` (bins with samples), the ratio's
    ``mean``, ``p10``, ``median``, ``p25``, ``p75`` and ``samples`` per bin; ``counts``
    the 2-D histogram (``ratio bin x uptime bin``) over ``edges_s`` and ``ratio_edges``."""

    centers_s: np.ndarray
    mean: np.ndarray
    p10: np.ndarray
    median: np.ndarray
    p25: np.ndarray
    p75: np.ndarray
    samples: np.ndarray
    edges_s: np.ndarray
    ratio_edges: np.ndarray
    counts: np.ndarray


def uptime_bins(samples: pd.DataFrame, bins: int = UPTIME_BINS) -> UptimeBins:
    """:class:`UptimeBins` over the samples that have a ratio (nothing free: no ratio)."""
    valid = samples.dropna(subset=[RATIO])
    uptime, ratio = as_float(valid["uptime_s"]), as_float(valid[RATIO])
    top = float(uptime.max()) if len(uptime) else 0.0
    edges = np.linspace(0.0, max(top, 1e-9), bins + 1)
    ratio_edges = np.linspace(0.0, 1.0, RATIO_BINS + 1)
    counts, _, _ = np.histogram2d(np.clip(ratio, 0.0, 1.0), uptime, bins=(ratio_edges, edges))
    which = np.clip(np.searchsorted(edges, uptime, side="right") - 1, 0, bins - 1)
    frame = pd.DataFrame({"bin": which, "ratio": ratio})
    groups = frame.groupby("bin", sort=True)["ratio"]
    found = groups.size()
    index = found.index.to_numpy(dtype=np.int64)
    return UptimeBins(
        centers_s=(edges[index] + edges[index + 1]) / 2.0,
        mean=groups.mean().to_numpy(dtype=float),
        p10=groups.quantile(0.10).to_numpy(dtype=float),
        median=groups.median().to_numpy(dtype=float),
        p25=groups.quantile(0.25).to_numpy(dtype=float),
        p75=groups.quantile(0.75).to_numpy(dtype=float),
        samples=found.to_numpy(dtype=np.int64),
        edges_s=edges,
        ratio_edges=ratio_edges,
        counts=counts.astype(np.int64),
    )


@dataclass(frozen=True)
class Trend:
    """Over ``samples`` samples: ``rho`` = Spearman's rho of (uptime, fragmentation
    ``1 - ratio``), None where undefined (fewer than 3 samples, a constant); the
    least-squares line ``ratio = intercept + slope_per_s * uptime_s`` (None likewise)."""

    samples: int
    rho: float | None
    intercept: float | None
    slope_per_s: float | None


def uptime_trend(samples: pd.DataFrame) -> Trend:
    """:class:`Trend` over the samples that have a ratio: the statistic the summary and
    the alerts use (:func:`sim.results.seed_alerts.spearman_rho`), on the samples the
    summary's ``memory.node_uptime_vs_fragmentation_correlation`` takes."""
    valid = samples.dropna(subset=[RATIO])
    uptime, ratio = as_float(valid["uptime_s"]), as_float(valid[RATIO])
    if len(valid) < 3 or np.ptp(uptime) == 0:
        return Trend(len(valid), None, None, None)
    slope, intercept = np.polyfit(uptime, ratio, 1)
    rho = None
    if np.ptp(ratio) > 0:
        rho = float(spearman_rho(uptime[None, :], 1.0 - ratio[None, :])[0])
    return Trend(len(valid), rho, float(intercept), float(slope))


@dataclass(frozen=True)
class Windows:
    """Counts per window: ``starts_s`` (window starts, ``width_s`` apart, covering the
    run), and ``counts[name]`` per window."""

    width_s: float
    starts_s: np.ndarray
    counts: dict[str, np.ndarray]


def window_counts(times_s: dict[str, np.ndarray], end_s: float, max_windows: int = 150) -> Windows:
    """Each named series of event times counted per window: the window width is the
    smallest readable width (:func:`~reports.downsample.window_width_s`) that gives at
    most ``max_windows`` windows over ``[0, end_s]``."""
    width = window_width_s(end_s, max_windows)
    n = max(1, int(np.ceil(max(end_s, 1e-9) / width)))
    starts = np.arange(n) * width
    counts = {}
    for name, times in times_s.items():
        counts[name] = np.bincount(window_index(times, width, n), minlength=n)
    return Windows(width, starts, counts)
