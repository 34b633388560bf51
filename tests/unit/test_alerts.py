"""The seed's alerts over hand-made frames (``sim.telemetry.alerts``) and the Prometheus
rules exported for them (``sim.telemetry.prometheus``): each alert's condition holds at the
scrape Prometheus would see it hold at (not before), ends when it ends, a NaN ratio
never alerts, "exceeds 25 %" is strict, and failed requests are diagnosed by the
allocator's cause. These tests evaluate the conditions with ``for: 0`` (the condition's
episodes are then the firings) and a 60 s failure window;
``test_alert_states.py`` holds ``for:``."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from support.runfolder import stub_summary

from sim.engine.recorder import EVENT_COLUMNS, SAMPLE_COLUMNS
from sim.results import seed_alerts
from sim.results.frames import REQUEST_COLUMNS
from sim.results.seed_alerts import AlertThresholds, spearman_rho
from sim.results.summary import alert_lines, summarize, with_firings
from sim.results.summary_model import Summary
from sim.scenario.yaml_loader import load_yaml
from sim.telemetry.alert_states import RuleTiming
from sim.telemetry.alerts import (
    ALERT_COLUMNS,
    ALERTS,
    evaluate_alerts,
)
from sim.telemetry.diagnosis import DIAGNOSIS_COLUMNS, diagnose_failures
from sim.telemetry.prometheus import METRICS, alert_rules, expressions, rules_yaml

CAP = 1000
FAILURE = seed_alerts.FRAGMENTATION_FAILURE.name
SEVERE = seed_alerts.SEVERE_FRAGMENTATION.name
HIGH = seed_alerts.HIGH_FRAGMENTATION.name
UPTIME = seed_alerts.UPTIME_CORRELATION.name
SATURATING = [*(0.8 * (1.0 - np.exp(-np.arange(16) / 2.0))), 0.45, 0.8, 0.8]
"""Fragmentation rising monotonically and saturating, then a dip and back."""


def samples(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A timeseries frame: each row's given columns, the rest a plausible idle pool."""
    base: dict[str, Any] = {c: 0 for c in SAMPLE_COLUMNS}
    base |= {
        "replica": 0,
        "trigger": "periodic",
        "up": True,
        "capacity_tokens": CAP,
        "free_tokens": CAP,
        "largest_contiguous_free_block_ratio": 1.0,
    }
    full = [base | {"uptime_s": r["time_s"]} | r for r in rows]
    return pd.DataFrame(full, columns=list(SAMPLE_COLUMNS))


def ratios(values: list[float], every_s: float = 30.0, **extra: Any) -> pd.DataFrame:
    """Periodic samples at 0, every_s, ... with these ratios."""
    return samples(
        [
            {"time_s": i * every_s, "largest_contiguous_free_block_ratio": v, **extra}
            for i, v in enumerate(values)
        ]
    )


def events(rows: list[dict[str, Any]]) -> pd.DataFrame:
    base: dict[str, Any] = {c: 0 for c in EVENT_COLUMNS}
    base |= {"replica": 0, "kind": "admission_failure", "cause": "fragmentation", "detail": ""}
    full = [base | {"free_tokens": round(r.get("free_share", 0) * CAP)} | r for r in rows]
    return pd.DataFrame(full, columns=list(EVENT_COLUMNS))


NO_EVENTS = events([])
AT_ONCE = RuleTiming({spec.name: 0.0 for spec in ALERTS}, failure_window_s=60.0)
"""No ``for:``; the failure rule's increase() over 60 s: three samples, a failure in a
scrape window holds it at that scrape and the next."""


def log_of(ts: pd.DataFrame, ev: pd.DataFrame = NO_EVENTS, **kw: Any) -> pd.DataFrame:
    log = evaluate_alerts(ts, ev, **({"timing": AT_ONCE} | kw))
    assert tuple(log.columns) == ALERT_COLUMNS
    return log


def transitions(log: pd.DataFrame, alert: str) -> list[tuple[float, str]]:
    """The firing and resolved rows (with ``for: 0`` each pending row has a firing row
    at the same instant)."""
    rows = log[(log["alert"] == alert) & (log["state"] != "pending")]
    return list(zip(rows["time_s"].tolist(), rows["state"].tolist(), strict=True))


# -- ratio alerts -------------------------------------------------------------------


