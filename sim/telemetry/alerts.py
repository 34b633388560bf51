"""The fleet seed's alerts evaluated over a run's output frames as Prometheus would
evaluate them (a diagnosis of every failed request is :mod:`sim.telemetry.diagnosis`,
re-exported here: ``diagnose_failures``). Pure functions of the frames
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

* ``fragmentation_driven_allocation_failure`` (high): the exported rule's
  ``increase(failures[W]) > 0`` (``W``: :meth:`~sim.telemetry.alert_states.RuleTiming.
  window_s`) over the replica's counter of allocation failures (``admission_failure`` /
  ``growth_failure`` events) while its free share exceeded ``high_free_share``
  (strictly: exactly 25 % free does not count), the counter read at each scrape
  (failures in ``(t_{j-1}, t_j]`` counted at ``t_j``) from the replica's first row to
  its last (:func:`~sim.telemetry.alert_states.increase_condition`): one failure holds it
  for the range's scrapes. Value: the failures in the range. Evaluated whether or not
  the gauges have data. The summary's ``matching_failures`` counts failures, the log
  counts episodes.
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
  (:mod:`sim.telemetry.prometheus`) reads rho from the node's gauge of the seed's metric
  name: PromQL has no ranks; ``fragsim export openmetrics`` writes that gauge with
  :func:`uptime_correlation` at every scrape with data (:mod:`sim.telemetry.openmetrics`).
  Value: rho.
* ``offload_<kind>_tier_fragmentation`` (medium; only in runs with that KV offload
  tier, ``kv_offload``): the tier's scraped ``largest_contiguous_free_block_ratio`` <
  ``ratio_alert`` while its free share (``free_bytes / capacity_bytes``) >
  ``high_free_share``: the tier's allocator cannot place an object that its free memory
  would hold (Mooncake's store refusing at 15-30 % free). Value: the tier's ratio.

Log. Each rule's condition at each scrape goes through Prometheus's states with the
rule's ``for:`` (:mod:`sim.telemetry.alert_states`): per episode (a stretch of scrapes
where the condition held) one ``pending`` row at its first scrape (Prometheus's
``activeAt``), one ``firing`` row where it has held ``for:`` (the same instant with
``for: 0``; none when it ended sooner: ``for:`` suppressed it) and one ``resolved`` row
at the first scrape it no longer holds (no data included; none for an episode still
holding when the run ends). Every row carries its episode's ``active_since_s``, the
rule's ``for_s`` and whether the episode ``fired``: ``pending`` rows count the episodes
the condition held, ``firing`` rows the alerts Prometheus fires.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.results.offload_summary import TIER_KINDS
from sim.results.seed_alerts import ALERTS as ALERTS  # re-exported: the seed's alerts
from sim.results.seed_alerts import (
    BY_NAME,
    DEFAULT_THRESHOLDS,
    FAILURE_KINDS,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    TIER_ALERT,
    UPTIME_CORRELATION,
    AlertThresholds,
    spearman_rho,
)
from sim.telemetry.alert_states import (
    DEFAULT_TIMING,
    Held,
    RuleTiming,
    hold,
    increase_condition,
)
from sim.telemetry.diagnosis import diagnose_failures as diagnose_failures  # re-exported

ALERT_COLUMNS = (
    "time_s",
    "replica",
    "alert",
    "severity",
    "state",
    "value",
    "response",
    "active_since_s",
    "for_s",
    "fired",
)
STATES = ("pending", "firing", "resolved")
"""A log row's ``state``, in the order rows at one instant are listed."""

DEFAULT_SCRAPE_INTERVAL_S = 30.0
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


TIER_GAUGES = ("largest_contiguous_free_block_ratio", "free_bytes", "capacity_bytes")
"""A tier's gauges its alert reads (``offload_<kind>_<gauge>`` columns)."""


def tier_column(kind: str, gauge: str) -> str:
    """The timeseries column of a tier's gauge (``sim.engine.offload_record``)."""
    return f"offload_{kind}_{gauge}"


