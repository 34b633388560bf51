"""The KV offload tiers' alert, ``offload_<kind>_tier_fragmentation``: its condition over
hand-made samples (the tier's ratio below ``ratio_alert`` while more than
``high_free_share`` of it is free), its absence from runs without tiers, its summary
entry and its rule, all from the one definition in ``sim.results.seed_alerts``."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from support.tier_fleet import TIER_FLEET

from sim.results import seed_alerts
from sim.results.seed_alerts import TIER_ALERT, AlertThresholds, alerts_for
from sim.results.tier_alerts import tier_alert_entries
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.telemetry.alert_states import DEFAULT_TIMING, RuleTiming
from sim.telemetry.alerts import conditions, episode_counts, evaluate_alerts, scrape_times
from sim.telemetry.prometheus import alert_rules

HOST = TIER_ALERT["host"].name
NO_EVENTS = pd.DataFrame({"time_s": [], "replica": [], "kind": [], "free_share": []})
CAPACITY_BYTES = 1000.0


def tier_frame(ratios: list[float], free_shares: list[float], *, up: bool = True) -> pd.DataFrame:
    """One replica sampled every 30 s: a healthy GPU pool and a host tier with these
    ratios and free shares."""
    times = [30.0 * k for k in range(len(ratios))]
    return pd.DataFrame(
        {
            "time_s": times,
            "replica": 0,
            "trigger": "periodic",
            "up": up,
            "uptime_s": times,
            "largest_contiguous_free_block_ratio": 1.0,
            "offload_host_capacity_bytes": CAPACITY_BYTES,
            "offload_host_free_bytes": [s * CAPACITY_BYTES for s in free_shares],
            "offload_host_largest_contiguous_free_block_ratio": ratios,
        }
    )


SEED = AlertThresholds()


def held(frame: pd.DataFrame, th: AlertThresholds = SEED) -> list[bool]:
    times = scrape_times(frame, 30.0)
    condition, _ = conditions(frame, NO_EVENTS, 0, times, th, 3600.0, 30.0)[HOST]
    return [bool(v) for v in condition]


def test_the_condition_is_a_low_ratio_at_high_free_share() -> None:
    ratios = [0.9, 0.5, 0.5, 0.5, math.nan, 0.59, 0.6]
    free = [0.5, 0.5, 0.25, 0.2, 0.5, 0.26, 0.9]
    # high ratio; both; free exactly 25 % (not above); little free; full (NaN); both; ratio
    # exactly 0.6 (not below)
    assert held(tier_frame(ratios, free)) == [False, True, False, False, False, True, False]
    # a replica down reports nothing; the thresholds are the scenario's
    assert not any(held(tier_frame(ratios, free, up=False)))
    loose = AlertThresholds(high_free_share=0.1, ratio_alert=0.95)
    assert held(tier_frame(ratios, free), loose) == [True, True, True, True, False, True, True]


def test_the_log_holds_for_30s_and_carries_the_tier_ratio() -> None:
    # low at one scrape (suppressed by for: 30s), then at three (fires at the second)
    ratios = [0.9, 0.4, 0.9, 0.3, 0.3, 0.3, 0.9]
    log = evaluate_alerts(tier_frame(ratios, [0.5] * len(ratios)), NO_EVENTS)
    rows = log[log["alert"] == HOST]
    assert list(zip(rows["time_s"], rows["state"], rows["fired"], strict=True)) == [
        (30.0, "pending", False),
        (60.0, "resolved", False),
        (90.0, "pending", True),
        (120.0, "firing", True),
        (180.0, "resolved", True),
    ]
    assert rows["value"].tolist()[:2] == [0.4, 0.9]
    assert set(rows["severity"]) == {"medium"} and set(rows["for_s"]) == {30.0}
    assert episode_counts(log)[HOST] == (2, 1)
    assert set(log["alert"]) == {HOST}  # the GPU pool is healthy


def test_a_run_without_tiers_has_no_tier_alert() -> None:
    frame = tier_frame([0.3], [0.5]).drop(
        columns=[c for c in tier_frame([0.3], [0.5]).columns if c.startswith("offload_")]
    )
    found = conditions(
        frame, NO_EVENTS, 0, scrape_times(frame, 30.0), AlertThresholds(), 3600.0, 30.0
    )
    assert list(found) == [spec.name for spec in seed_alerts.ALERTS]
    assert [r["alert"] for r in alert_rules()["groups"][0]["rules"]] == list(found)
    assert list(DEFAULT_TIMING.recorded()["for_s"]) == list(found)
    assert tier_alert_entries(frame, AlertThresholds()) == []


def test_one_alert_per_tier_kind_defined_once() -> None:
    assert [spec.name for spec in seed_alerts.TIER_ALERTS] == [
        "offload_host_tier_fragmentation",
        "offload_nvme_tier_fragmentation",
        "offload_remote_tier_fragmentation",
    ]
    assert alerts_for(("remote", "host"))[-2:] == (TIER_ALERT["host"], TIER_ALERT["remote"])
    with pytest.raises(ValueError, match="not tier kinds"):
        alerts_for(("ssd",))
    th = AlertThresholds(high_free_share=0.3, ratio_alert=0.7)
    rules = alert_rules(th, tier_kinds=("nvme",))["groups"][0]["rules"]
    rule = rules[-1]
    assert rule["alert"] == "offload_nvme_tier_fragmentation" and rule.get("for") == "30s"
    assert rule["expr"] == (
        "fragsim_offload_nvme_largest_contiguous_free_block_ratio < 0.7 and "
        "(fragsim_offload_nvme_free_bytes / fragsim_offload_nvme_capacity_bytes) > 0.3"
    )
    assert rule["labels"] == {"severity": "warning"}
    assert seed_alerts.condition(TIER_ALERT["nvme"], th) == (
        "nvme tier: largest_contiguous_free_block_ratio < 0.7 while free > 30%"
    )
    with pytest.raises(ValueError, match="not alerts of the seed"):
        RuleTiming({"offload_ssd_tier_fragmentation": 1.0})


def test_a_fragmenting_tier_fires_in_the_run_and_its_summary() -> None:
    result = run(parse_scenario(TIER_FLEET))
    summary = result.summary
    entry = next(a for a in summary.alerts if a.alert == HOST)
    periodic = result.timeseries[result.timeseries["trigger"] == "periodic"]
    ratio = periodic["offload_host_largest_contiguous_free_block_ratio"]
    free = periodic["offload_host_free_bytes"] / periodic["offload_host_capacity_bytes"]
    assert entry.matching_samples == int(((ratio < 0.6) & (free > 0.25)).sum()) > 0
    held, fired = episode_counts(result.alerts)[HOST]
    assert (entry.condition_episodes, entry.firings, entry.for_s) == (held, fired, 30.0)
    assert held > fired > 0  # some episodes held one scrape only: for: 30s suppressed them
    assert summary.fleet is not None and summary.fleet.alerts is not None
    assert (summary.fleet.alerts.for_s or {})[HOST] == 30.0