def test_ratio_alerts_fire_at_the_first_scrape_below_and_resolve_above() -> None:
    log = log_of(ratios([0.9, 0.7, 0.55, 0.45, 0.55, 0.8, 0.8]))
    assert transitions(log, HIGH) == [
        (60.0, "firing"),
        (150.0, "resolved"),
    ]
    assert transitions(log, SEVERE) == [(90.0, "firing"), (120.0, "resolved")]
    first = log.iloc[0]
    assert (first["severity"], first["value"], first["state"]) == ("medium", 0.55, "pending")
    assert log.iloc[1]["state"] == "firing" and bool(log.iloc[1]["fired"])
    assert first["response"].startswith("Schedule proactive restart")
    assert set(log.loc[log["alert"] == SEVERE, "severity"]) == {"high"}


def test_threshold_is_strict_and_the_scenarios_thresholds_are_used() -> None:
    ts = ratios([0.6, 0.5])
    assert transitions(log_of(ts), HIGH) == [(30.0, "firing")]
    assert transitions(log_of(ts), SEVERE) == []
    looser = AlertThresholds(ratio_alert=0.7, ratio_severe=0.55)
    log = log_of(ts, thresholds=looser)
    assert transitions(log, SEVERE) == [(30.0, "firing")]
    assert transitions(log, HIGH) == [(0.0, "firing")]


def test_a_nan_ratio_never_alerts_and_resolves_a_firing_alert() -> None:
    log = log_of(ratios([math.nan, math.nan, 0.3, math.nan]))
    assert transitions(log, SEVERE) == [(60.0, "firing"), (90.0, "resolved")]
    assert log["active_since_s"].tolist() == [60.0] * 6  # both ratio alerts
    assert math.isnan(log.iloc[-1]["value"])
    assert log_of(ratios([math.nan] * 5)).empty


def test_a_scrape_reads_the_latest_periodic_sample_not_failure_samples() -> None:
    ts = samples(
        [
            {"time_s": 0.0, "largest_contiguous_free_block_ratio": 0.9},
            {"time_s": 40.0, "largest_contiguous_free_block_ratio": 0.1, "trigger": "failure"},
            {"time_s": 61.0, "largest_contiguous_free_block_ratio": 0.4},
            {"time_s": 100.0, "largest_contiguous_free_block_ratio": 0.4},
        ]
    )
    # scrapes at 0, 30, 60, 90: the 61 s sample is first read at 90 s
    assert transitions(log_of(ts), SEVERE) == [(90.0, "firing")]


def test_a_down_replica_and_one_past_its_final_sample_have_no_data() -> None:
    ts = samples(
        [
            {"time_s": 0.0, "largest_contiguous_free_block_ratio": 0.3},
            {"time_s": 30.0, "largest_contiguous_free_block_ratio": 0.3, "up": False},
            {"time_s": 60.0, "largest_contiguous_free_block_ratio": 0.3},
            {"time_s": 60.0, "replica": 1, "largest_contiguous_free_block_ratio": 0.3},
            {"time_s": 65.0, "replica": 1, "trigger": "final"},
            {"time_s": 120.0, "largest_contiguous_free_block_ratio": 0.3},
        ]
    )
    log = log_of(ts)
    severe = log[(log["alert"] == SEVERE) & (log["state"] != "pending")]
    assert list(zip(severe["time_s"], severe["replica"], severe["state"], strict=True)) == [
        (0.0, 0, "firing"),
        (30.0, 0, "resolved"),
        (60.0, 0, "firing"),
        (60.0, 1, "firing"),
        (90.0, 1, "resolved"),
    ]


def test_the_scrape_grid_follows_the_interval() -> None:
    ts = ratios([0.9, 0.9, 0.3, 0.3], every_s=10.0)
    assert transitions(log_of(ts, scrape_interval_s=7.0), SEVERE) == [(21.0, "firing")]


# -- allocation failures at high free memory ------------------------------------------


def test_failure_at_high_free_memory_holds_while_increase_sees_it() -> None:
    ts = ratios([1.0] * 6)
    ev = events(
        [
            {"time_s": 31.0, "free_share": 0.4},
            {"time_s": 45.0, "free_share": 0.3, "kind": "growth_failure"},
            {"time_s": 45.0, "free_share": 0.4, "kind": "preemption"},
            {"time_s": 90.0, "free_share": 0.26},
        ]
    )
    log = log_of(ts, ev)
    # (30, 60] holds two failures, (60, 90] one; increase() over [t - 60, t] sees them
    # until the range starts at 90 s: resolved at 150 s
    assert transitions(log, FAILURE) == [
        (60.0, "firing"),
        (150.0, "resolved"),
    ]
    # the default range, 5 minutes, holds it past the run's end
    assert transitions(log_of(ts, ev, timing=RuleTiming()), FAILURE) == [(60.0, "firing")]
    fired = log[log["alert"] == FAILURE].iloc[0]
    assert (fired["severity"], fired["value"]) == ("high", 2.0)  # the preemption is no failure
    assert fired["response"].startswith("Restart the affected node")


