"""Prometheus's alert states over a rule's condition, one evaluation instant at a time,
and the ``for:`` each of the seed's rules ships with.

States (Prometheus's ``rules/alerting.go``, ``AlertingRule.Eval``). The rule is
evaluated at every instant ``t_k`` of the run's scrape grid
(:func:`sim.telemetry.alerts.scrape_times`: the rule group's interval is the scrape
interval). Per replica (per label set of the expression's result):

* the first instant its condition holds, the alert becomes *active*: state ``pending``,
  ``activeAt = t_k``;
* at every instant it still holds, it is *firing* once ``t_k - activeAt >= for``
  (compared in whole milliseconds, as Prometheus stores time): with ``for: 0`` at its
  first instant already;
* the first instant it no longer holds it is *resolved* (a pending alert is dropped, a
  firing one resolved); holding again later starts a new episode with a new
  ``activeAt``.

An *episode* is one such stretch of instants where the condition held; it *fired* when
it lasted ``for`` (from its first instant to its last: ``n = ceil(for / I)`` intervals,
``n + 1`` instants). ``ALERTS{alertstate="pending"|"firing"}`` and
``ALERTS_FOR_STATE`` (value ``activeAt`` in Unix seconds) are written at each instant an
alert is active (:mod:`sim.telemetry.openmetrics_alerts`).

The failure rule reads ``increase(counter[W]) > 0`` (:mod:`sim.telemetry.prometheus`): at
``t_k`` Prometheus 2's range selector holds the counter's samples at
``t_k - W <= t_j <= t_k``; ``increase`` needs two of them and is positive exactly when
the last exceeds the first (the counter never resets: it counts over the run, restarts
included). :func:`increase_condition` evaluates that over the counter as
``fragsim export openmetrics`` writes it (:mod:`sim.telemetry.openmetrics_counters`: at
every scrape instant from the replica's first to its last). Prometheus 3 selects the
range left-open (``t_k - W < t_j``): a failure then holds the condition one scrape
less (docs/alerts.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from sim.results.seed_alerts import (
    ALL_ALERTS,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    TIER_ALERTS,
    UPTIME_CORRELATION,
    alerts_for,
)


class RecordedTiming(TypedDict):
    """Rule timing as a run's summary records it (``fleet.alerts``'s fields)."""

    for_s: dict[str, float]
    failure_window_s: float


SHIPPED_FOR_S: Mapping[str, float] = {
    FRAGMENTATION_FAILURE.name: 0.0,
    SEVERE_FRAGMENTATION.name: 0.0,
    HIGH_FRAGMENTATION.name: 30.0,
    UPTIME_CORRELATION.name: 30.0,
    **{spec.name: 30.0 for spec in TIER_ALERTS},
}
"""Each rule's ``for:`` as shipped (docs/alerts.md says why, with what it fires on the
seed's runs): a failure is an event and a severe reading asks for a restart before
allocations fail (no hold); the medium warnings ask for a scheduled restart, so a
condition seen at one scrape only does not raise them: it must hold at two in a row.
The tier alerts are medium warnings too (a tier's fragmentation costs evictions and
refusals, not failed requests)."""
DEFAULT_FAILURE_WINDOW_S = 300.0
"""The failure rule's ``increase()`` range unless two scrape intervals are longer."""


