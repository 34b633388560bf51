"""Replica stories: whole runs through ``sim.run.run`` with a constant-latency model, so
every time in the request, timeseries and event frames is hand-checkable.

Arrivals sit off the 0.01 s step grid (x.xx5) so no arrival ties with a step boundary;
ties are covered on their own with a binary-exact 0.25 s step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.scenarios import assert_samples_add_up

from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario

STEP_S = 0.01


def trace(rows: list[tuple[float, int, int]], **cols: list[Any]) -> pd.DataFrame:
    """A canonical request frame: (arrival_s, prompt_tokens, output_tokens) rows."""
    df = pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"])
    df.insert(0, "request_id", np.arange(len(df), dtype=np.int64))
    for name, values in cols.items():
        df[name] = values
    return df


def simulate(
    allocator: dict[str, Any],
    capacity_tokens: int,
    rows: list[tuple[float, int, int]],
    *,
    mode: str = "fast",
    step_s: float = STEP_S,
    max_seq_tokens: int = 4096,
    sample_interval_s: float = 1.0,
    cols: dict[str, list[Any]] | None = None,
    **extra: Any,
) -> RunResult:
    data: dict[str, Any] = {
        "name": "story",
        "workload": {"preset": "bimodal"},  # unused: the trace is passed in
        "hardware": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "kv_capacity_tokens": capacity_tokens,
            "max_seq_tokens": max_seq_tokens,
        },
        "allocator": allocator,
        "latency": {"kind": "constant", "step_s": step_s},
        "metrics": {"sample_interval_s": sample_interval_s},
        "mode": mode,
    }
    data.update(extra)
    return run(parse_scenario(data), trace(rows, **(cols or {})))


def both_modes(*args: Any, **kw: Any) -> RunResult:
    """Run fast and exact; assert the same per-request results; return the fast run."""
    fast = simulate(*args, mode="fast", **kw)
    exact = simulate(*args, mode="exact", **kw)
    f, x = fast.requests, exact.requests
    assert list(f["status"]) == list(x["status"])
    assert list(f["preemptions"]) == list(x["preemptions"])
    assert list(f["retries"]) == list(x["retries"])
    for col in ("admit_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(f[col], x[col], rtol=1e-9, atol=1e-9)
    assert list(fast.events["kind"]) == list(exact.events["kind"])
    return fast


PAGED = {"kind": "paged", "block_size_tokens": 16, "prefix_caching": False}


def rec(result: RunResult, request_id: int) -> Any:
    """One request's record (a row of the requests frame)."""
    return result.requests.set_index("request_id").loc[request_id]


# -- hand-checked times ---------------------------------------------------------------------


def test_one_request_ttft_is_one_step_and_it_finishes_after_output_steps() -> None:
    r = both_modes(PAGED, 100_000, [(0.005, 100, 50)])
    g = rec(r, 0)
    assert g["status"] == "ok" and g["admit_s"] == pytest.approx(0.005)
    assert g["first_token_s"] == pytest.approx(0.015)
    assert g["finish_s"] == pytest.approx(0.005 + 50 * STEP_S)
    assert g["peak_reserved_tokens"] == 16 * math.ceil((100 + 50 - 1) / 16)
    ttft = r.summary.latency_s.ttft
    assert ttft.p50 == pytest.approx(0.01)
    assert r.summary.latency_s.tpot.p50 == pytest.approx(STEP_S)


def test_a_later_arrival_joins_the_running_batch_at_the_next_step_boundary() -> None:
    # Continuous batching: request 1 does not wait for request 0 to finish.
    r = both_modes(PAGED, 100_000, [(0.005, 100, 100), (0.2525, 50, 10)])
    g = rec(r, 1)
    assert g["admit_s"] == pytest.approx(0.255)
    assert g["first_token_s"] == pytest.approx(0.265)
    assert g["finish_s"] == pytest.approx(0.355)
    assert rec(r, 0)["finish_s"] == pytest.approx(1.005)


def test_fast_mode_takes_far_fewer_wakeups_than_steps() -> None:
    r = both_modes(PAGED, 100_000, [(0.005, 100, 2000)])
    assert r.summary.engine.steps == 2000
    assert r.summary.engine.wakeups < 20