def test_a_failure_exactly_at_the_high_free_share_does_not_fire() -> None:
    ts = ratios([1.0] * 3)
    at = events([{"time_s": 10.0, "free_share": 0.25, "cause": "capacity"}])
    assert log_of(ts, at).empty
    above = events([{"time_s": 10.0, "free_share": 0.2501}])
    assert transitions(log_of(ts, above), FAILURE) == [(30.0, "firing")]


def test_failures_are_per_replica_and_after_the_last_scrape_are_never_scraped() -> None:
    ts = pd.concat([ratios([1.0] * 3), ratios([1.0] * 3, replica=1)], ignore_index=True)
    ev = events([{"time_s": 1.0, "free_share": 0.5, "replica": 1}, {"time_s": 61.0}])
    log = log_of(ts, ev)
    assert log[["time_s", "replica", "state"]].values.tolist() == [
        [30.0, 1, "pending"],
        [30.0, 1, "firing"],
    ]
    # a failure at the first scrape is in the counter's first sample: increase() never
    # sees it rise
    at_start = events([{"time_s": 0.0, "free_share": 0.5, "replica": 1}])
    assert log_of(ts, at_start).empty


# -- uptime trend ---------------------------------------------------------------------


def test_uptime_trend_fires_once_the_window_is_full_and_past_the_level() -> None:
    frag = np.linspace(0.0, 0.6, 13)  # ratio 1.0 -> 0.4 over 6 minutes
    ts = ratios(list(1.0 - frag))
    log = log_of(ts, trend_window_s=120.0)  # 4 scrapes
    # first scrape with uptime >= 120 s, fragmentation > 0.4 (ratio < 0.6) and rising:
    # ratio(k) = 1 - 0.05 k < 0.6 from k = 9 (270 s)
    assert transitions(log, UPTIME) == [(270.0, "firing")]
    row = log[log["alert"] == UPTIME].iloc[0]
    assert row["value"] == pytest.approx(1.0)


def test_uptime_trend_needs_a_rise_and_no_restart_in_the_window() -> None:
    flat = ratios([0.3] * 12)
    assert transitions(log_of(flat, trend_window_s=120.0), UPTIME) == []
    falling = ratios(list(np.linspace(0.5, 0.3, 12)[::-1]))  # fragmentation falling
    assert transitions(log_of(falling, trend_window_s=120.0), UPTIME) == []
    rows = [
        {"time_s": 30.0 * i, "uptime_s": 30.0 * (i % 6), "largest_contiguous_free_block_ratio": r}
        for i, r in enumerate(1.0 - np.linspace(0.3, 0.8, 12))
    ]
    # a restart every 6 scrapes: uptime never reaches the 200 s window
    restarted = samples(rows)
    assert log_of(restarted, trend_window_s=200.0).query(f"alert == '{UPTIME}'").empty


def test_a_nan_ratio_in_the_trend_window_gives_no_correlation() -> None:
    values = list(1.0 - np.linspace(0.3, 0.8, 12))
    values[8] = math.nan
    log = log_of(ratios(values), trend_window_s=120.0)
    fired = transitions(log, UPTIME)
    # windows holding scrape 8 (240..330 s) give no r
    assert all(not 240.0 <= t <= 330.0 or state == "resolved" for t, state in fired)
    assert (240.0, "resolved") in fired