@dataclass(frozen=True)
class RuleTiming:
    """When each rule fires: its ``for:`` (``for_s`` by alert name; a name not given
    has :data:`SHIPPED_FOR_S`'s) and the failure rule's ``increase()`` range."""

    for_s: Mapping[str, float] = field(default_factory=lambda: dict(SHIPPED_FOR_S))
    failure_window_s: float = DEFAULT_FAILURE_WINDOW_S

    def __post_init__(self) -> None:
        unknown = set(self.for_s) - {spec.name for spec in ALL_ALERTS}
        if unknown:
            raise ValueError(f"not alerts of the seed: {sorted(unknown)}")
        for name, value in self.for_s.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"for_s of {name} must be seconds >= 0, got {value}")

    def hold_s(self, name: str) -> float:
        """The rule's ``for:``, seconds."""
        return float(self.for_s.get(name, SHIPPED_FOR_S[name]))

    def window_s(self, scrape_interval_s: float) -> float:
        """The failure rule's range: at least two scrape intervals (two samples)."""
        return max(self.failure_window_s, 2 * scrape_interval_s)

    def recorded(self, tier_kinds: tuple[str, ...] = ()) -> RecordedTiming:
        """As a run's summary records it (``fleet.alerts``: ``for_s``, by alert in the
        order of :func:`~sim.results.seed_alerts.alerts_for` the run's tier kinds, and
        ``failure_window_s``)."""
        return RecordedTiming(
            for_s={spec.name: self.hold_s(spec.name) for spec in alerts_for(tier_kinds)},
            failure_window_s=float(self.failure_window_s),
        )


DEFAULT_TIMING = RuleTiming()


def with_gauge_hold(timing: RuleTiming, for_s: float) -> RuleTiming:
    """``timing`` with every gauge rule's ``for:`` set to ``for_s`` (``--for``; the
    failure rule, an event, keeps its own)."""
    held = {spec.name: for_s for spec in ALL_ALERTS if spec is not FRAGMENTATION_FAILURE}
    held[FRAGMENTATION_FAILURE.name] = timing.hold_s(FRAGMENTATION_FAILURE.name)
    return RuleTiming(held, timing.failure_window_s)


def _ms(seconds: np.ndarray | float) -> np.ndarray:
    return np.rint(np.asarray(seconds, dtype=float) * 1000.0).astype(np.int64)


@dataclass(frozen=True)
class Held:
    """One rule on one replica at each evaluation instant: ``active_at`` the index of
    the instant its episode started (-1 where the condition does not hold) and
    ``firing`` (module docstring)."""

    active_at: np.ndarray
    firing: np.ndarray

    @property
    def active(self) -> np.ndarray:
        return np.asarray(self.active_at >= 0)


def hold(condition: np.ndarray, times_s: np.ndarray, for_s: float) -> Held:
    """Prometheus's states of one alert over its ``condition`` at the instants
    ``times_s`` (module docstring)."""
    cond = np.asarray(condition, dtype=bool)
    index = np.arange(len(cond))
    starts = cond & ~np.concatenate([[False], cond[:-1]])
    active_at = np.maximum.accumulate(np.where(starts, index, -1)) if len(cond) else index
    active_at = np.where(cond, active_at, -1)
    stamps = _ms(times_s)
    since = stamps - stamps[np.maximum(active_at, 0)]
    firing = cond & (since >= _ms(for_s))
    return Held(active_at.astype(np.int64), firing)


def increase_condition(
    counter: np.ndarray, lo: int, hi: int, times_s: np.ndarray, window_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """``increase(counter[window_s]) > 0`` at each instant (module docstring), over a
    counter sampled at the instants ``lo..hi`` (inclusive; ``counter[j]``: its value
    at ``t_j``); and the value: how much it rose over the range (0 where it does not
    hold)."""
    n = len(times_s)
    cond = np.zeros(n, dtype=bool)
    value = np.zeros(n)
    if n == 0 or hi < lo:
        return cond, value
    stamps = _ms(times_s)
    k = np.arange(n)
    # the earliest sample in [t_k - W, t_k]: the first instant j with t_j >= t_k - W
    first = np.searchsorted(stamps, stamps - _ms(window_s), side="left")
    first = np.maximum(first, lo)
    last = np.minimum(k, hi)
    ok = (k >= lo) & (last > first)
    c = np.asarray(counter, dtype=float)
    rise = np.where(ok, c[np.clip(last, 0, n - 1)] - c[np.clip(first, 0, n - 1)], 0.0)
    cond = ok & (rise > 0)
    return cond, np.where(cond, rise, 0.0)
