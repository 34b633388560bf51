"""Prometheus's alert states (``sim.telemetry.alert_states``): ``for:`` held to a
transliteration of ``AlertingRule.Eval`` (pending at the first instant, firing at the
first with ``now - activeAt >= for``, dropped or resolved when the condition stops, a new
``activeAt`` after), ``increase(c[W]) > 0`` held to a direct reading of the range's
samples, and the alert log's episodes: pending rows count the episodes the condition
held, firing rows the ones ``for:`` let through."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.results import seed_alerts
from sim.telemetry.alert_states import (
    SHIPPED_FOR_S,
    RuleTiming,
    hold,
    increase_condition,
    with_gauge_hold,
)
from sim.telemetry.alerts import episode_counts, evaluate_alerts

HIGH = seed_alerts.HIGH_FRAGMENTATION.name
FAILURE = seed_alerts.FRAGMENTATION_FAILURE.name


def prometheus_eval(condition: list[bool], times_s: list[float], for_s: float) -> list[str]:
    """The state after each evaluation of one label set, as ``Eval`` steps it:
    ``inactive``, ``pending`` or ``firing``."""
    state, active_at = "inactive", 0.0
    out = []
    for holds, ts in zip(condition, times_s, strict=True):
        if holds:
            if state == "inactive":
                state, active_at = "pending", ts
            if state == "pending" and round((ts - active_at) * 1000) >= round(for_s * 1000):
                state = "firing"
        else:
            state = "inactive"
        out.append(state)
    return out


@pytest.mark.parametrize("for_s", [0.0, 15.0, 30.0, 60.0, 61.0, 300.0])
def test_hold_is_prometheus_eval_over_random_conditions(for_s: float) -> None:
    rng = np.random.default_rng(int(for_s))
    times = 30.0 * np.arange(400)
    condition = rng.random(400) < 0.7
    held = hold(condition, times, for_s)
    want = prometheus_eval(condition.tolist(), times.tolist(), for_s)
    got = [
        "firing" if f else "pending" if a else "inactive"
        for a, f in zip(held.active, held.firing, strict=True)
    ]
    assert got == want
    # activeAt: the first instant of the episode
    for k in np.flatnonzero(condition).tolist():
        start = k
        while start > 0 and condition[start - 1]:
            start -= 1
        assert held.active_at[k] == start


def test_for_fires_at_the_first_instant_it_has_held_that_long() -> None:
    times = 30.0 * np.arange(8)
    cond = np.array([False, True, True, True, False, True, True, False])
    assert hold(cond, times, 60.0).firing.tolist() == [
        False,
        False,
        False,
        True,
        False,
        False,
        False,
        False,
    ]
    assert hold(cond, times, 0.0).firing.tolist() == cond.tolist()
    # 45 s: the second instant after activeAt (60 s >= 45 s)
    assert hold(cond, times, 45.0).firing.tolist() == hold(cond, times, 60.0).firing.tolist()


def test_increase_condition_reads_the_closed_range_of_the_counters_samples() -> None:
    rng = np.random.default_rng(5)
    times = 30.0 * np.arange(60)
    counter = np.cumsum(rng.random(60) < 0.1).astype(float)
    lo, hi = 5, 50
    for window_s in (60.0, 90.0, 300.0):
        cond, value = increase_condition(counter, lo, hi, times, window_s)
        for k in range(60):
            inside = [j for j in range(lo, hi + 1) if times[k] - window_s <= times[j] <= times[k]]
            rise = counter[inside[-1]] - counter[inside[0]] if len(inside) >= 2 else 0.0
            assert cond[k] == (rise > 0), (window_s, k)
            assert value[k] == (rise if rise > 0 else 0.0)


def ratio_frame(values: list[float]) -> pd.DataFrame:
    times = [30.0 * k for k in range(len(values))]
    return pd.DataFrame(
        {
            "time_s": times,
            "replica": 0,
            "trigger": "periodic",
            "up": True,
            "uptime_s": times,
            "largest_contiguous_free_block_ratio": values,
        }
    )


NO_EVENTS = pd.DataFrame({"time_s": [], "replica": [], "kind": [], "free_share": []})


def test_for_suppresses_a_short_episode_and_the_log_counts_both() -> None:
    # below 0.6 at one scrape (suppressed by the shipped for: 30s), then at three (60 s
    # held: fires at its second scrape)
    values = [0.9, 0.55, 0.9, 0.55, 0.55, 0.55, 0.9, 0.9]
    log = evaluate_alerts(ratio_frame(values), NO_EVENTS)
    rows = log[log["alert"] == HIGH]
    assert list(
        zip(rows["time_s"], rows["state"], rows["fired"], rows["active_since_s"], strict=True)
    ) == [
        (30.0, "pending", False, 30.0),
        (60.0, "resolved", False, 30.0),
        (90.0, "pending", True, 90.0),
        (120.0, "firing", True, 90.0),
        (180.0, "resolved", True, 90.0),
    ]
    assert set(rows["for_s"]) == {SHIPPED_FOR_S[HIGH]} == {30.0}
    assert episode_counts(log)[HIGH] == (2, 1)
    # with for: 0 both fire; with for: 2m neither
    at_once = evaluate_alerts(
        ratio_frame(values), NO_EVENTS, timing=with_gauge_hold(RuleTiming(), 0.0)
    )
    assert episode_counts(at_once)[HIGH] == (2, 2)
    later = evaluate_alerts(
        ratio_frame(values), NO_EVENTS, timing=with_gauge_hold(RuleTiming(), 120.0)
    )
    assert episode_counts(later)[HIGH] == (2, 0)


def test_timing_is_checked_and_recorded() -> None:
    with pytest.raises(ValueError, match="not alerts of the seed"):
        RuleTiming({"nope": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        RuleTiming({HIGH: -1.0})
    recorded = RuleTiming().recorded()
    assert list(recorded["for_s"]) == [spec.name for spec in seed_alerts.ALERTS]
    assert recorded["failure_window_s"] == 300.0
    assert with_gauge_hold(RuleTiming(), 30.0).hold_s(FAILURE) == 0.0
    assert RuleTiming().window_s(200.0) == 400.0