def test_the_window_statistic_is_spearman_rho_the_summarys_statistic() -> None:
    # a monotone, saturating rise: every rank agrees (rho 1, where Pearson's r of the
    # same points is below 0.95), then a dip inside the window
    ts = ratios([1.0 - f for f in SATURATING])
    log = log_of(ts, trend_window_s=240.0)  # 8 scrapes
    rows = log[(log["alert"] == UPTIME) & (log["state"] != "pending")]
    first = rows.iloc[0]
    assert (first["state"], first["value"]) == ("firing", 1.0)

    def window(time_s: float) -> pd.DataFrame:  # the 8 scrapes ending at time_s
        k = round(time_s / 30.0)
        return ts.iloc[k - 7 : k + 1]

    first_w = window(float(first["time_s"]))
    frag_w = 1.0 - first_w["largest_contiguous_free_block_ratio"]
    assert stats.pearsonr(first_w["uptime_s"], frag_w).statistic < 0.95
    for time_s, value in zip(rows["time_s"].tolist(), rows["value"].tolist(), strict=True):
        w = window(time_s)
        want = stats.spearmanr(w["uptime_s"], 1.0 - w["largest_contiguous_free_block_ratio"])
        assert value == pytest.approx(want.statistic)
    # the run-wide number in the summary is the same statistic over every sample
    corr = summarize(requests([]), ts, NO_EVENTS, end_s=600.0).memory
    corr = corr.node_uptime_vs_fragmentation_correlation
    want = stats.spearmanr(ts["uptime_s"], 1.0 - ts["largest_contiguous_free_block_ratio"])
    assert corr.spearman_rho == pytest.approx(want.statistic)
    assert corr.samples == len(ts)


def test_spearman_rho_matches_scipy_row_by_row_with_ties_and_missing_values() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, (64, 9)).astype(float)
    y = rng.integers(0, 3, (64, 9)).astype(float)
    x[rng.random(x.shape) < 0.2] = math.nan
    got = spearman_rho(x, y)
    for i in range(len(x)):
        keep = ~np.isnan(x[i])
        if keep.sum() < 2 or len(set(x[i][keep])) < 2 or len(set(y[i][keep])) < 2:
            assert math.isnan(got[i])
        else:
            assert got[i] == pytest.approx(stats.spearmanr(x[i][keep], y[i][keep]).statistic)


def test_same_frames_same_log_and_empty_frames_an_empty_log() -> None:
    ts = ratios([0.9, 0.4, 0.3, 0.8])
    pd.testing.assert_frame_equal(log_of(ts), log_of(ts))
    empty = log_of(samples([]))
    assert empty.empty and empty["time_s"].dtype == float


# -- one name, two counts ---------------------------------------------------------------


def test_one_name_per_alert_in_the_summary_the_log_and_the_rules() -> None:
    ts = ratios([1.0 - f for f in SATURATING])
    ev = events([{"time_s": 100.0, "free_share": 0.5}])
    names = [spec.name for spec in seed_alerts.ALERTS]
    assert [spec.name for spec in ALERTS] == names
    summary = summarize(requests([]), ts, ev, end_s=600.0)
    assert [a.alert for a in summary.alerts] == names
    assert set(log_of(ts, ev, trend_window_s=240.0)["alert"]) == set(names)
    (group,) = alert_rules()["groups"]
    assert [r["alert"] for r in group["rules"]] == names
    for name in names:  # the seed's titles in snake_case: valid Prometheus alert names
        assert re.fullmatch(r"[a-z][a-z_]*", name)


def test_matching_failures_and_firings_are_two_counts_both_named() -> None:
    ts = ratios([1.0] * 5)
    # three failures in the first window, one in the next: one firing spans both
    ev = events([{"time_s": t, "free_share": 0.5} for t in (1.0, 2.0, 3.0, 45.0)])
    log = log_of(ts, ev)
    assert transitions(log, FAILURE) == [(30.0, "firing"), (120.0, "resolved")]
    summary = summarize(requests([]), ts, ev, end_s=150.0)
    (entry,) = summary.alerts
    assert entry.matching_failures == 4 and "count" not in entry.to_json_dict()
    episodes = {FAILURE: (1, 1), UPTIME: (3, 2)}
    fired = with_firings(summary.alerts, episodes, AlertThresholds(), {UPTIME: 120.0})
    assert [(a.alert, a.condition_episodes, a.firings) for a in fired] == [
        (FAILURE, 1, 1),
        (UPTIME, 3, 2),
    ]
    assert fired[1].condition.startswith("Spearman rho(uptime, 1 - ratio) >= 0.5")
    written = [a.to_json_dict() for a in fired]
    (line, uptime_line) = alert_lines(Summary.from_json_dict(stub_summary(alerts=written)))
    assert "4 matching failures; condition held in 1 episode, 1 fired (alerts.parquet)" in line
    assert "matching" not in uptime_line
    assert "condition held in 3 episodes, 2 fired after for: 2m" in uptime_line
    data = stub_summary(alerts=written)
    data["memory"][UPTIME] = {"spearman_rho": 0.3, "p_value": 0.2, "samples": 20}
    run_wide = Summary.from_json_dict(data)
    assert "Spearman rho 0.30 over the whole run (condition not met)" in alert_lines(run_wide)[1]
    with pytest.raises(ValueError, match="FragmentationDrivenAllocationFailure"):
        with_firings([], {"FragmentationDrivenAllocationFailure": (1, 1)}, AlertThresholds())


