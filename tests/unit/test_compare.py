"""sim.results.compare: "which fix pays" -- deltas against a baseline, the ranking rule
(dollars saved, ties by failures, unpriced runs last), verdict lines, and runs without
a price compared on what they have; sim.sweep.labels: readable labels with units."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from support.runfolder import stub_fleet, stub_summary

from sim.results.compare import DELTA_METRICS, compare_frame, delta_text, usd, with_deltas
from sim.results.summary_model import Summary
from sim.sweep.labels import mean_ci_cell, metric_label, param_label


def summary(
    name: str,
    cost_usd: float | None = 100.0,
    failures: int = 10,
    at_high_free: int = 5,
    ttft_p99_s: float | None = 1.0,
) -> Summary:
    """A run's summary with what compare_row reads set (no fleet: no price)."""
    none = {"p50": None, "p90": None, "p99": None, "mean": None}
    s: dict[str, Any] = stub_summary(
        scenario=name,
        requests={"total": 1000, "by_status": {"ok": 990, "failed-capacity": 10}},
        engine={"mode": "exact", "steps": 0, "wakeups": 0, "end_s": 3600.0},
        latency_s={"ttft": none | {"p99": ttft_p99_s}, "tpot": none, "e2e": none | {"p99": 4.0}},
    )
    s["failures"] |= {
        "allocation_failures": failures,
        "by_cause": {"fragmentation": failures // 2},
        "at_high_free_memory": at_high_free,
    }
    if cost_usd is not None:
        s["fleet"] = stub_fleet(
            [{"name": "a", "count": 4}],
            replicas={"initial": 4, "final": 4, "mean": 4.0, "peak": 6},
            replica_hours=cost_usd / 2.5,
            avoidable_replica_hours=cost_usd / 10,
            cost_usd=cost_usd,
            cost_per_million_output_tokens_usd=3.0,
        )
    return Summary.from_json_dict(s)


def deltas(*summaries: Summary, baseline: int = 0) -> pd.DataFrame:
    return with_deltas(compare_frame(summaries), [s.scenario for s in summaries], baseline)


def test_deltas_and_savings_against_the_first_run() -> None:
    frame = deltas(
        summary("base", 200.0, 40), summary("paged", 50.0, 4), summary("dear", 300.0, 40)
    )
    by = frame.set_index("run")
    assert by.loc["paged", "cost_usd_delta"] == -150.0
    assert by.loc["paged", "cost_usd_delta_pct"] == -75.0
    assert by.loc["paged", "cost_saved_usd"] == 150.0
    assert by.loc["paged", "allocation_failures_delta"] == -36
    assert by.loc["dear", "cost_saved_usd"] == -100.0
    assert by.loc["base", "cost_saved_usd"] == 0.0 and not math.copysign(1, 0.0) < 0
    assert set(frame["baseline"]) == {"base"}
    for metric in DELTA_METRICS:
        assert f"{metric}_delta" in frame and f"{metric}_delta_pct" in frame
    assert frame["run"].tolist() == ["base", "paged", "dear"]  # baseline, then by rank
    assert by["rank"].to_dict() == {"base": 2, "paged": 1, "dear": 3}
    assert (
        by.loc["paged", "verdict"]
        == "paged saves $150.00 (75.0 %) and 36 allocation failures vs base"
    )
    assert (
        by.loc["dear", "verdict"]
        == "dear costs $100.00 (50.0 %) more with as many allocation failures vs base"
    )


def test_a_named_baseline_comes_first_and_ranks_among_the_others() -> None:
    frame = deltas(summary("a", 100.0), summary("b", 80.0, 30), baseline=1)
    assert frame["run"].tolist() == ["b", "a"]
    assert (
        frame.loc[1, "verdict"]
        == "a costs $20.00 (25.0 %) more but avoids 20 allocation failures vs b"
    )


def test_ties_in_dollars_go_to_fewer_failures_then_fewer_at_high_free() -> None:
    frame = deltas(
        summary("base", 100.0, 10),
        summary("more", 90.0, 8, at_high_free=6),
        summary("fewer", 90.0, 8, at_high_free=1),
        summary("most", 90.0, 2),
    )
    assert frame["run"].tolist() == ["base", "most", "fewer", "more"]
    assert frame["rank"].tolist() == [4, 1, 2, 3]


def test_runs_without_savings_rank_last_and_compare_on_failures() -> None:
    frame = deltas(summary("single", None, 10), summary("fleet", 100.0, 50), summary("s2", None, 3))
    by = frame.set_index("run")
    assert math.isnan(by.loc["fleet", "cost_usd_delta"])  # no price on the baseline
    assert by["rank"].to_dict() == {"s2": 1, "single": 2, "fleet": 3}  # all ties: failures
    priced = deltas(summary("base", 100.0, 50), summary("single", None, 0), summary("dear", 500.0))
    assert priced["run"].tolist() == ["base", "dear", "single"]
    assert by.loc["s2", "verdict"] == "s2 avoids 7 allocation failures vs single"
    assert by.loc["fleet", "verdict"] == "fleet adds 40 allocation failures vs single"


def test_percent_of_a_zero_baseline_is_missing_but_zero_when_both_are_zero() -> None:
    frame = deltas(summary("a", 100.0, 0, 0, ttft_p99_s=None), summary("b", 100.0, 4, 0))
    b = frame.set_index("run").loc["b"]
    assert b["allocation_failures_delta"] == 4 and math.isnan(b["allocation_failures_delta_pct"])
    assert b["failures_at_high_free_delta_pct"] == 0.0
    assert math.isnan(b["ttft_p99_s_delta"])  # missing on one side
    assert b["verdict"] == "b costs the same but adds 4 allocation failures vs a"


def test_names_must_be_one_per_row_and_unique() -> None:
    frame = compare_frame([summary("a"), summary("a")])
    with pytest.raises(ValueError):
        with_deltas(frame, ["a", "a"])
    with pytest.raises(IndexError):
        with_deltas(frame, ["a", "b"], baseline=2)


def test_delta_text_and_dollars() -> None:
    assert delta_text("cost_usd", -78.25, -43.91) == "−78.2 (−43.9 %)"
    assert delta_text("allocation_failures", 12.0, math.nan) == "+12"
    assert delta_text("ttft_p99_s", 0.0, 0.0) == "0"
    assert delta_text("replica_hours", -0.001, -0.0007) == "0"  # too small to show
    assert delta_text("ttft_p99_s", math.nan, math.nan) == "—"
    assert usd(12.5) == "$12.50" and usd(12_345.6) == "$12,346"


def test_labels_carry_units() -> None:
    assert param_label("fleet.router.kind") == "router"
    assert param_label("workload.synth.arrival.rate_per_s") == "arrival rate (req/s)"
    assert param_label("fleet.restart.every_s") == "restart every (s)"
    assert param_label("allocator.block_size_tokens") == "allocator block size (tokens)"
    assert param_label("fleet.pools.1.usd_per_gpu_hour") == "pools usd per gpu hour"
    assert metric_label("cost_usd_mean") == "cost ($)"
    assert metric_label("queue_wait_s") == "queue wait (s)"


def test_a_mean_cell_has_its_half_interval_when_it_has_one() -> None:
    """The one formatter of the terminal's sweep summary and the sweep report."""
    nan = math.nan
    assert mean_ci_cell(104.0, 93.6, 114.4) == "104 ± 10.4"
    assert mean_ci_cell(1234.5, 1234.5, 1234.5) == "1,234 ± 0.00"
    assert mean_ci_cell(0.01234, nan, nan) == "0.0123"
    assert mean_ci_cell(nan, 1.0, 2.0) == "—"
