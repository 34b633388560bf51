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
* ``Environment.schedule`` puts an event at ``now + delay``, which is not always the
  float asked for (``now + (t - now) != t`` for some ``t``): :func:`schedule_at` pushes
  ``(time, priority, next event id, event)`` on the heap itself, so an event is
  processed at exactly the instant it is due (:class:`Call`: a fleet's arrivals, client
  retries and replicas' decisions). Priorities are plain ints compared in the heap's
  keys: :data:`LATE` (2) is processed after every ``NORMAL`` (1) event at its time.
* ``Environment.step`` pops the heap's head, sets ``_now`` to its time, takes its
  ``callbacks`` (setting them to None) and calls each with the event, then raises if
  the event failed (``_ok`` false): an event needs no more than these, and a
  :class:`Call` that ``step`` runs does the same for the calls right after it in the
  heap, in the heap's order, handing back to ``step`` at the first other event. A
  cancelled :class:`Call` left in the heap is popped unprocessed by
  :func:`live_horizon_s` when it is the head (it would do nothing when processed).
* ``Environment._now`` is the current time, which ``step`` sets to the popped event's
  and the ``now`` property returns: :func:`now_of` reads it without the property's
  Python call, a :class:`Call` that runs the calls after it in place sets it as
  ``step`` would, and :class:`Call` checks it is not scheduled in the past.
* ``Environment._eid`` counts the events ever scheduled: the benchmarks divide it by the
  requests (:func:`events_processed`: calls run in place count).
* ``Environment._queue.clear()`` drops the pending events of a finished run, whose
  suspended generators hold the environment (:func:`drop_pending`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import EventPriority

Queue = list[tuple[float, EventPriority, int, Any]]
"""SimPy 4's event heap: ``(time, priority, event id, event)`` entries (a ``simpy.Event``
or a :class:`Call`)."""


LATE = EventPriority(2)
"""A priority processed after every ``URGENT`` and ``NORMAL`` event at its time (a fleet's
replicas decide after everything else at an instant)."""


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


def live_horizon_s(queue: Queue) -> float:
    """When the next event that will do anything is (inf: none): :func:`horizon_s`, after
    popping cancelled :class:`Call` events off the head (processed, they would do
    nothing; popped here, they neither lower the horizon nor cost a step)."""
    while queue:
        entry = queue[0]
        event = entry[3]
        if type(event) is Call and event.fn is None:
            heapq.heappop(queue)
            continue
        return entry[0]
    return math.inf


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


def schedule_at(
    env: simpy.Environment, event: simpy.Event, priority: EventPriority, time_s: float
) -> None:
    """``event`` triggered now and processed at exactly ``time_s`` (not before
    ``env.now``) at ``priority``, after the events already queued with the same time and
    priority: ``Environment.schedule`` without rounding ``time_s`` through a delay."""
    assert time_s >= env.now, "an event scheduled in the past"
    mark_succeeded(event)
    heapq.heappush(env._queue, (time_s, priority, next(env._eid), event))


class Call:
    """``fn()`` at exactly ``time_s`` (as :func:`schedule_at` puts an event, at
    ``priority``) unless :meth:`cancel` is called first: one heap entry and one call, no
    process. Among entries of one time and priority, calls run in the order they were
    made (or, given an ``eid`` from :func:`reserve_eid`, in the place of that id). Not a
    ``simpy.Event``: ``Environment.step`` reads no more of an event than its
    ``callbacks`` (iterated, then set to None) and ``_ok`` (the module docstring), so a
    plain class of four fields does, several times cheaper to make (compiled, it has no
    ``__dict__``). Its ``callbacks`` are one shared tuple (:func:`_fire` reads the event
    it is given): nothing may add to them."""

    def __init__(
        self,
        env: simpy.Environment,
        time_s: float,
        priority: EventPriority,
        fn: Callable[[], None],
        eid: int = -1,
    ) -> None:
        assert time_s >= env._now, "an event scheduled in the past"
        self.env = env
        self.fn: Callable[[], None] | None = fn
        self.callbacks: tuple[Callable[[Call], None], ...] | None = _FIRE
        self._ok = True
        if eid < 0:
            eid = next(env._eid)
        queue: Queue = env._queue
        heapq.heappush(queue, (time_s, priority, eid, self))

    def cancel(self) -> None:
        """Do nothing when due (its entry stays in the heap until then, or until
        :func:`live_horizon_s` pops it)."""
        self.fn = None


def _fire(call: Call) -> None:
    """A :class:`Call`'s one callback (``Environment.step`` popped it): its ``fn``, unless
    cancelled; then, while the heap's next event is a Call too, that one is popped and
    run here, as ``step`` would (``env.now`` set to its time, its callbacks taken), so a
    run of calls costs no Python frame of SimPy's per call. Any other event at the head
    goes back to ``step``."""
    env = call.env
    queue: Queue = env._queue
    while True:
        fn = call.fn
        if fn is not None:
            call.fn = None
            fn()
        if not queue:
            return
        entry = queue[0]
        after = entry[3]
        if type(after) is not Call:
            return
        heapq.heappop(queue)
        env._now = entry[0]
        after.callbacks = None
        call = after


_FIRE: tuple[Callable[[Call], None], ...] = (_fire,)


def now_of(env: simpy.Environment) -> float:
    """``env.now`` as a float, without its Python property call (read several times
    per request from compiled code)."""
    return float(env._now)


def reserve_eid(env: simpy.Environment) -> int:
    """An event id taken now, for an event made later that must sort among events of its
    time and priority as if it had been made now (:class:`Call`'s ``eid``)."""
    eid: int = next(env._eid)
    return eid


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
