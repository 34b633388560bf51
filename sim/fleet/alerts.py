"""The fleet seed's alerts evaluated over a run's output frames as Prometheus would
evaluate them, and a diagnosis of every failed request. Pure functions of the frames
(``timeseries``, ``events``, ``requests``): a single-replica run and a fleet run (a
``replica`` per node) are read the same way. The alerts' names, severities, conditions
and responses are :mod:`sim.results.seed_alerts`'s (one name per alert everywhere).

Scrapes. Every ``scrape_interval_s`` from the run's first sample (``t_k = t_0 + k * I``,
up to the last sample, an instant after it is not scraped) each replica is scraped: the
gauges it reports are those of its latest ``periodic`` sample at or before ``t_k``.
A replica has *no data* at ``t_k`` (target down: no alert fires, firing ones resolve)
before its first periodic sample, while that sample says the replica is down
(``up`` false: restarting), and after its ``final`` sample. Failure-time samples are
not scraped (a gauge is read on the scrape's clock, not at each failure).

Rules (``high_free_share``, ``ratio_alert``, ``ratio_severe`` and ``uptime_rho_alert``
from the scenario's ``metrics``: :class:`~sim.results.seed_alerts.AlertThresholds`):

* ``fragmentation_driven_allocation_failure`` (high): at least one allocation failure
  (``admission_failure`` / ``growth_failure`` event) on the replica in the scrape window
  ``(t_{k-1}, t_k]`` (``(-inf, t_0]`` for the first) while its free share exceeded
  ``high_free_share`` (strictly: exactly 25 % free does not fire). Value: the number of
  such failures in the window. Evaluated whether or not the gauges have data. One
  *firing* covers every matching failure of the windows it stays firing through: the
  summary's ``matching_failures`` counts failures, the log counts firings.
* ``severe_fragmentation`` (high): scraped ``largest_contiguous_free_block_ratio`` <
  ``ratio_severe``. ``high_fragmentation_approaching_threshold`` (medium): the ratio <
  ``ratio_alert``; both fire below ``ratio_severe`` (Prometheus has no precedence: route
  them with an inhibit rule). Value: the ratio. A NaN ratio (nothing free) never fires.
* ``node_uptime_vs_fragmentation_correlation`` (medium): the fragmentation ``F = 1 -
  ratio`` rises with uptime since the last restart ``U``. Over the window ``W =
  trend_window_s`` (the scrapes at ``t_k - W < t <= t_k`` that have data), Spearman's
  rho of (U, F) (:func:`~sim.results.seed_alerts.spearman_rho`, the summary's statistic)
  >= ``uptime_rho_alert``, the current F > ``1 - ratio_alert`` (past the medium alert's
  level) and the current U >= W (no restart within the window). A NaN ratio in the
  window, or a constant U or F, gives no rho: it does not fire. The exported rule
  (:mod:`sim.fleet.prometheus`) reads rho from the node's gauge of the seed's metric
  name: PromQL has no ranks; ``fragsim export openmetrics`` writes that gauge with
  :func:`uptime_correlation` at every scrape with data (:mod:`sim.fleet.openmetrics`).
  Value: rho.

Log. Prometheus semantics with ``for: 0s``: an alert *fires* at the first scrape its
condition holds and is *resolved* at the first scrape it no longer does (no data
included); one ``firing`` row per start and one ``resolved`` row per end (none for an
alert still firing when the run ends).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.results.seed_alerts import (
    ALERTS,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    UPTIME_CORRELATION,
    AlertThresholds,
    spearman_rho,
)

FAILURE_KINDS = ("admission_failure", "growth_failure")
"""The event kinds that are allocation failures."""

ALERT_COLUMNS = ("time_s", "replica", "alert", "severity", "state", "value", "response")

DEFAULT_SCRAPE_INTERVAL_S = 30.0
DEFAULT_THRESHOLDS = AlertThresholds()
"""The fleet seed's thresholds (a scenario's: ``scenario.metrics.thresholds()``)."""
DEFAULT_TREND_WINDOW_S = 3600.0


def scrape_times(timeseries: pd.DataFrame, scrape_interval_s: float) -> np.ndarray:
    """The scrape instants ``t_0 + k * I`` from the first sample up to the last."""
    if not scrape_interval_s > 0:
        raise ValueError(f"scrape_interval_s must be > 0, got {scrape_interval_s}")
    if timeseries.empty:
        return np.empty(0)
    start, end = float(timeseries["time_s"].min()), float(timeseries["time_s"].max())
    count = math.floor((end - start) / scrape_interval_s + 1e-9) + 1
    return start + scrape_interval_s * np.arange(count)


def scraped(timeseries: pd.DataFrame, times: np.ndarray, replica: int) -> pd.DataFrame:
    """What one replica reports at each scrape instant: ``ratio`` and ``uptime_s`` of
    its latest periodic sample at or before it, ``has_data`` false where it has none
    (see the module docstring); one row per instant."""
    ts = timeseries[timeseries["replica"] == replica]
    periodic = ts[ts["trigger"] == "periodic"].sort_values("time_s", kind="stable")
    grid = pd.DataFrame({"time_s": times})
    got = pd.merge_asof(
        grid,
        periodic[["time_s", "up", "uptime_s", "largest_contiguous_free_block_ratio"]].rename(
            columns={"time_s": "sample_s"}
        ),
        left_on="time_s",
        right_on="sample_s",
        direction="backward",
    )
    final = ts.loc[ts["trigger"] == "final", "time_s"]
    ended = times > float(final.min()) if len(final) else np.zeros(len(times), dtype=bool)
    has_data = got["sample_s"].notna().to_numpy() & ~ended
    has_data &= got["up"].fillna(False).astype(bool).to_numpy()
    return pd.DataFrame(
        {
            "time_s": times,
            "has_data": has_data,
            "ratio": got["largest_contiguous_free_block_ratio"].to_numpy(dtype=float),
            "uptime_s": got["uptime_s"].to_numpy(dtype=float),
        }
    )


def high_free_failures(
    events: pd.DataFrame, times: np.ndarray, replica: int, high_free_share: float
) -> np.ndarray:
    """The number of allocation failures on ``replica`` at free share >
    ``high_free_share`` in each scrape window ``(t_{k-1}, t_k]``."""
    ev = events[
        (events["replica"] == replica)
        & events["kind"].isin(FAILURE_KINDS)
        & (events["free_share"] > high_free_share)
    ]
    window = np.searchsorted(times, ev["time_s"].to_numpy(dtype=float), side="left")
    window = window[window < len(times)]  # after the last scrape: never scraped
    return np.bincount(window, minlength=len(times)).astype(float)


def trend_window_scrapes(trend_window_s: float, scrape_interval_s: float) -> int:
    """How many scrape instants the uptime-trend window ``W`` spans (at least one)."""
    return max(1, math.floor(trend_window_s / scrape_interval_s + 1e-9))


def uptime_correlation(
    scrapes: pd.DataFrame, window_scrapes: int, rows: np.ndarray | None = None
) -> np.ndarray:
    """Spearman's rho of (uptime, 1 - ratio) over each scrape's window of the last
    ``window_scrapes`` instants, over the ones with data
    (:func:`~sim.results.seed_alerts.spearman_rho`); NaN where a ratio in it is NaN
    (nothing free: no fragmentation to rank), fewer than two have data, or either series
    is constant. Only at the scrapes ``rows`` (a boolean mask; default all), NaN
    elsewhere; computed in blocks of windows so memory stays bounded whatever the run's
    length."""
    n = len(scrapes)
    out = np.full(n, np.nan)
    if n == 0:
        return out
    size = min(window_scrapes, n)
    pad = np.zeros(size - 1)
    has = np.concatenate([pad.astype(bool), scrapes["has_data"].to_numpy(dtype=bool)])
    u = np.concatenate([pad, scrapes["uptime_s"].to_numpy(dtype=float)])
    f = np.concatenate([pad, 1.0 - scrapes["ratio"].to_numpy(dtype=float)])
    poison = np.concatenate([[0], np.cumsum(has & np.isnan(f))])
    count = np.concatenate([[0], np.cumsum(has)])
    u, f = np.where(has, u, np.nan), np.where(has, f, np.nan)
    ok = (count[size:] - count[:-size] >= 2) & (poison[size:] - poison[:-size] == 0)
    if rows is not None:
        ok &= rows
    view = np.lib.stride_tricks.sliding_window_view
    u_w, f_w = view(u, size), view(f, size)
    wanted = np.flatnonzero(ok)
    block = max(1, 2_000_000 // size)
    for start in range(0, len(wanted), block):
        at = wanted[start : start + block]
        out[at] = spearman_rho(u_w[at], f_w[at])
    return out


def conditions(
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    replica: int,
    times: np.ndarray,
    thresholds: AlertThresholds,
    trend_window_s: float,
    scrape_interval_s: float,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per alert: (firing, value) at each scrape instant for one replica."""
    s = scraped(timeseries, times, replica)
    has = s["has_data"].to_numpy()
    ratio = s["ratio"].to_numpy()
    uptime = s["uptime_s"].to_numpy()
    failures = high_free_failures(events, times, replica, thresholds.high_free_share)
    window = trend_window_scrapes(trend_window_s, scrape_interval_s)
    with np.errstate(invalid="ignore"):
        # rho is ranked only where the cheap conditions hold, and one scrape after
        # (where a firing alert resolves, its value is still rho)
        level = has & (1.0 - ratio > 1.0 - thresholds.ratio_alert) & (uptime >= trend_window_s)
        rho = uptime_correlation(s, window, level | np.concatenate([[False], level[:-1]]))
        trend = level & (rho >= thresholds.uptime_rho_alert)
        return {
            FRAGMENTATION_FAILURE.name: (failures > 0, failures),
            SEVERE_FRAGMENTATION.name: (has & (ratio < thresholds.ratio_severe), ratio),
            HIGH_FRAGMENTATION.name: (has & (ratio < thresholds.ratio_alert), ratio),
            UPTIME_CORRELATION.name: (trend, rho),
        }


