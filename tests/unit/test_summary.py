"""Summary stories on small hand-made frames: percentiles, throughput, failure counts,
the seed's alerts and their thresholds, and strict JSON."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.engine.recorder import EVENT_COLUMNS, SAMPLE_COLUMNS
from sim.results.frames import REQUEST_COLUMNS
from sim.results.seed_alerts import UPTIME_CORRELATION, condition
from sim.results.summary import AlertThresholds, RunStats, summarize, with_firings
from sim.results.summary_sections import finite


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    """A results table of hand-made rows; a column a row leaves out is missing (NaN)."""
    for row in rows:
        assert row.keys() <= set(columns), row.keys() - set(columns)
    return pd.DataFrame(rows, columns=list(columns))


def requests_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    base: dict[str, Any] = {
        "replica": 0,
        "prompt_tokens": 10,
        "num_seqs": 1,
        "preemptions": 0,
        "retries": 0,
        "peak_reserved_tokens": 16,
        "cached_tokens": 0,
        "admit_s": 0.0,
        "first_token_s": math.nan,
        "finish_s": math.nan,
        "status": "ok",
        "output_tokens": 2,
    }
    # An ok request generated what it asked for unless a row says otherwise.
    out = [
        base | {"request_id": i, "generated_tokens": r.get("output_tokens", 2)} | r
        for i, r in enumerate(rows)
    ]
    return table(out, REQUEST_COLUMNS)


def sample(
    time_s: float,
    ratio: float,
    *,
    uptime_s: float | None = None,
    up: bool = True,
    trigger: str = "periodic",
    replica: int = 0,
    shares: tuple[float, float, float, float] = (0.4, 0.1, 0.1, 0.4),
) -> dict[str, Any]:
    return {
        "time_s": time_s,
        "replica": replica,
        "trigger": trigger,
        "up": up,
        "uptime_s": time_s if uptime_s is None else uptime_s,
        "capacity_tokens": 1000,
        "used_tokens": 400,
        "reserved_unused_tokens": 200,
        "shared_tokens": 0,
        "free_tokens": 400,
        "cached_free_tokens": 0,
        "largest_free_extent_tokens": 0 if math.isnan(ratio) else int(400 * ratio),
        "free_extent_count": 3,
        "largest_contiguous_free_block_ratio": ratio,
        "share_token_states": shares[0],
        "share_reservation": shares[1],
        "share_internal_fragmentation": shares[2],
        "share_external_fragmentation_free": shares[3],
        "running_requests": 1,
        "running_seqs": 1,
        "waiting_requests": 0,
        "preemptions_total": 0,
    }


def samples_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return table(rows, SAMPLE_COLUMNS)


def event(
    time_s: float, kind: str, free_share: float, cause: str = "fragmentation", replica: int = 0
) -> dict[str, Any]:
    return {
        "time_s": time_s,
        "replica": replica,
        "kind": kind,
        "request_id": 1,
        "need_tokens": 100,
        "free_tokens": int(1000 * free_share),
        "largest_free_extent_tokens": 50,
        "free_share": free_share,
        "cause": cause,
        "uptime_s": time_s,
        "detail": "",
    }


def events_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return table(rows, EVENT_COLUMNS)


NO_SAMPLES = samples_frame([])
NO_EVENTS = events_frame([])


def alert_names(summary: RunStats) -> list[str]:
    return [a.alert for a in summary.alerts]


def json_of(s: RunStats) -> dict[str, Any]:
    """The sections as the summary writes them."""
    sections = ("requests", "throughput", "latency_s", "failures", "memory", "prefix_cache")
    out: dict[str, Any] = {name: getattr(s, name).to_json_dict() for name in sections}
    return out | {"span_s": s.span_s, "alerts": [a.to_json_dict() for a in s.alerts]}


# -- latency and throughput -----------------------------------------------------------------


def test_latency_percentiles_count_only_served_requests() -> None:
    ttfts = [0.1 * (i + 1) for i in range(10)]  # 0.1 .. 1.0
    rows: list[dict[str, Any]] = [
        {"arrival_s": float(i), "first_token_s": i + t, "finish_s": i + t + 0.5, "output_tokens": 6}
        for i, t in enumerate(ttfts)
    ]
    rows.append({"arrival_s": 3.0, "status": "rejected-capacity", "finish_s": 3.0})
    s = summarize(requests_frame(rows), NO_SAMPLES, NO_EVENTS, end_s=20.0)
    ttft = s.latency_s.ttft
    assert ttft.p50 == pytest.approx(np.percentile(ttfts, 50))
    assert ttft.p90 == pytest.approx(np.percentile(ttfts, 90))
    assert ttft.p99 == pytest.approx(np.percentile(ttfts, 99))
    assert ttft.mean == pytest.approx(0.55)
    assert s.latency_s.tpot.p50 == pytest.approx(0.5 / 5)  # (finish - first) / 5
    assert s.latency_s.e2e.p50 == pytest.approx(0.55 + 0.5)
    want = {"total": 11, "by_status": {"ok": 10, "rejected-capacity": 1}}
    assert s.requests.to_json_dict() == want
    assert s.span_s == pytest.approx(20.0)
    assert s.throughput.requests_per_s == pytest.approx(10 / 20)
    assert s.throughput.output_tokens_per_s == pytest.approx(60 / 20)


def test_one_token_outputs_have_no_tpot_and_samples_count_in_throughput() -> None:
    rows = [
        {"arrival_s": 0.0, "first_token_s": 0.1, "finish_s": 0.1, "output_tokens": 1},
        {
            "arrival_s": 1.0,
            "first_token_s": 1.1,
            "finish_s": 2.1,
            "output_tokens": 11,
            "num_seqs": 3,
        },
    ]
    s = summarize(requests_frame(rows), NO_SAMPLES, NO_EVENTS, end_s=4.0)
    assert s.latency_s.tpot.p50 == pytest.approx(0.1)
    assert s.throughput.output_tokens_per_s == pytest.approx((1 + 33) / 4.0)


def test_nothing_served_gives_missing_latencies_and_strict_json() -> None:
    rows = [{"arrival_s": 0.0, "status": "timed-out", "finish_s": 1.0}]
    s = summarize(requests_frame(rows), NO_SAMPLES, NO_EVENTS, end_s=1.0)
    want = {"p50": None, "p90": None, "p99": None, "mean": None}
    assert s.latency_s.ttft.to_json_dict() == want
    assert s.memory.waste_breakdown["token_states"] is None
    json.dumps(json_of(s), allow_nan=False)  # no NaN anywhere


def test_an_empty_run_summarises() -> None:
    s = summarize(requests_frame([]), NO_SAMPLES, NO_EVENTS, end_s=0.0)
    assert s.requests.total == 0 and s.alerts == []
    json.dumps(json_of(s), allow_nan=False)


# -- failures and the high-free-memory alert -------------------------------------------------


def test_failures_at_more_than_a_quarter_free_raise_the_fragmentation_alert() -> None:
    ev = events_frame(
        [
            event(1.0, "admission_failure", 0.25),  # exactly 25 %: not "more than"
            event(2.0, "growth_failure", 0.40, replica=2),
            event(3.0, "admission_failure", 0.10, cause="capacity"),
            event(4.0, "preemption", 0.60),  # not an allocation failure
            event(5.0, "restart", 0.90),
        ]
    )
    reqs = requests_frame([{"arrival_s": 0.0, "first_token_s": 0.1, "finish_s": 0.2}])
    s = summarize(reqs, NO_SAMPLES, ev, end_s=10.0)
    f = s.failures
    assert f.allocation_failures == 3
    assert f.by_cause == {"capacity": 1, "fragmentation": 2}
    assert f.at_high_free_memory == 1
    assert f.at_high_free_memory_by_cause == {"fragmentation": 1}  # a cut of the same
    assert f.allocation_failure_rate_at_high_free_memory == pytest.approx(1 / 10)
    assert f.preemptions == 1 and f.restarts == 1
    (alert,) = s.alerts
    assert alert.alert == "fragmentation_driven_allocation_failure"
    assert alert.severity == "high" and alert.matching_failures == 1
    assert alert.first_time_s == 2.0 and alert.replicas == [2]


def test_the_free_share_threshold_is_configurable() -> None:
    ev = events_frame([event(1.0, "admission_failure", 0.20)])
    reqs = requests_frame([{"arrival_s": 0.0}])
    assert alert_names(summarize(reqs, NO_SAMPLES, ev, end_s=2.0)) == []
    low = AlertThresholds(high_free_share=0.15)
    assert alert_names(summarize(reqs, NO_SAMPLES, ev, end_s=2.0, thresholds=low)) == [
        "fragmentation_driven_allocation_failure"
    ]


# -- the fragmentation ratio alerts -------------------------------------------------------------


def test_ratio_alerts_read_periodic_samples_of_live_replicas_only() -> None:
    ts = samples_frame(
        [
            sample(1.0, 0.9),
            sample(2.0, 0.55),  # medium only
            sample(3.0, 0.3, trigger="failure"),  # failure-time samples do not count
            sample(4.0, 0.2, up=False),  # a replica that is down does not count
            sample(5.0, math.nan),  # nothing free: never alerted on
            sample(6.0, 0.8),
        ]
    )
    reqs = requests_frame([{"arrival_s": 0.0}])
    s = summarize(reqs, ts, NO_EVENTS, end_s=10.0)
    assert alert_names(s) == ["high_fragmentation_approaching_threshold"]
    (alert,) = s.alerts
    assert alert.matching_samples == 1 and alert.first_time_s == 2.0
    ratio = s.memory.largest_contiguous_free_block_ratio
    assert ratio.min == pytest.approx(0.55)
    assert ratio.mean == pytest.approx((0.9 + 0.55 + 0.8) / 3)
    assert ratio.share_of_samples_below_alert == pytest.approx(1 / 3)

    severe = samples_frame([sample(1.0, 0.45), sample(2.0, 0.7)])
    s = summarize(reqs, severe, NO_EVENTS, end_s=10.0)
    assert alert_names(s) == ["severe_fragmentation", "high_fragmentation_approaching_threshold"]
    assert s.alerts[0].severity == "high"


def test_waste_breakdown_averages_periodic_samples() -> None:
    ts = samples_frame(
        [
            sample(1.0, 1.0, shares=(0.2, 0.1, 0.1, 0.6)),
            sample(2.0, 1.0, shares=(0.4, 0.1, 0.3, 0.2)),
            sample(3.0, 1.0, trigger="failure", shares=(1.0, 0.0, 0.0, 0.0)),
        ]
    )
    s = summarize(requests_frame([{"arrival_s": 0.0}]), ts, NO_EVENTS, end_s=3.0)
    waste = s.memory.waste_breakdown
    assert waste == pytest.approx(
        {
            "token_states": 0.3,
            "reservation": 0.1,
            "internal_fragmentation": 0.2,
            "external_fragmentation_free": 0.4,
        }
    )
    assert sum(v or 0.0 for v in waste.values()) == pytest.approx(1.0)
    assert s.memory.mean_used_share == pytest.approx(0.3)


# -- the uptime correlation alert -----------------------------------------------------------------


def _uptime_series(ratios: list[float], restart_every: int | None = None) -> pd.DataFrame:
    rows = []
    for i, r in enumerate(ratios):
        uptime = float(i % restart_every if restart_every else i) * 60.0
        rows.append(sample(60.0 * i, r, uptime_s=uptime))
    return samples_frame(rows)


def test_fragmentation_rising_with_uptime_raises_the_correlation_alert() -> None:
    # The ratio falls from 1.0 to 0.3 over each 20-sample uptime cycle (three restarts).
    cycle = list(np.linspace(1.0, 0.3, 20))
    s = summarize(
        requests_frame([{"arrival_s": 0.0}]), _uptime_series(cycle * 3, 20), NO_EVENTS, end_s=3600.0
    )
    alerts = {a.alert: a for a in s.alerts}
    corr = alerts["node_uptime_vs_fragmentation_correlation"]
    assert s.memory.node_uptime_vs_fragmentation_correlation.spearman_rho == corr.spearman_rho
    assert corr.spearman_rho is not None and corr.spearman_rho > 0.9
    assert corr.p_value is not None and corr.p_value < 0.01
    assert corr.recent_fragmentation_ratio is not None and corr.recent_fragmentation_ratio > 0.4


def test_a_flat_series_raises_no_correlation_alert() -> None:
    flat = [0.95, 0.96] * 15  # no trend with uptime
    s = summarize(
        requests_frame([{"arrival_s": 0.0}]), _uptime_series(flat), NO_EVENTS, end_s=1800.0
    )
    assert "node_uptime_vs_fragmentation_correlation" not in alert_names(s)


def test_a_rising_series_below_the_alert_level_raises_no_correlation_alert() -> None:
    gentle = list(np.linspace(1.0, 0.8, 30))  # rising fragmentation, still healthy
    s = summarize(
        requests_frame([{"arrival_s": 0.0}]), _uptime_series(gentle), NO_EVENTS, end_s=1800.0
    )
    assert alert_names(s) == []


def test_too_few_samples_raise_no_correlation_alert() -> None:
    short = list(np.linspace(1.0, 0.2, 9))
    s = summarize(
        requests_frame([{"arrival_s": 0.0}]), _uptime_series(short), NO_EVENTS, end_s=600.0
    )
    assert "node_uptime_vs_fragmentation_correlation" not in alert_names(s)


# -- undefined statistics and the keys a run sets --------------------------------------------------


def test_an_undefined_statistic_is_none_and_a_defined_one_is_kept() -> None:
    assert [finite(v) for v in (math.nan, math.inf, -math.inf, None, 0.25)] == [
        None,
        None,
        None,
        None,
        0.25,
    ]


def test_a_share_no_sample_defines_is_null_in_the_written_sections() -> None:
    # every periodic sample lacks the reservation share (NaN): its mean is undefined
    nan_shares = (0.3, math.nan, 0.1, 0.6)
    ts = samples_frame([sample(1.0, 0.9, shares=nan_shares), sample(2.0, 0.8, shares=nan_shares)])
    waste = {"padding": 0.1, "window_reserve": math.nan}
    s = summarize(
        requests_frame([{"arrival_s": 0.0}]), ts, NO_EVENTS, end_s=3.0, kv_manager_waste=waste
    )
    memory = s.memory.to_json_dict()
    assert memory["waste_breakdown"]["reservation"] is None
    assert memory["waste_breakdown"]["token_states"] == pytest.approx(0.3)
    assert memory["kv_manager_waste"] == {"padding": 0.1, "window_reserve": None}
    json.dumps(json_of(s), allow_nan=False)


def test_optional_keys_are_written_only_when_the_run_has_them() -> None:
    reqs = requests_frame([{"arrival_s": 0.0}])
    plain = summarize(reqs, NO_SAMPLES, NO_EVENTS, end_s=1.0)
    assert "beyond_duration" not in plain.requests.to_json_dict()
    assert "kv_manager_waste" not in plain.memory.to_json_dict()
    assert "hit_tokens" not in plain.prefix_cache.to_json_dict()
    counts = {"queried_tokens": 10, "hit_tokens": 4}
    s = summarize(reqs, NO_SAMPLES, NO_EVENTS, end_s=1.0, beyond_duration=0, prefix_counts=counts)
    assert s.requests.to_json_dict()["beyond_duration"] == 0
    assert s.prefix_cache.to_json_dict().items() >= counts.items()
    assert "preempted_hit_tokens" not in s.prefix_cache.to_json_dict()


def test_firings_add_their_counts_and_nothing_else() -> None:
    ev = events_frame([event(2.0, "growth_failure", 0.40)])
    (entry,) = summarize(requests_frame([]), NO_SAMPLES, ev, end_s=3.0).alerts
    failure, uptime = "fragmentation_driven_allocation_failure", UPTIME_CORRELATION.name
    fired = with_firings([entry], {failure: (2, 1), uptime: (1, 0)}, AlertThresholds(), {})
    assert [a.to_json_dict() for a in fired] == [
        entry.to_json_dict() | {"condition_episodes": 2, "firings": 1},
        {
            "alert": uptime,
            "severity": UPTIME_CORRELATION.severity,
            "condition": condition(UPTIME_CORRELATION, AlertThresholds()),
            "condition_episodes": 1,
            "firings": 0,
        },
    ]
    assert entry.firings is None  # the entry given is left as it was