def tier_kinds(timeseries: pd.DataFrame) -> tuple[str, ...]:
    """The tier kinds whose columns the run's timeseries has (none: a run without
    ``kv_offload``), in :data:`~sim.results.offload_summary.TIER_KINDS` order."""
    return tuple(k for k in TIER_KINDS if tier_column(k, TIER_GAUGES[0]) in timeseries.columns)


def scraped(timeseries: pd.DataFrame, times: np.ndarray, replica: int) -> pd.DataFrame:
    """What one replica reports at each scrape instant: ``ratio`` and ``uptime_s`` of
    its latest periodic sample at or before it (and each tier's :data:`TIER_GAUGES`,
    under their column names, where the run has tiers), ``has_data`` false where it has
    none (see the module docstring); one row per instant."""
    ts = timeseries[timeseries["replica"] == replica]
    periodic = ts[ts["trigger"] == "periodic"].sort_values("time_s", kind="stable")
    grid = pd.DataFrame({"time_s": times})
    tiers = [tier_column(k, g) for k in tier_kinds(timeseries) for g in TIER_GAUGES]
    gauges = ["time_s", "up", "uptime_s", "largest_contiguous_free_block_ratio", *tiers]
    got = pd.merge_asof(
        grid,
        periodic[gauges].rename(columns={"time_s": "sample_s"}),
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
            **{name: got[name].to_numpy(dtype=float) for name in tiers},
        }
    )


def tier_condition(
    scrapes: pd.DataFrame, kind: str, thresholds: AlertThresholds
) -> tuple[np.ndarray, np.ndarray]:
    """A tier alert's (condition, value) at each scrape (:func:`scraped`'s rows): the
    tier's ratio < ``ratio_alert`` while its free share (free / capacity bytes) >
    ``high_free_share``, where the replica has data; value: the ratio. A NaN ratio
    (the tier full) or a replica without the tier (NaN columns) never holds it."""
    ratio = scrapes[tier_column(kind, "largest_contiguous_free_block_ratio")].to_numpy()
    free = scrapes[tier_column(kind, "free_bytes")].to_numpy()
    capacity = scrapes[tier_column(kind, "capacity_bytes")].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        high_free = free / capacity > thresholds.high_free_share
        held = scrapes["has_data"].to_numpy() & (ratio < thresholds.ratio_alert) & high_free
    return held, ratio


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