def evaluate_alerts(
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    *,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
) -> pd.DataFrame:
    """The alert log of a run (columns :data:`ALERT_COLUMNS`): a ``firing`` row where an
    alert starts on a replica, a ``resolved`` row where it ends; sorted by time,
    replica, then the order of :data:`ALERTS`. Same frames in, same log out."""
    times = scrape_times(timeseries, scrape_interval_s)
    rows: list[dict[str, object]] = []
    replicas = sorted(set(timeseries["replica"].tolist()) | set(events["replica"].tolist()))
    specs = {spec.name: spec for spec in ALERTS}
    for replica in replicas:
        found = conditions(
            timeseries,
            events,
            int(replica),
            times,
            thresholds,
            trend_window_s,
            scrape_interval_s,
        )
        for order, (name, (firing, value)) in enumerate(found.items()):
            before = np.concatenate([[False], firing[:-1]])
            for k in np.flatnonzero(firing != before):
                spec = specs[name]
                rows.append(
                    {
                        "time_s": float(times[k]),
                        "replica": int(replica),
                        "alert": name,
                        "severity": spec.severity,
                        "state": "firing" if firing[k] else "resolved",
                        "value": float(value[k]),
                        "response": spec.response,
                        "_order": order,
                    }
                )
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in ALERT_COLUMNS})
    log = pd.DataFrame(rows).sort_values(["time_s", "replica", "_order"], kind="stable")
    return log[list(ALERT_COLUMNS)].reset_index(drop=True)