# -- diagnosis ------------------------------------------------------------------------


def requests(rows: list[dict[str, Any]]) -> pd.DataFrame:
    base: dict[str, Any] = {c: 0 for c in REQUEST_COLUMNS} | {"status": "ok"}
    return pd.DataFrame([base | r for r in rows], columns=list(REQUEST_COLUMNS))


def test_diagnosis_by_the_allocators_cause() -> None:
    req = requests(
        [
            {"request_id": 0},
            {"request_id": 1, "status": "rejected-fragmentation"},
            {"request_id": 2, "status": "failed-capacity", "replica": 3},
            {"request_id": 3, "status": "rejected-too-long"},
            {"request_id": 4, "status": "timed-out"},
        ]
    )
    ev = events(
        [
            {"time_s": 1.0, "request_id": 1, "free_share": 0.1, "cause": "capacity"},
            {
                "time_s": 2.0,
                "request_id": 1,
                "free_share": 0.4,
                "need_tokens": 300,
                "largest_free_extent_tokens": 120,
            },
            {"time_s": 3.0, "request_id": 1, "kind": "preemption", "cause": "capacity"},
            {
                "time_s": 5.0,
                "request_id": 2,
                "replica": 3,
                "kind": "growth_failure",
                "free_share": 0.02,
                "cause": "capacity",
            },
        ]
    )
    d = diagnose_failures(req, ev)
    assert tuple(d.columns) == DIAGNOSIS_COLUMNS
    assert d["request_id"].tolist() == [1, 2, 3]
    assert d["diagnosis"].tolist() == [
        "fragmentation on a capable node",
        "capacity shortage",
        "request too long",
    ]
    assert d["at_high_free_memory"].tolist() == [True, False, False]
    frag = d.iloc[0]
    assert (frag["failure_s"], frag["free_tokens"], frag["need_tokens"]) == (2.0, 400, 300)
    assert d.iloc[1]["replica"] == 3
    strict = diagnose_failures(req, ev, AlertThresholds(high_free_share=0.4))
    assert not strict["at_high_free_memory"].any()


# -- Prometheus rules -------------------------------------------------------------------


def test_rules_file_is_valid_yaml_with_one_rule_per_alert() -> None:
    text = rules_yaml(alert_rules(AlertThresholds(), 30.0))
    for loaded in (yaml.safe_load(text), load_yaml(text)):
        (group,) = loaded["groups"]
        assert (group["name"], group["interval"]) == ("fragsim", "30s")
        assert [r["alert"] for r in group["rules"]] == [a.name for a in ALERTS]
        for rule, spec in zip(group["rules"], ALERTS, strict=True):
            held = spec.name in (HIGH, UPTIME)  # the medium warnings hold; no for: 0s
            assert set(rule) == {"alert", "expr", "labels", "annotations"} | (
                {"for"} if held else set()
            )
            assert rule["labels"] == {
                "severity": {"high": "critical", "medium": "warning"}[spec.severity]
            }
            assert rule["annotations"]["response"] == spec.response
            assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
            assert rule.get("for") == ("30s" if held else None)


def test_rule_expressions_use_the_metric_table_and_the_thresholds() -> None:
    th = AlertThresholds(high_free_share=0.3, ratio_alert=0.65, ratio_severe=0.45)
    ex = expressions(th, 15.0, 600.0)
    names = {name for _, name, _, _ in METRICS}
    assert ex[SEVERE] == "fragsim_largest_contiguous_free_block_ratio < 0.45"
    assert ex[HIGH].endswith("< 0.65")
    assert ex[FAILURE] == (
        "sum by (replica, pool) (increase(fragsim_allocation_failures_at_high_free_memory_total[5m]))"
        " > 0"
    )
    assert ex[UPTIME].startswith("fragsim_node_uptime_vs_fragmentation_correlation >= 0.5 and")
    assert ex[UPTIME].endswith("fragsim_node_uptime_seconds >= 600.0")
    for expr in ex.values():
        used = set(re.findall(r"fragsim_\w+", expr))
        assert used <= names
        assert expr.count("(") == expr.count(")")
