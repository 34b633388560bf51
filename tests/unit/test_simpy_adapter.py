"""The SimPy 4 behaviour ``sim.engine.simpy_adapter`` relies on, pinned: if a SimPy
release changes any of it, these fail before the engine silently misorders events."""

from __future__ import annotations

import math

import pytest
import simpy
from simpy.events import NORMAL, URGENT

from sim.engine.simpy_adapter import (
    LATE,
    Call,
    due_now,
    events_processed,
    horizon_s,
    live_horizon_s,
    mark_succeeded,
    process_in_place,
    queue_of,
    schedule_at,
    schedule_succeeded,
)


def test_simpy_is_version_4() -> None:
    assert simpy.__version__.split(".")[0] == "4"


def test_the_queue_is_one_heap_of_time_priority_id_event_and_peek_reads_its_head() -> None:
    env = simpy.Environment()
    queue = queue_of(env)
    assert queue == [] and horizon_s(queue) == math.inf == env.peek()
    later = env.timeout(2.0)
    sooner = env.timeout(1.0)
    assert queue_of(env) is queue  # the same list for the environment's life
    assert sorted(entry[3] for entry in queue if entry[3] is later) == [later]
    time_s, priority, _, event = queue[0]
    assert (time_s, priority, event) == (1.0, NORMAL, sooner)
    assert horizon_s(queue) == env.peek() == 1.0
    env.run()
    assert queue == [] and horizon_s(queue) == math.inf


def test_a_succeeded_event_scheduled_urgent_goes_before_ordinary_ones_at_its_time() -> None:
    env = simpy.Environment()
    log: list[str] = []
    ordinary = env.timeout(1.0)
    assert ordinary.callbacks is not None
    ordinary.callbacks.append(lambda _: log.append("normal"))
    urgent = simpy.Event(env)
    schedule_succeeded(env, urgent, URGENT, 1.0)
    assert urgent.triggered and urgent.ok and urgent.value is None
    assert urgent.callbacks is not None
    urgent.callbacks.append(lambda _: log.append("urgent"))
    env.run()
    assert log == ["urgent", "normal"]


def test_an_event_processed_in_place_resumes_its_waiter_at_once() -> None:
    env = simpy.Environment()
    wake = simpy.Event(env)
    log: list[float] = []

    def sleeper() -> simpy.events.ProcessGenerator:
        yield wake
        log.append(env.now)

    process = env.process(sleeper())
    env.run()  # the process waits on ``wake``; nothing else is queued
    assert not due_now(env)
    process_in_place(wake)
    assert wake.processed and log == [0.0]  # resumed inside the call, no step taken
    assert [entry[3] for entry in queue_of(env)] == [process]  # only its end is queued


def test_marked_succeeded_is_what_succeed_sets() -> None:
    env = simpy.Environment()
    a, b = simpy.Event(env), simpy.Event(env)
    a.succeed()
    mark_succeeded(b)
    assert (a.triggered, a.ok, a.value) == (b.triggered, b.ok, b.value) == (True, True, None)


def test_due_now_and_the_event_counter() -> None:
    env = simpy.Environment()
    env.timeout(0.0)
    assert due_now(env)
    env.run()
    assert not due_now(env)
    env.timeout(5.0)
    env.run()
    assert events_processed(env) == 2


def test_an_event_scheduled_at_a_time_is_processed_at_that_very_float() -> None:
    env = simpy.Environment()
    env.run(until=0.1)
    seen: list[float] = []
    Call(env, 0.7, NORMAL, lambda: seen.append(env.now))
    env.run()
    assert seen == [0.7]
    with pytest.raises(AssertionError, match="in the past"):
        Call(env, 0.5, NORMAL, lambda: None)


def test_at_one_instant_urgent_then_normal_then_late_each_in_the_order_made() -> None:
    env = simpy.Environment()
    log: list[str] = []
    for name, priority in [("late1", LATE), ("normal1", NORMAL), ("urgent1", URGENT)]:
        Call(env, 1.0, priority, lambda name=name: log.append(name))
    timer = env.timeout(1.0)  # an ordinary timeout is NORMAL, ordered by when it was made
    assert timer.callbacks is not None
    timer.callbacks.append(lambda _: log.append("timeout"))
    for name, priority in [("late2", LATE), ("normal2", NORMAL), ("urgent2", URGENT)]:
        Call(env, 1.0, priority, lambda name=name: log.append(name))
    env.run()
    assert log == ["urgent1", "urgent2", "normal1", "timeout", "normal2", "late1", "late2"]


def test_a_cancelled_call_does_nothing_and_the_live_horizon_skips_it() -> None:
    env = simpy.Environment()
    log: list[float] = []
    stale = Call(env, 1.0, LATE, lambda: log.append(1.0))
    Call(env, 2.0, LATE, lambda: log.append(2.0))
    stale.cancel()
    queue = queue_of(env)
    assert horizon_s(queue) == 1.0  # still queued
    assert live_horizon_s(queue) == 2.0 and len(queue) == 1  # popped, never processed
    assert live_horizon_s(queue) == 2.0
    cancelled_later = Call(env, 3.0, NORMAL, lambda: log.append(3.0))
    cancelled_later.cancel()
    env.run()  # processed, it does nothing
    assert log == [2.0] and live_horizon_s(queue) == math.inf
    assert events_processed(env) == 3


def test_a_plain_event_without_callbacks_at_the_head_is_not_skipped() -> None:
    env = simpy.Environment()
    schedule_at(env, simpy.Event(env), NORMAL, 1.0)
    assert live_horizon_s(queue_of(env)) == 1.0


def test_calls_after_a_call_run_in_place_in_heap_order_each_at_its_own_time() -> None:
    env = simpy.Environment()
    log: list[tuple[str, float]] = []
    steps = 0
    step = env.step

    def counted_step() -> None:
        nonlocal steps
        steps += 1
        step()

    env.step = counted_step  # type: ignore[method-assign]
    Call(env, 1.0, NORMAL, lambda: log.append(("a", env.now)))
    Call(env, 1.5, LATE, lambda: log.append(("b", env.now)))
    timer = env.timeout(2.0)  # another event: the chain hands back to step before it
    assert timer.callbacks is not None
    timer.callbacks.append(lambda _: log.append(("timeout", env.now)))
    Call(env, 2.0, NORMAL, lambda: log.append(("c", env.now)))  # after the timeout (made later)
    Call(env, 2.0, URGENT, lambda: log.append(("d", env.now)))  # before it (URGENT)
    env.run()
    assert log == [("a", 1.0), ("b", 1.5), ("d", 2.0), ("timeout", 2.0), ("c", 2.0)]
    assert steps == 4  # a (b and d in place), the timeout, c, and the empty heap's
