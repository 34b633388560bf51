"""Every use the engine makes of SimPy's internals, in one place (SimPy 4.x; pinned by
``tests/unit/test_simpy_adapter.py``). Everything else uses SimPy's public API.

What is relied on, and why:

* ``Environment._queue`` is the event heap, a list of ``(time, priority, event id,
  event)``; its first entry is the next event. Fast mode compares a replica's own clock
  with the next event of any other process several times per request: reading
  ``queue[0][0]`` is what ``env.peek()`` does, without a Python call (:func:`queue_of`,
  :func:`horizon_s`).
* An event counts as triggered with a value once ``_ok`` and ``_value`` are set (what
  ``Event.succeed`` and ``Timeout.__init__`` set before scheduling it):
  :func:`schedule_succeeded` schedules one at a chosen priority (a timeout processed
  before ordinary events at its time), and :func:`process_in_place` runs an event's
  callbacks at once, as ``Environment.step`` would, when it would be the very next event
  processed anyway.
* ``Environment._eid`` counts the events ever scheduled: the benchmarks divide it by the
  requests (:func:`events_processed`).
* ``Environment._queue.clear()`` drops the pending events of a finished run, whose
  suspended generators hold the environment (:func:`drop_pending`).
"""

from __future__ import annotations

import math
from typing import Any

import simpy
from simpy.events import EventPriority

Queue = list[tuple[float, EventPriority, int, simpy.Event]]
"""SimPy 4's event heap: ``(time, priority, event id, event)`` entries."""


def queue_of(env: simpy.Environment) -> Queue:
    """The environment's event heap (the same list for the environment's life)."""
    queue: Queue = env._queue
    return queue


def horizon_s(queue: Queue) -> float:
    """``env.peek()`` on :func:`queue_of`'s heap: when the next event is (inf: none)."""
    return queue[0][0] if queue else math.inf


def due_now(env: simpy.Environment) -> bool:
    """Whether an event is queued at (or before) the current time."""
    queue = queue_of(env)
    return bool(queue) and queue[0][0] <= env.now


def mark_succeeded(event: simpy.Event, value: Any = None) -> None:
    """Set ``event`` triggered with ``value`` (what ``Event.succeed`` sets) without
    scheduling it."""
    event._ok = True
    event._value = value


def schedule_succeeded(
    env: simpy.Environment, event: simpy.Event, priority: EventPriority, delay_s: float
) -> None:
    """``event`` triggered now and processed ``delay_s`` from now at ``priority``
    (``simpy.events.URGENT`` or ``NORMAL``): a timeout of another priority."""
    mark_succeeded(event)
    env.schedule(event, priority, delay_s)


def process_in_place(event: simpy.Event) -> None:
    """Trigger ``event`` and run its callbacks now, as ``Environment.step`` would when
    it is processed (the caller knows it would be the very next event at this instant);
    saves the event's trip through the heap."""
    mark_succeeded(event)
    callbacks = event.callbacks
    event.callbacks = None  # type: ignore[assignment]
    assert callbacks is not None
    for callback in callbacks:
        callback(event)


def events_processed(env: simpy.Environment) -> int:
    """Events the environment processed: those scheduled (its event-id counter) minus
    those still queued (read after a run)."""
    scheduled: int = next(env._eid)
    return scheduled - len(env._queue)


def drop_pending(env: simpy.Environment) -> None:
    """Forget every pending event of a finished run (they hold suspended processes,
    which hold the environment: a reference cycle)."""
    env._queue.clear()