def test_preemption_and_failure_statuses_agree_in_both_modes() -> None:
    rows = [(0.005, 100, 100), (0.0051, 100, 100), (0.3335, 400, 5), (0.7775, 40, 30)]
    for preemption in ("recompute", "swap", "fail"):
        r = both_modes(PAGED, 320, rows, scheduler={"preemption": preemption})
        statuses = list(r.requests["status"])
        assert statuses[2] == "rejected-capacity"  # 25 blocks never fit in 20
        if preemption == "fail":
            assert statuses[0] == "failed-capacity"
        else:
            assert statuses[:2] == ["ok", "ok"] and rec(r, 1)["preemptions"] == 1
            assert r.summary.failures.preemptions >= 1


def test_reject_and_retry_in_both_modes() -> None:
    rows = [(0.005, 100, 200), (0.0075, 250, 5)]
    r = both_modes(
        PAGED,
        320,
        rows,
        scheduler={"on_admission_failure": "reject", "retry_attempts": 2, "retry_backoff_s": 0.503},
    )
    g = rec(r, 1)
    assert g["status"] == "rejected-capacity" and g["retries"] == 2
    fails = r.events[r.events["kind"] == "admission_failure"]
    assert list(fails["request_id"]) == [1, 1, 1]
    # Refused at 0.015; retried at +0.503 and +1.006, each seen at the next boundary.
    assert list(fails["time_s"]) == pytest.approx([0.015, 0.525, 1.535])
    assert r.summary.requests.by_status == {"ok": 1, "rejected-capacity": 1}


def test_queue_timeout_and_too_long_and_truncation() -> None:
    rows = [(0.005, 100, 200), (0.0075, 250, 5), (0.0095, 256, 5), (0.0105, 10, 500)]
    r = both_modes(
        PAGED,
        320,
        rows,
        max_seq_tokens=256,
        scheduler={"queue_timeout_s": 0.5, "head_of_line": False},
    )
    assert rec(r, 1)["status"] == "timed-out"
    assert rec(r, 1)["finish_s"] == pytest.approx(0.515)  # first boundary past 0.5075
    assert rec(r, 2)["status"] == "rejected-too-long"
    assert rec(r, 2)["finish_s"] == pytest.approx(0.0095)
    assert rec(r, 3)["status"] == "ok" and rec(r, 3)["generated_tokens"] == 246
    assert rec(r, 3)["output_tokens"] == 500  # as the trace said


# -- restarts -----------------------------------------------------------------------------------


def test_kill_restart_requeues_the_batch_and_resets_memory() -> None:
    r = both_modes(
        PAGED,
        100_000,
        [(0.005, 100, 150)],
        sample_interval_s=0.25,
        restart={"every_s": 1.0, "mode": "kill", "downtime_s": 0.5},
    )
    g = rec(r, 0)
    # Killed at the first boundary after 1.0 s (1.005 s) with 100 tokens out; back at
    # 1.505 s; the re-prefill emits token 101 at 1.515 s, 49 more steps follow.
    assert g["status"] == "ok" and g["preemptions"] == 0
    assert g["first_token_s"] == pytest.approx(0.015)
    assert g["finish_s"] == pytest.approx(1.515 + 49 * STEP_S)
    restarts = r.events[r.events["kind"] == "restart"]
    assert list(restarts["time_s"]) == pytest.approx([1.005])
    assert "kill" in restarts["detail"].iloc[0]
    assert r.summary.failures.restarts == 1
    ts: Any = r.timeseries[r.timeseries["trigger"] == "periodic"].set_index("time_s")
    # Down: fresh, empty pool and no uptime; back up: uptime counts from 1.505 s.
    assert not ts.loc[1.25, "up"] and ts.loc[1.25, "used_tokens"] == 0
    assert ts.loc[1.25, "free_tokens"] == ts.loc[1.25, "capacity_tokens"]
    assert ts.loc[1.25, "uptime_s"] == 0.0
    assert ts.loc[1.0, "uptime_s"] == pytest.approx(1.0)
    assert ts.loc[1.75, "uptime_s"] == pytest.approx(1.75 - 1.505)
    assert ts.loc[1.75, "used_tokens"] > 0


def test_drain_restart_finishes_the_batch_first_and_holds_new_arrivals() -> None:
    rows = [(0.005, 100, 150), (1.2005, 20, 10)]
    r = both_modes(
        PAGED,
        100_000,
        rows,
        sample_interval_s=0.25,
        restart={"every_s": 1.0, "mode": "drain", "downtime_s": 0.5},
    )
    first, second = rec(r, 0), rec(r, 1)
    assert first["status"] == "ok" and first["finish_s"] == pytest.approx(1.505)
    restarts = r.events[r.events["kind"] == "restart"]
    assert list(restarts["time_s"]) == pytest.approx([1.505])
    assert second["admit_s"] == pytest.approx(2.005)  # after the 0.5 s model load
    assert second["status"] == "ok"


