"""The SimPy 4 behaviour ``sim.engine.simpy_adapter`` relies on, pinned: if a SimPy
release changes any of it, these fail before the engine silently misorders events."""

from __future__ import annotations

import math

import simpy
from simpy.events import NORMAL, URGENT

from sim.engine.simpy_adapter import (
    due_now,
    events_processed,
    horizon_s,
    mark_succeeded,
    process_in_place,
    queue_of,
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
