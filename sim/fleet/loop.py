"""The fast-mode fleet's request path on SimPy's loop, the run's one loop and one clock
(``env.now``): each item of work is one SimPy event at exactly its instant
(:class:`~sim.engine.simpy_adapter.Call`, scheduled at the float it is due, never
``now + delay``), so SimPy's heap keeps everything in time order:

1. arrivals (:class:`Arrivals`: one event per distinct arrival time, routing every
   request of that time; an arrival time before every live event is routed in place
   by the one before it, as its event would be the very next processed) and client retries (:meth:`sim.fleet.fleet.Fleet.apply`: one
   event each, pinned or re-routed), at ``URGENT`` priority;
2. the slow processes' events: samples, restart and autoscale ticks, lifecycle timers,
   the script (``NORMAL``);
3. the replicas' next decisions (``sim.engine.driven``: one event per replica at a time,
   ``LATE``); each replica is brought further only then, or when something reads it (a
   router's signal, a sample, a policy: ``observe`` at ``env.now``).

So SimPy's key ``(time, priority, event id)`` gives the order at one instant (as exact
mode's): arrivals and retries first -- between the two, the one whose event was made
first (an arrival's sorts as made when the previous distinct arrival time is processed,
before that instant's requests are routed; a retry's is made after the decision or
refusal it answers; so on equal times the arrival wins); then the slow processes'
events; then replicas' decisions, in the order they were scheduled. A request costs its
routing and its replica's decisions: about three SimPy events, most of them run in place
by the call before them (``sim.engine.simpy_adapter``; docs/layout.md measures them).

A decision never calls back into the fleet: it returns what it made
(``sim.engine.driven.Decision``: client retries, a restart's boundary) and its event has
the fleet apply it (``Fleet.apply``) after it, before the next event.
"""

# fragsim: compiled
from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import URGENT

from sim.engine.batch import Group
from sim.engine.simpy_adapter import Call, Queue, live_horizon_s, reserve_eid

if TYPE_CHECKING:
    from sim.fleet.fleet import Fleet

ARRIVAL_CHUNK = 65_536
"""Requests made into Groups at a time as their arrivals come."""


class Arrivals:
    """The trace's arrivals on SimPy: one ``URGENT`` event per distinct arrival time, at
    exactly that time, routing every request arriving then in trace order
    (``Fleet.route``). Requests are made into Groups a chunk at a time (only requests in
    flight, and the chunk's not yet arrived, are objects)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.env = fleet.env
        self.columns = fleet.columns
        self.records = fleet.records
        self.n = len(fleet.columns)
        self.i = 0
        """The next arrival's row."""
        self.chunk: list[Group] = []
        self.chunk_start = 0

    def process(self) -> Generator[simpy.Event, Any, None]:
        """The run's first process (its start is the first event at the start time):
        routes the requests arriving at the start now, then leaves the rest to events."""
        if self.i < self.n and self._next().arrival_s <= self.env.now:
            self._due()
        elif self.i < self.n:
            Call(self.env, self._next().arrival_s, URGENT, self._due)
        return
        yield  # a generator: SimPy runs it as a process

    def _next(self) -> Group:
        """The next arrival's group (its chunk made first when it is not yet)."""
        i = self.i
        if i - self.chunk_start >= len(self.chunk):
            self.chunk_start = i
            self.chunk = self.columns.groups(i, min(self.n, i + ARRIVAL_CHUNK))
            for g in self.chunk:
                self.records.start(g)
        return self.chunk[i - self.chunk_start]

    def _due(self) -> None:
        """The requests arriving now, routed; then the next arrival time's event, sorted
        as if made before they were routed (a client retry set now for that instant
        comes after it). When the next arrival time comes strictly before every live
        event in the heap, its event would be the very next one processed: its
        requests are routed here, in place (``env.now`` set to it, its event id taken
        as the event's would be), saving the event's trip through the heap."""
        env, fleet = self.env, self.fleet
        first = fleet.first_replica
        queue: Queue = env._queue
        eid = reserve_eid(env)
        g = self._next()
        now_s = g.arrival_s
        while True:
            first[self.i] = fleet.route(g, math.inf, "routed")
            self.i += 1
            if self.i >= self.n:
                return
            g = self._next()
            if g.arrival_s != now_s:
                if g.arrival_s >= live_horizon_s(queue):
                    break
                now_s = g.arrival_s
                env._now = now_s
                eid = reserve_eid(env)
        Call(env, g.arrival_s, URGENT, self._due, eid)