def test_initial_uptime_brings_the_first_restart_forward() -> None:
    r = both_modes(
        PAGED,
        100_000,
        [(0.005, 100, 100)],
        initial_uptime_s=0.5,
        restart={"every_s": 1.0, "mode": "kill", "downtime_s": 0.1},
    )
    assert list(r.events.loc[r.events["kind"] == "restart", "time_s"]) == pytest.approx([0.505])
    assert rec(r, 0)["status"] == "ok"


# -- metrics -------------------------------------------------------------------------------------


def _checkerboard(**scheduler: Any) -> RunResult:
    """Static 100-slot spans over 300 slots; after requests 0 and 2 finish, request 3
    needs 149 contiguous slots with 200 free in two 100-slot holes."""
    rows = [(0.001, 99, 1), (0.001, 50, 50), (0.001, 99, 1), (0.0205, 149, 1)]
    return both_modes(
        {"kind": "static", "mode": "max", "max_tokens": 100},
        300,
        rows,
        sample_interval_s=0.1,
        scheduler=scheduler,
    )


def test_a_fragmentation_failure_at_high_free_memory_raises_the_alert() -> None:
    r = _checkerboard(on_admission_failure="reject")
    fail = r.events[r.events["kind"] == "admission_failure"].iloc[0]
    assert fail["cause"] == "fragmentation" and fail["request_id"] == 3
    assert fail["free_share"] == pytest.approx(200 / 300)
    assert rec(r, 3)["status"] == "rejected-fragmentation"
    # A failure-time sample is recorded with the ratio of that moment.
    at_fail = r.timeseries[r.timeseries["trigger"] == "failure"].iloc[0]
    assert at_fail["largest_contiguous_free_block_ratio"] == pytest.approx(0.5)
    alerts = {a.alert: a for a in r.summary.alerts}
    alert = alerts["fragmentation_driven_allocation_failure"]
    assert alert.severity == "high" and alert.matching_failures == 1
    assert r.summary.failures.by_cause == {"fragmentation": 1}
    assert r.summary.failures.at_high_free_memory == 1


def test_queued_fragmentation_waits_and_is_served() -> None:
    r = _checkerboard()
    assert rec(r, 3)["status"] == "ok"
    assert rec(r, 3)["admit_s"] == pytest.approx(rec(r, 1)["finish_s"])


