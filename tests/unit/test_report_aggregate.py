"""reports.aggregate and the counting the figures rest on, on frames small enough to
check by hand: quantiles per window, readable window widths, the worst replicas' order,
uptime bins and the trend's rho, alert windows, avoidable scale-ups, the waste split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports.aggregate import (
    MAX_WINDOWS,
    fleet_quantiles,
    quantile_window_s,
    uptime_bins,
    uptime_trend,
    window_counts,
    window_index,
    worst_replicas,
)
from reports.downsample import window_label, window_width_s
from reports.fleet import event_times
from reports.timeline import alert_windows
from reports.usage import waste_shares

RATIO = "largest_contiguous_free_block_ratio"


def samples(times: np.ndarray, replicas: int, **columns: np.ndarray) -> pd.DataFrame:
    """Periodic samples of ``replicas`` replicas at ``times`` (replica-major order)."""
    n = len(times) * replicas
    frame = pd.DataFrame(
        {
            "time_s": np.tile(times, replicas),
            "replica": np.repeat(np.arange(replicas), len(times)),
            "trigger": "periodic",
            "up": True,
        }
    )
    for name, values in columns.items():
        frame[name] = np.broadcast_to(values, n)
    return frame


def test_quantiles_per_window_pool_every_replica_and_instant() -> None:
    frame = samples(np.array([0.0, 5.0, 10.0, 15.0, 20.0, 25.0]), 5)
    frame["free_share"] = frame["replica"] * 0.25  # 0, .25, .5, .75, 1 at every instant
    q = fleet_quantiles(frame, ("free_share",), 10.0)
    assert q["time_s"].tolist() == [5.0, 15.0, 25.0]
    assert q["samples"].tolist() == [10, 10, 10] and q["replicas"].tolist() == [5, 5, 5]
    assert q["free_share_min"].tolist() == [0.0] * 3
    # 10 values, two of each: p10 interpolates at position 0.9 (0 .. 0), p90 at 8.1 (1 .. 1)
    assert q["free_share_p10"].tolist() == [0.0] * 3
    assert q["free_share_p50"].tolist() == [0.5] * 3
    assert q["free_share_p90"].tolist() == [1.0] * 3
    one = fleet_quantiles(frame[frame["time_s"] == 0.0], ("free_share",), 10.0)
    assert one["free_share_p10"].to_numpy() == pytest.approx([0.1])  # 0 .. 0.25 at 0.4
    assert fleet_quantiles(frame.iloc[:0], ("free_share",), 10.0).empty


@pytest.mark.parametrize(
    ("span_s", "windows", "width_s", "label"),
    [
        (6 * 86400.0, 150, 3600.0, "1 h"),
        (6 * 86400.0, 60, 3 * 3600.0, "3 h"),
        (3600.0, 150, 60.0, "1 min"),
        (60 * 86400.0, 10, 6 * 86400.0, "6 days"),
    ],
)
def test_window_widths_are_readable(
    span_s: float, windows: int, width_s: float, label: str
) -> None:
    assert window_width_s(span_s, windows) == width_s
    assert span_s / width_s <= windows and window_label(width_s) == label


def test_the_quantile_window_holds_two_instants_and_caps_the_windows() -> None:
    few = samples(np.arange(0.0, 120.0, 2.0), 1)  # 60 instants: windows of >= 2 instants
    assert quantile_window_s(few) == 60.0
    six_days = samples(np.arange(0.0, 6 * 86400.0, 300.0), 1)
    assert 6 * 86400.0 / quantile_window_s(six_days) <= MAX_WINDOWS


def test_window_counts_count_every_event_once() -> None:
    times = np.array([0.0, 59.9, 60.0, 299.0, 300.0])  # the last at the very end
    w = window_counts({"a": times, "none": np.empty(0)}, end_s=300.0)
    assert w.width_s == 60.0 and w.starts_s.tolist() == [0.0, 60.0, 120.0, 180.0, 240.0]
    assert w.counts["a"].tolist() == [2, 1, 0, 0, 2] and w.counts["none"].sum() == 0


def test_worst_replicas_rank_failures_at_high_free_memory_first() -> None:
    frame = samples(np.arange(3.0), 4)
    frame[RATIO] = np.where(frame["replica"] == 3, 0.2, 0.9)
    events = pd.DataFrame(
        {
            "kind": ["growth_failure"] * 5 + ["admission_failure", "restart"],
            "replica": [0, 0, 0, 1, 1, 2, 2],
            "free_share": [0.1, 0.1, 0.1, 0.5, 0.5, 0.6, np.nan],
        }
    )
    # 1: two failures at high free; 0: three, none high; 2: one high; 3: none, lowest ratio
    assert worst_replicas(frame, events, 3, 0.25) == [(1, 2), (2, 1), (0, 3)]
    assert [r for r, _ in worst_replicas(frame, events, 4, 0.25)][3] == 3
    assert worst_replicas(frame, events, 0, 0.25) == []


def test_uptime_bins_keep_every_sample_and_the_trend_is_spearman() -> None:
    uptime = np.linspace(0.0, 40 * 3600.0, 4001)
    ratio = 1.0 - uptime / uptime.max() * 0.5  # falls with uptime: rho(uptime, 1 - ratio) = 1
    frame = pd.DataFrame({"uptime_s": uptime, RATIO: ratio})
    frame.loc[5, RATIO] = np.nan  # nothing free: no ratio, not a sample
    binned = uptime_bins(frame, bins=40)
    assert binned.samples.sum() == binned.counts.sum() == 4000
    assert np.all(np.diff(binned.median) < 0) and binned.median[0] == pytest.approx(0.994, abs=1e-3)
    trend = uptime_trend(frame)
    assert trend.samples == 4000 and trend.rho == pytest.approx(1.0)
    assert trend.slope_per_s == pytest.approx(-0.5 / uptime.max())
    ties = pd.DataFrame({"uptime_s": [0.0, 0.0, 1.0, 1.0], RATIO: [1.0, 0.0, 1.0, 0.0]})
    assert uptime_trend(ties).rho == pytest.approx(0.0)
    flat = pd.DataFrame({"uptime_s": [0.0, 1.0, 2.0, 3.0], RATIO: 1.0})
    assert uptime_trend(flat).rho is None


def test_alert_windows_count_replicas_firing_and_firings_started() -> None:
    log = pd.DataFrame(
        {
            "time_s": [10.0, 20.0, 30.0, 40.0, 250.0],
            "replica": [0, 1, 1, 1, 0],
            "alert": "a",
            "severity": "high",
            "state": ["firing", "firing", "resolved", "firing", "resolved"],
        }
    )
    windows, replicas = alert_windows(log, end_s=300.0)
    assert windows.width_s == 60.0
    assert windows.counts["a"].tolist() == [3, 0, 0, 0, 0]  # replica 1 fired twice
    assert replicas["a"].tolist() == [2, 2, 2, 2, 2]  # 0 to 250 s, 1 from 40 s to the end


def test_scale_ups_tagged_avoidable_are_told_apart() -> None:
    events = pd.DataFrame(
        {
            "time_s": [1.0, 2.0, 3.0, 4.0],
            "kind": ["scale-up", "scale-up", "scale-down", "restart"],
            "detail": ["provision_s=10.0; avoidable", "provision_s=10.0", "", "drain"],
        }
    )
    times = event_times(events)
    assert times["scale-up (avoidable)"].tolist() == [1.0] and times["scale-up"].tolist() == [2.0]
    assert times["scale-down"].tolist() == [3.0] and times["restart"].tolist() == [4.0]


def test_the_fourth_waste_share_splits_into_its_two_parts() -> None:
    frame = samples(
        np.arange(0.0, 40.0, 10.0),
        2,
        capacity_tokens=np.array(100.0),
        free_tokens=np.array(60.0),
        largest_free_extent_tokens=np.array(30.0),
        share_token_states=np.array(0.2),
        share_reservation=np.array(0.1),
        share_internal_fragmentation=np.array(0.1),
        share_external_fragmentation_free=np.array(0.6),
    )
    frame[RATIO] = np.where(frame["replica"] == 0, 0.5, 1.0)
    times, shares, means = waste_shares(frame, 20.0)
    assert times.tolist() == [10.0, 30.0]
    assert np.allclose(shares.sum(axis=1), 1.0)
    assert np.allclose(shares[:, 3] + shares[:, 4], 0.6)  # the DESIGN share, unchanged
    assert np.allclose(shares[:, 4], 0.6 * 0.75)  # in the largest extent: ratio-weighted
    assert means[3] + means[4] == pytest.approx(0.6)


def test_a_time_falls_in_the_window_that_holds_it() -> None:
    times = np.array([-1.0, 0.0, 9.99, 10.0, 30.0])
    assert window_index(times, 10.0).tolist() == [-1, 0, 0, 1, 3]
    assert window_index(times, 10.0, 3).tolist() == [0, 0, 0, 1, 2]  # the run's end: the last