def _dtype(column: str) -> str:
    return {"time_s": "float64", "replica": "int64", "value": "float64"}.get(column, "object")


FAILED_PREFIXES = ("rejected-", "failed-")

DIAGNOSES = {
    "fragmentation": "fragmentation on a capable node",
    "capacity": "capacity shortage",
}
"""The allocator's cause of a failure -> its diagnosis. Fragmentation: total free >=
the need but no usable extent is large enough (restart or defragment the node; adding
replicas does not help); capacity: not enough free memory at all (a genuine shortage)."""

DIAGNOSIS_COLUMNS = (
    "request_id",
    "replica",
    "status",
    "diagnosis",
    "cause",
    "failure_s",
    "need_tokens",
    "free_tokens",
    "largest_free_extent_tokens",
    "free_share",
    "at_high_free_memory",
)


def diagnose_failures(
    requests: pd.DataFrame,
    events: pd.DataFrame,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
) -> pd.DataFrame:
    """One row per failed request (status ``rejected-*`` / ``failed-*``), in the order of
    ``requests``, with the columns :data:`DIAGNOSIS_COLUMNS`: the request's last
    allocation failure (the one that ended it; a retried request may have failed on
    several replicas) and its diagnosis (:data:`DIAGNOSES`); ``at_high_free_memory``:
    its free share exceeded ``high_free_share``. A request refused with no allocation
    failure (``rejected-too-long``: longer than the node's maximum sequence) is
    ``request too long``, with missing pool columns.

    To add the diagnosis to the requests table::

        requests.merge(diagnose_failures(requests, events)[["request_id", "diagnosis"]],
                       on="request_id", how="left")
    """
    failed = requests[requests["status"].astype(str).str.startswith(FAILED_PREFIXES)]
    fails = events[events["kind"].isin(FAILURE_KINDS)]
    last = fails.sort_values("time_s", kind="stable").drop_duplicates("request_id", keep="last")
    last = last.rename(columns={"time_s": "failure_s", "replica": "failure_replica"})
    out = failed[["request_id", "replica", "status"]].merge(
        last[
            [
                "request_id",
                "failure_replica",
                "cause",
                "failure_s",
                "need_tokens",
                "free_tokens",
                "largest_free_extent_tokens",
                "free_share",
            ]
        ],
        on="request_id",
        how="left",
    )
    out["replica"] = out["failure_replica"].fillna(out["replica"]).astype("int64")
    cause = out["cause"].fillna("")
    out["cause"] = cause
    out["diagnosis"] = cause.map(DIAGNOSES).fillna("request too long")
    out.loc[out["status"] != "rejected-too-long", "diagnosis"] = out["diagnosis"].where(
        cause != "", "unknown (no allocation failure recorded)"
    )
    out["at_high_free_memory"] = out["free_share"] > thresholds.high_free_share
    return out[list(DIAGNOSIS_COLUMNS)].reset_index(drop=True)