def counter_span(timeseries: pd.DataFrame, times: np.ndarray, replica: int) -> tuple[int, int]:
    """The scrape indices ``lo..hi`` a replica's counters are read at: from the last at or
    before its first timeseries row to the first at or after its last
    (:mod:`sim.telemetry.openmetrics_counters`' clock); ``(0, -1)`` with none."""
    rows = timeseries.loc[timeseries["replica"] == replica, "time_s"]
    if not len(rows) or not len(times):
        return 0, -1
    lo = max(0, int(np.searchsorted(times, float(rows.min()), side="right")) - 1)
    hi = min(len(times) - 1, int(np.searchsorted(times, float(rows.max()), side="left")))
    return lo, hi


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
    timing: RuleTiming = DEFAULT_TIMING,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per alert: (condition, value) at each scrape instant for one replica (before
    ``for:``: :func:`sim.telemetry.alert_states.hold` applies it); the seed's alerts,
    then a tier alert per tier kind of the run (:func:`tier_condition`)."""
    s = scraped(timeseries, times, replica)
    has = s["has_data"].to_numpy()
    ratio = s["ratio"].to_numpy()
    uptime = s["uptime_s"].to_numpy()
    failures = high_free_failures(events, times, replica, thresholds.high_free_share)
    lo, hi = counter_span(timeseries, times, replica)
    window_s = timing.window_s(scrape_interval_s)
    failed, failed_value = increase_condition(np.cumsum(failures), lo, hi, times, window_s)
    window = trend_window_scrapes(trend_window_s, scrape_interval_s)
    with np.errstate(invalid="ignore"):
        # rho is ranked only where the cheap conditions hold, and one scrape after
        # (where a firing alert resolves, its value is still rho)
        level = has & (1.0 - ratio > 1.0 - thresholds.ratio_alert) & (uptime >= trend_window_s)
        rho = uptime_correlation(s, window, level | np.concatenate([[False], level[:-1]]))
        trend = level & (rho >= thresholds.uptime_rho_alert)
        found = {
            FRAGMENTATION_FAILURE.name: (failed, failed_value),
            SEVERE_FRAGMENTATION.name: (has & (ratio < thresholds.ratio_severe), ratio),
            HIGH_FRAGMENTATION.name: (has & (ratio < thresholds.ratio_alert), ratio),
            UPTIME_CORRELATION.name: (trend, rho),
        }
    for kind in tier_kinds(timeseries):
        found[TIER_ALERT[kind].name] = tier_condition(s, kind, thresholds)
    return found


def evaluate_alerts(
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    *,
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    trend_window_s: float = DEFAULT_TREND_WINDOW_S,
    timing: RuleTiming = DEFAULT_TIMING,
) -> pd.DataFrame:
    """The alert log of a run (columns :data:`ALERT_COLUMNS`, module docstring): each
    episode's ``pending``, ``firing`` and ``resolved`` rows; sorted by time, replica,
    the order of :func:`conditions`, then :data:`STATES`. Same frames in, same log out."""
    times = scrape_times(timeseries, scrape_interval_s)
    rows: list[dict[str, object]] = []
    replicas = sorted(set(timeseries["replica"].tolist()) | set(events["replica"].tolist()))
    specs = BY_NAME
    for replica in replicas:
        found = conditions(
            timeseries,
            events,
            int(replica),
            times,
            thresholds,
            trend_window_s,
            scrape_interval_s,
            timing,
        )
        for order, (name, (condition, value)) in enumerate(found.items()):
            spec, for_s = specs[name], timing.hold_s(name)
            for k, state, start in transitions(hold(condition, times, for_s)):
                rows.append(
                    {
                        "time_s": float(times[k]),
                        "replica": int(replica),
                        "alert": name,
                        "severity": spec.severity,
                        "state": state,
                        "value": float(value[k]),
                        "response": spec.response,
                        "active_since_s": float(times[start]),
                        "for_s": for_s,
                        "_start": start,
                        "_order": order,
                        "_phase": STATES.index(state),
                    }
                )
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in ALERT_COLUMNS})
    log = pd.DataFrame(rows)
    fired = log[log["state"] == "firing"].groupby(["replica", "_order", "_start"]).size()
    keys = pd.MultiIndex.from_frame(log[["replica", "_order", "_start"]])
    log["fired"] = keys.isin(fired.index)
    log = log.sort_values(["time_s", "replica", "_order", "_phase"], kind="stable")
    return log[list(ALERT_COLUMNS)].reset_index(drop=True)


def episode_counts(log: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Alert name -> (episodes its condition held, episodes that fired) in a log of
    :func:`evaluate_alerts` (its ``pending`` and ``firing`` rows); only alerts in it."""
    counts = log.groupby(["alert", "state"]).size()
    names = sorted(set(log["alert"].astype(str)))
    return {
        name: (int(counts.get((name, "pending"), 0)), int(counts.get((name, "firing"), 0)))
        for name in names
    }


def transitions(held: Held) -> list[tuple[int, str, int]]:
    """(instant, state, its episode's first instant) of each row of one alert's log on
    one replica (module docstring), in time order, then :data:`STATES`' order; only the
    instants where the state changes are visited."""
    active, firing, start = held.active, held.firing, held.active_at
    before = np.concatenate([[False], active[:-1]])
    fired_before = np.concatenate([[False], firing[:-1]])
    rows: list[tuple[int, int, str, int]] = []
    for k in np.flatnonzero(active & ~before).tolist():
        rows.append((k, 0, "pending", k))
    for k in np.flatnonzero(firing & ~fired_before).tolist():
        rows.append((k, 1, "firing", int(start[k])))
    for k in np.flatnonzero(before & ~active).tolist():
        rows.append((k, 2, "resolved", int(start[k - 1])))
    return [(k, state, first) for k, _, state, first in sorted(rows)]


def _dtype(column: str) -> str:
    floats = ("time_s", "value", "active_since_s", "for_s")
    kinds = {"replica": "int64", "fired": "bool", **{c: "float64" for c in floats}}
    return kinds.get(column, "object")
