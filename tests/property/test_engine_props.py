"""Engine invariants: fast mode = exact mode, unlimited memory never fails, memory is
conserved at every sample, Little's law, and an M/D/1 queue by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.allocators import (
    assert_covers_registry,
    config_id,
    registry_configs,
)
from support.scenarios import assert_samples_add_up, request_frame, scenario_data

from sim.runner import run
from sim.scenario.schema import parse_scenario


def trace(
    arrivals: list[float], prompts: list[int], outputs: list[int], samples: list[int] | None = None
) -> pd.DataFrame:
    return request_frame(np.sort(np.asarray(arrivals, dtype=float)), prompts, outputs, samples)


def scenario(allocator: dict[str, Any], capacity_tokens: int, **extra: Any) -> Any:
    return parse_scenario(scenario_data(allocator, capacity_tokens, name="prop", **extra))


ALLOCATORS = registry_configs({"kind": "static", "mode": "pow2"})


def test_every_registered_policy_is_covered() -> None:
    assert_covers_registry(ALLOCATORS)


requests = st.integers(min_value=2, max_value=40).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 60, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.integers(1, 3000), min_size=n, max_size=n),
        st.lists(st.integers(1, 400), min_size=n, max_size=n),
        st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=n, max_size=n),
    )
)


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=config_id)
@given(
    reqs=requests,
    capacity=st.sampled_from([6_000, 20_000, 200_000]),
    preemption=st.sampled_from(["recompute", "swap", "fail"]),
)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_mode_equals_exact_mode(
    allocator: dict[str, Any], reqs: Any, capacity: int, preemption: str
) -> None:
    df = trace(*reqs)
    results = {}
    for mode in ("fast", "exact"):
        sc = scenario(
            allocator,
            capacity,
            mode=mode,
            scheduler={"preemption": preemption, "max_num_seqs": 16, "retry_attempts": 1},
        )
        results[mode] = run(sc, df).requests
    fast, exact = results["fast"], results["exact"]
    assert list(fast["status"]) == list(exact["status"])
    assert list(fast["preemptions"]) == list(exact["preemptions"])
    for col in ("admit_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[col], exact[col], rtol=1e-9, atol=1e-9)


@given(reqs=requests)
@settings(max_examples=15, deadline=None)
def test_unlimited_memory_never_fails_or_preempts(reqs: Any) -> None:
    sc = scenario({"kind": "best_fit"}, 10_000_000)
    result = run(sc, trace(*reqs))
    assert set(result.requests["status"]) == {"ok"}
    assert result.summary.failures.allocation_failures == 0
    assert result.summary.failures.preemptions == 0


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=config_id)
def test_memory_is_conserved_at_every_sample(allocator: dict[str, Any]) -> None:
    rng = np.random.default_rng(3)
    n = 300
    df = trace(
        list(np.cumsum(rng.exponential(0.3, n))),
        list(rng.integers(10, 4000, n)),
        list(rng.integers(1, 300, n)),
    )
    ts = run(scenario(allocator, 30_000), df).timeseries
    assert_samples_add_up(ts)


def test_littles_law_on_a_long_steady_run() -> None:
    rng = np.random.default_rng(7)
    n = 4000
    df = trace(
        list(np.cumsum(rng.exponential(0.5, n))),
        list(rng.integers(50, 1500, n)),
        list(rng.integers(20, 300, n)),
    )
    result = run(scenario({"kind": "paged"}, 100_000, metrics={"sample_interval_s": 1.0}), df)
    req, ts = result.requests, result.timeseries
    ts = ts[ts["trigger"] == "periodic"]
    span = ts["time_s"].max() - ts["time_s"].min()
    in_system = (ts["running_requests"] + ts["waiting_requests"]).mean()
    lam = len(req) / span
    w = (req["finish_s"] - req["arrival_s"]).mean()
    assert in_system == pytest.approx(lam * w, rel=0.05)


def test_m_d_1_queue_matches_the_hand_calculation() -> None:
    """One sequence at a time, constant 10 ms steps, every request 10 tokens out: each
    takes D = 0.1 s (1 prefill step + 9 decode steps). Poisson arrivals at rho = 0.7:
    Pollaczek-Khinchine gives a mean wait of rho * D / (2 (1 - rho))."""
    rng = np.random.default_rng(11)
    n, d, rho = 20_000, 0.1, 0.7
    df = trace(list(np.cumsum(rng.exponential(d / rho, n))), [100] * n, [10] * n)
    sc = scenario(
        {"kind": "paged"},
        100_000,
        latency={"kind": "constant", "step_s": 0.01},
        scheduler={"max_num_seqs": 1},
        metrics={"sample_interval_s": 3600.0},
    )
    req = run(sc, df).requests
    service = req["finish_s"] - req["admit_s"]
    np.testing.assert_allclose(service, d, rtol=1e-9)
    wait = (req["admit_s"] - req["arrival_s"]).mean()
    assert wait == pytest.approx(rho * d / (2 * (1 - rho)), rel=0.08)


def test_m_d_c_batch_by_hand() -> None:
    """Four requests at once, two batch slots, 10 tokens each at 10 ms a step: two run
    in [0, 0.1], two in [0.1, 0.2]; TTFT is one step after admission."""
    df = trace([0.0, 0.0, 0.0, 0.0], [100] * 4, [10] * 4)
    sc = scenario(
        {"kind": "paged"},
        100_000,
        latency={"kind": "constant", "step_s": 0.01},
        scheduler={"max_num_seqs": 2},
    )
    req = run(sc, df).requests
    np.testing.assert_allclose(req["admit_s"], [0, 0, 0.1, 0.1], atol=1e-12)
    np.testing.assert_allclose(req["first_token_s"], [0.01, 0.01, 0.11, 0.11], atol=1e-12)
    np.testing.assert_allclose(req["finish_s"], [0.1, 0.1, 0.2, 0.2], atol=1e-12)
    assert math.isclose(run(sc, df).summary.latency_s.e2e.mean, 0.15)


def test_equal_arrival_times_after_a_rounded_wait_arrive_together() -> None:
    """1.1 + (5.88 - 1.1) is not 5.88 in floating point: exact mode's arrival process
    once woke just before 5.88, queued the first request, then waited 1e-15 s for the
    second, which missed the step (found by exploring the fast-vs-exact property)."""
    df = trace([1.1, 5.88, 5.88], [1, 1, 1], [1, 1, 1])
    admit = {}
    for mode in ("fast", "exact"):
        sc = scenario({"kind": "first_fit"}, 6_000, mode=mode)
        admit[mode] = run(sc, df).requests["admit_s"].to_numpy()
    np.testing.assert_allclose(admit["fast"], admit["exact"], rtol=1e-9, atol=1e-9)
    assert admit["exact"][1] == admit["exact"][2]
