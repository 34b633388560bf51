"""What drives time in a fast-mode fleet: one loop, the fleet's only SimPy process on the
request path. It keeps three sources of work in time order and runs each item at its
instant, setting the fleet's clock (``Fleet.clock``) there:

1. arrivals (the trace, routed by the router) and client retries (pinned or re-routed),
   kept in :class:`Retries`;
2. SimPy events of the slow processes: samples, restart and autoscale ticks, lifecycle
   timers, the script -- the loop yields to the next one (``env.peek()``) when nothing of
   its own comes first, so they run at their own times with the clock there;
3. the replicas' next decisions (``sim.engine.driven.Agenda``): each replica is brought
   further only then, or when something reads it (a router's signal, a sample, a policy:
   ``observe`` at the clock).

So a request costs its routing and its replica's decisions, no SimPy event: SimPy
events scale with samples, policy ticks and node lifecycles, not with requests.

Order at one instant (as exact mode's): arrivals and retries first -- between the two,
the one whose timer would have been set first (an arrival's is set at the previous
distinct arrival time, a retry's at the failure it answers; on equal set times the
arrival); then SimPy events; then replicas' decisions, in the order they were
scheduled. A decision that changes a replica's life (``needs_env_time``) runs at
``env.now``: the loop first lets SimPy reach that instant.

A decision never calls back into the fleet: it returns what it made
(``sim.engine.driven.Decision``: client retries, a restart's boundary), and the loop has
the fleet apply it (``Fleet.apply``) before the next item.
"""

# fragsim: compiled
from __future__ import annotations

import heapq
import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from sim.engine.batch import Group
from sim.engine.simpy_adapter import horizon_s, queue_of

if TYPE_CHECKING:
    from sim.fleet.fleet import Fleet

ARRIVAL_CHUNK = 65_536
"""Requests made into Groups at a time as their arrivals come."""


class Retries:
    """Client retries due: a heap of ``(due time, time set, tie, group, replica id)``
    (replica id -1: re-routed; else pinned to that replica while it takes traffic)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, float, int, Group, int]] = []
        self._tie = 0

    def add(self, due_s: float, set_s: float, g: Group, replica_id: int) -> None:
        heapq.heappush(self.heap, (due_s, set_s, self._tie, g, replica_id))
        self._tie += 1


def drive(fleet: Fleet) -> Generator[simpy.Event, Any, None]:
    """The loop (module docstring); ends when no arrival, retry or decision is left and
    nothing else is scheduled."""
    env, clock, agenda, retries = fleet.env, fleet.clock, fleet.agenda, fleet.retries.heap
    columns, records = fleet.columns, fleet.records
    queue = queue_of(env)
    n = len(columns)
    i = 0  # the next arrival's row
    chunk: list[Group] = []
    chunk_start = 0
    arrival_set_s = float(env.now)
    """When the next arrival's timer would have been set: the last arrival's time (an
    arrival at that same time shares its timer: it comes before any retry)."""
    last_a = -math.inf
    synced_at_s = -math.inf
    while True:
        if i < n and i - chunk_start >= len(chunk):
            chunk_start = i
            chunk = columns.groups(i, min(n, i + ARRIVAL_CHUNK))
            for g in chunk:
                records.start(g)
        a = chunk[i - chunk_start].arrival_s if i < n else math.inf
        r = retries[0][0] if retries else math.inf
        retry_first = r < a or (r == a < math.inf and a != last_a and retries[0][1] < arrival_set_s)
        u = r if retry_first else a  # the next arrival or retry
        d = agenda.next_s()
        h = horizon_s(queue)
        if u <= d and u < math.inf:
            if h < u:
                clock.now_s = h
                yield env.timeout(h - env.now)
                continue
            clock.now_s = u
            if retry_first:
                entry = heapq.heappop(retries)
                fleet.retry_now(entry[3], entry[4])
            else:
                arrival_set_s = last_a = a
                fleet.first_replica[i] = fleet.route(chunk[i - chunk_start], math.inf, "routed")
                i += 1
            continue
        if d < math.inf:
            if h <= d:
                clock.now_s = h
                yield env.timeout(h - env.now)
                continue
            driven = agenda.pop()
            clock.now_s = d
            if driven.needs_env_time and env.now < d and synced_at_s != d:
                synced_at_s = d
                agenda.push(d, driven)
                yield env.timeout(d - env.now)
                continue
            decision = driven.decide(min(u, agenda.next_s(), horizon_s(queue)))
            if decision is not None:
                fleet.apply(driven, decision)
            continue
        if h == math.inf:
            return
        clock.now_s = h
        yield env.timeout(h - env.now)