@pytest.mark.parametrize(
    "allocator",
    [
        PAGED,
        {"kind": "best_fit"},
        {"kind": "static", "mode": "max", "max_tokens": 1024},
        {"kind": "paged", "block_size_tokens": 16, "prefix_caching": True},
    ],
    ids=lambda a: a["kind"] + ("-cache" if a.get("prefix_caching") else ""),
)
def test_waste_breakdown_shares_add_to_one(allocator: dict[str, Any]) -> None:
    rng = np.random.default_rng(7)
    n = 40
    rows = list(
        zip(
            np.sort(rng.uniform(0, 3, n)).tolist(),
            rng.integers(20, 600, n).tolist(),
            rng.integers(1, 200, n).tolist(),
            strict=True,
        )
    )
    hashes = [list(range(p // 16)) for _, p, _ in rows]
    r = simulate(
        allocator,
        12_000,
        rows,
        sample_interval_s=0.05,
        cols={"prefix_hashes": hashes, "num_samples": [1 + i % 3 for i in range(n)]},
    )
    assert_samples_add_up(r.timeseries)
    # Failure-time samples record the pool's signals only (the split may be missing).
    ts = r.timeseries[r.timeseries["trigger"] != "failure"]
    busy = ts[ts["running_requests"] > 0]
    assert (busy["share_token_states"] > 0).all()
    waste = r.summary.memory.waste_breakdown
    assert sum(waste.values()) == pytest.approx(1.0)


def test_static_max_reservation_is_mostly_internal_fragmentation() -> None:
    r = simulate(
        {"kind": "static", "mode": "max", "max_tokens": 1000},
        10_000,
        [(0.005, 50, 400)],
        sample_interval_s=0.1,
    )
    s = r.timeseries.set_index("time_s").loc[0.1]
    # At 0.1 s nine steps are done (9 tokens out) and the tenth has begun (its slot is
    # taken when it starts, as in exact mode): 50 + 9 slots hold tokens, 449 - 59 will
    # be filled, 1000 - 449 never are.
    assert s["share_token_states"] == pytest.approx(59 / 10_000)
    assert s["share_reservation"] == pytest.approx((449 - 59) / 10_000)
    assert s["share_internal_fragmentation"] == pytest.approx((1000 - 449) / 10_000)
    assert s["share_external_fragmentation_free"] == pytest.approx(9_000 / 10_000)


def test_the_ratio_is_one_for_paged_and_missing_when_nothing_is_free() -> None:
    r = simulate(PAGED, 320, [(0.0, 319, 2), (0.5, 100, 20)], sample_interval_s=0.005)
    ts = r.timeseries
    full = ts[ts["free_tokens"] == 0]
    assert len(full) >= 2 and full["largest_contiguous_free_block_ratio"].isna().all()
    some = ts[ts["free_tokens"] > 0]
    assert (some["largest_contiguous_free_block_ratio"] == 1.0).all()
    assert r.summary.memory.largest_contiguous_free_block_ratio.min == 1.0
    ratio_alerts = {"severe_fragmentation", "high_fragmentation_approaching_threshold"}
    assert not ratio_alerts & {a.alert for a in r.summary.alerts}


def test_parallel_sampling_shares_on_paged_and_copies_on_best_fit() -> None:
    rows = [(0.005, 100, 40)]
    paged = simulate(PAGED, 100_000, rows, cols={"num_samples": [3]}, sample_interval_s=0.1)
    fit = simulate(
        {"kind": "best_fit"}, 100_000, rows, cols={"num_samples": [3]}, sample_interval_s=0.1
    )
    p = paged.timeseries.set_index("time_s").loc[0.1]
    b = fit.timeseries.set_index("time_s").loc[0.1]
    assert p["running_seqs"] == b["running_seqs"] == 3
    assert p["shared_tokens"] > 0 and b["shared_tokens"] == 0
    assert p["used_tokens"] < b["used_tokens"]
    assert rec(paged, 0)["status"] == rec(fit, 0)["status"] == "ok"
    out = paged.summary.throughput.output_tokens_per_s
    assert out == pytest.approx(3 * 40 / (rec(paged, 0)["finish_s"] - 0.005))


def test_a_shared_prefix_is_cached_for_the_second_request() -> None:
    hashes = [list(range(1, 7)), list(range(1, 7))]
    r = simulate(
        {"kind": "paged", "block_size_tokens": 16},
        100_000,
        [(0.005, 100, 5), (1.005, 100, 5)],
        cols={"prefix_hashes": hashes},
    )
    assert list(r.requests["cached_tokens"]) == [0, 96]


# -- bugs -----------------------------------------------------------------------------------------


def test_an_arrival_on_a_step_boundary_is_admitted_there_in_both_modes() -> None:
    both_modes(PAGED, 100_000, [(0.0, 10, 20), (1.0, 10, 5)], step_s=0.25)


def test_a_timeout_that_passes_during_a_real_step_agrees_in_both_modes() -> None:
    # Request 1 (deadline 1.1 s) waits; request 2's arrival at 0.9 s ends the fast-mode
    # plan at 1.0 s, so the step [1.0, 1.25] that crosses the deadline is a real step.
    both_modes(
        PAGED,
        320,
        [(0.0, 200, 40), (0.1, 150, 5), (0.9, 150, 5)],
        step_s=0.25,
        scheduler={"queue_timeout_s": 1.0},
    )


def test_prefix_hashes_are_read_with_the_traces_block_size() -> None:
    hashes = [[11, 12, 13, 14], [11, 12, 13, 14]]
    r = simulate(
        {"kind": "paged", "block_size_tokens": 16},
        100_000,
        [(0.005, 2048, 4), (1.005, 2048, 4)],
        cols={"prefix_hashes": hashes, "prefix_block_tokens": [512, 512]},
    )
    assert rec(r, 1)["cached_tokens"] == 2047


MIXED_SCHEDULERS = [
    {
        "preemption": "recompute",
        "chunked_prefill": True,
        "max_num_batched_tokens": 512,
        "max_num_seqs": 8,
    },
    {"preemption": "swap", "head_of_line": False, "max_num_seqs": 16},
    {
        "preemption": "fail",
        "on_admission_failure": "reject",
        "retry_attempts": 2,
        "retry_backoff_s": 0.3037,
    },
]


# A deliberate sample (paged, a fit, buddy) of these mixed stories; every registered kind
# is run fast against exact by tests/property/test_fast_exact_more.py.
@pytest.mark.parametrize(
    "allocator", [PAGED, {"kind": "best_fit"}, {"kind": "buddy"}], ids=lambda a: a["kind"]
)
@pytest.mark.parametrize(
    "scheduler", MIXED_SCHEDULERS, ids=["recompute-chunked", "swap-skip", "fail-retry"]
)
def test_fast_and_exact_agree_with_restarts_forks_and_prefixes(
    allocator: dict[str, Any], scheduler: dict[str, Any]
) -> None:
    rng = np.random.default_rng(11)
    n = 30
    rows = list(
        zip(
            np.sort(rng.uniform(0, 6, n)).tolist(),
            rng.integers(1, 1500, n).tolist(),
            rng.integers(1, 250, n).tolist(),
            strict=True,
        )
    )
    cols = {
        "num_samples": rng.choice([1, 1, 2, 3], n).tolist(),
        "prefix_hashes": [list(range(int(p) // 16)) for _, p, _ in rows],
    }
    r = both_modes(
        allocator,
        6000,
        rows,
        cols=cols,
        scheduler=scheduler,
        restart={"every_s": 2.5, "mode": "kill", "downtime_s": 0.4},
    )
    assert r.summary.failures.restarts >= 1
    ended = r.requests[r.requests["status"] == "ok"]
    assert (ended["first_token_s"] >= ended["admit_s"]).all()
    assert (ended["finish_s"] >= ended["first_token_s"]).all()


@pytest.mark.parametrize("preemption", ["fail", "recompute"])
def test_a_drain_restart_happens_when_the_last_request_leaves_by_failure(preemption: str) -> None:
    # Request 0 can never grow past the 320-slot pool; the drain starts at 1.0 s and the
    # batch empties at 2.215 s when its growth is refused. Request 1 waits for the restart.
    r = simulate(
        PAGED,
        320,
        [(0.005, 100, 300), (1.5055, 10, 5)],
        duration_s=30.0,
        scheduler={"preemption": preemption},
        restart={"every_s": 1.0, "mode": "drain", "downtime_s": 0.1},
    )
    assert r.summary.failures.restarts == 1
    assert rec(r, 1)["status"] == "ok"


def test_compaction_moves_the_same_tokens_in_both_modes() -> None:
    both_modes(
        {"kind": "compaction"},
        20_000,
        [(0.105688, 511, 94), (0.166452, 580, 138), (0.375302, 2373, 247)],
        cols={"num_samples": [2, 1, 2]},
    )


def test_preemption_events_say_whether_the_victim_was_swapped_or_recomputed() -> None:
    rows = [(0.005, 300, 200), (0.006, 300, 200), (0.007, 300, 200)]
    for preemption in ("swap", "recompute"):
        r = simulate(PAGED, 800, rows, scheduler={"preemption": preemption})
        details = set(r.events.loc[r.events["kind"] == "preemption", "detail"])
        assert details == {preemption}


def test_the_summary_counts_prefix_cache_hits() -> None:
    hashes = [[1, 2, 3, 4], [1, 2, 3, 4], [9]]
    r = simulate(
        {"kind": "paged", "block_size_tokens": 16},
        100_000,
        [(0.005, 2048, 4), (1.005, 2048, 4), (2.005, 600, 4)],
        cols={"prefix_hashes": hashes, "prefix_block_tokens": [512, 512, 512]},
    )
    cache = r.summary.prefix_cache
    assert cache.requests_with_hits == 1
    assert cache.cached_prompt_tokens == rec(r, 1)["cached_tokens"] == 2047
    assert cache.share_of_prompt_tokens == pytest.approx(2047 / (2048 + 2048 + 600))


def test_outputs_say_what_the_trace_said() -> None:
    """A request asking for no output is served as a prefill that emits its one token, and
    one longer than the maximum sequence stops there: the record keeps what the trace
    said (output_tokens) beside what was generated (generated_tokens)."""
    rows = [(0.0005, 10, 0), (0.0015, 100, 500), (0.0025, 10, 3)]
    r = simulate(PAGED, 4096, rows, max_seq_tokens=256)
    assert list(r.requests["status"]) == ["ok", "ok", "ok"]
    assert list(r.requests["output_tokens"]) == [0, 500, 3]
    assert list(r.requests["generated_tokens"]) == [1, 156, 3]
    assert r.summary.throughput.output_tokens_per_s == pytest.approx(
        (1 + 156 + 3) / r.summary.span_s
    )
