"""KV retention after a request finishes: the per-request draws of each kind
(``sim.scenario.retention``) and the scheduler's held allocations (freed at the first
step at or after their due time, forgotten by a restart)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.allocators import build_allocator

from sim.engine.batch import Group, SchedulerConfig
from sim.engine.scheduler import Scheduler
from sim.scenario.schema import ScenarioError, parse_scenario
from sim.simulate.columns import make_groups

STEP_S = 0.01


def run_until_idle(sched: Scheduler, now: float) -> float:
    """Step the scheduler until nothing runs; returns the time then."""
    while (step := sched.begin_step(now)) is not None:
        now += STEP_S
        sched.end_step(step, now)
    return now


def best_fit(capacity_tokens: int) -> Any:
    return build_allocator({"kind": "best_fit"}, capacity_tokens)


def test_a_retained_request_keeps_its_memory_until_its_due_time() -> None:
    sched = Scheduler(SchedulerConfig(), best_fit(10_000))
    g = Group(0, 0.0, 100, 3)
    g.retain_s = 5.0
    sched.submit(g, 0.0)
    end_s = run_until_idle(sched, 0.0)
    assert g.status == "ok" and g.finish_s == pytest.approx(end_s)
    held = sched.allocator.stats().used_tokens
    assert held == 102  # prompt + output - 1, still allocated
    assert sched.next_release_s() == pytest.approx(g.finish_s + 5.0)
    assert sched.begin_step(g.finish_s + 4.999) is None
    assert sched.allocator.stats().used_tokens == held
    assert sched.begin_step(g.finish_s + 5.0) is None
    assert sched.allocator.stats().used_tokens == 0
    assert sched.next_release_s() == math.inf


def test_retain_until_caps_the_retention_and_zero_frees_at_once() -> None:
    sched = Scheduler(SchedulerConfig(), best_fit(10_000))
    capped, plain = Group(0, 0.0, 50, 2), Group(1, 0.0, 60, 2)
    capped.retain_s, capped.retain_until_s = math.inf, 1.0
    sched.submit(capped, 0.0)
    sched.submit(plain, 0.0)
    run_until_idle(sched, 0.0)
    assert sched.allocator.stats().used_tokens == 51  # only the capped one is held
    assert sched.next_release_s() == 1.0


def test_a_leak_is_never_freed_but_a_restart_forgets_it() -> None:
    sched = Scheduler(SchedulerConfig(), best_fit(10_000))
    g = Group(0, 0.0, 100, 2)
    g.retain_s = math.inf
    sched.submit(g, 0.0)
    run_until_idle(sched, 0.0)
    assert sched.next_release_s() == math.inf
    assert sched.begin_step(1e9) is None
    assert sched.allocator.stats().used_tokens == 101
    sched.reset_allocator(best_fit(10_000))
    assert sched.allocator.stats().used_tokens == 0
    assert sched.next_release_s() == math.inf
    assert sched.begin_step(2e9) is None  # nothing left to free in the new allocator


def test_a_queued_request_waits_for_a_release_instead_of_being_refused() -> None:
    """Nothing runs but retained memory will be freed: the head that does not fit waits
    for it (without retention an idle pool that refuses means it never fits)."""
    sched = Scheduler(SchedulerConfig(on_admission_failure="queue"), best_fit(1_000))
    first, second = Group(0, 0.0, 700, 2), Group(1, 0.0, 700, 2)
    first.retain_s = 3.0
    sched.submit(first, 0.0)
    end_s = run_until_idle(sched, 0.0)
    sched.submit(second, end_s)
    assert sched.begin_step(end_s) is None  # refused: the retained 701 slots are held
    assert second.status == "unfinished" and list(sched.waiting) == [second]
    step = sched.begin_step(first.finish_s + 3.0)  # released, then admitted
    assert step is not None and second.admit_s == pytest.approx(first.finish_s + 3.0)


def test_an_idle_pool_holding_only_leaks_refuses_what_does_not_fit() -> None:
    sched = Scheduler(SchedulerConfig(on_admission_failure="queue"), best_fit(1_000))
    first, second = Group(0, 0.0, 700, 2), Group(1, 0.0, 700, 2)
    first.retain_s = math.inf
    sched.submit(first, 0.0)
    end_s = run_until_idle(sched, 0.0)
    sched.submit(second, end_s)
    assert sched.begin_step(end_s) is None
    assert second.status == "rejected-capacity" and not sched.waiting


# -- the draws -----------------------------------------------------------------------


def frame(n: int, sessions: list[int | None] | None = None) -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "arrival_s": np.arange(n, dtype=np.float64) * 10.0,
            "prompt_tokens": np.full(n, 100, dtype=np.int64),
            "output_tokens": np.full(n, 10, dtype=np.int64),
        }
    )
    if sessions is not None:
        df["session_id"] = pd.array(sessions, dtype="Int64")
    return df


def retention(block: dict[str, Any]) -> Any:
    return parse_scenario(
        {"workload": {"preset": "bimodal"}, "allocator": {"kind": "best_fit"}, "retention": block}
    ).retention


def test_session_ttl_holds_until_the_next_turn_or_the_ttl() -> None:
    df = frame(6, [7, 7, None, 8, 7, 8])
    groups = make_groups(df, retention({"kind": "session_ttl", "ttl_s": 30.0}))
    assert [g.retain_s for g in groups] == [30.0, 30.0, 0.0, 30.0, 30.0, 30.0]
    # Turn i of a session is freed at the arrival of turn i + 1 at the latest.
    assert [g.retain_until_s for g in groups] == [10.0, 40.0, math.inf, 50.0, math.inf, math.inf]


def test_heavy_tail_and_leak_are_seeded_and_keep_their_share() -> None:
    df = frame(20_000)
    block = {"kind": "heavy_tail", "fraction": 0.1, "alpha": 1.5, "scale_s": 60.0}
    a = [g.retain_s for g in make_groups(df, retention(block), seed=3)]
    b = [g.retain_s for g in make_groups(df, retention(block), seed=3)]
    c = [g.retain_s for g in make_groups(df, retention({**block, "seed": 1}), seed=3)]
    assert a == b and a != c
    kept = np.array([r for r in a if r > 0])
    assert 0.09 < len(kept) / len(a) < 0.11
    assert kept.min() >= 60.0
    leaked = [g.retain_s for g in make_groups(df, retention({"kind": "leak", "fraction": 0.01}))]
    assert set(leaked) == {0.0, math.inf}
    assert 0.007 < leaked.count(math.inf) / len(leaked) < 0.013
    plain = make_groups(df, retention({"kind": "none"}))
    assert all(g.retain_s == 0.0 and g.retain_until_s == math.inf for g in plain)


@pytest.mark.parametrize(
    "block",
    [
        {"kind": "forever"},
        {"kind": "session_ttl"},
        {"kind": "session_ttl", "ttl_s": -1.0},
        {"kind": "heavy_tail", "fraction": 1.5, "alpha": 1.0, "scale_s": 1.0},
        {"kind": "leak", "fraction": "0.1"},
        {"kind": "leak", "fraction": 0.1, "extra": 1},
    ],
)
def test_a_wrong_retention_block_is_refused(block: dict[str, Any]) -> None:
    with pytest.raises(ScenarioError, match="retention"):
        retention(block)


def test_session_ttl_without_sessions_warns() -> None:
    from sim.runner import run

    sc = parse_scenario(
        {
            "workload": {"preset": "bimodal"},
            "allocator": {"kind": "best_fit"},
            "retention": {"kind": "session_ttl", "ttl_s": 5.0},
        }
    )
    with pytest.warns(UserWarning, match="no session_id"):
        run(sc, frame(3))
