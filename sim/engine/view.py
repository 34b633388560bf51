"""A read-only view of one replica at the current instant, for routers, restart policies
and autoscalers (the fleet's deciders read replicas only through it; they never mutate).

A view only reads: it never moves the replica forward. It shows the replica as of its
last state change or catch-up: request counts change only at the replica's decisions, so
they are current between the replica's decisions; memory fields inside a
fast-mode run of decode steps are current once the owner has brought the replica to now
(``Replica.observe``: the decode steps completed by then applied). The owner does that
where a decider reads memory (``sim.fleet.routeviews``: at each refresh, for a router
that reads memory; the fleet's policy readings and event rows), never the view.
Reads are O(1) counters. Free memory does not depend on growth the engine has deferred
(that only turns reserved slots into used ones), so no read tells the allocator anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policies.allocators.base import Allocator
    from sim.engine.replica import Replica


class ReplicaView:
    """What a decider may know of one replica now. See the module docstring."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        self._capacity_of: Allocator | None = None
        """The allocator ``_capacity_tokens`` was read from (a restart replaces it)."""
        self._capacity_tokens = 0

    # -- no scheduler state -------------------------------------------------------------
    @property
    def replica_id(self) -> int:
        return self._replica.replica_id

    @property
    def up(self) -> bool:
        """Serving and accepting requests (False while restarting: down for the model
        load; and in a fleet while warming up or draining)."""
        r = self._replica
        return r.up and r.accepting

    @property
    def uptime_s(self) -> float:
        """Seconds since the replica (re)started; 0 while down."""
        return self._replica.uptime_s

    @property
    def restarts(self) -> int:
        return self._replica.restarts

    # -- scheduler state, as of the replica's last decision or catch-up -------------------
    # Counts of requests change only at the replica's decisions (admission, preemption,
    # finishes: a planned run of decode steps ends at its first finish, and growth
    # inside it needs no decision), never inside a step or a run.
    @property
    def waiting_requests(self) -> int:
        """Requests queued (arrived, not admitted)."""
        return len(self._replica.sched.waiting)

    @property
    def running_requests(self) -> int:
        """Requests in the running batch (prefilling or decoding)."""
        return len(self._replica.sched.running)

    @property
    def outstanding_requests(self) -> int:
        """Waiting plus running: what "least outstanding requests" routing counts."""
        sched = self._replica.sched
        return len(sched.waiting) + len(sched.running)

    @property
    def in_flight_requests(self) -> int:
        """The router's own count of requests it dispatched to this replica that have not
        ended there (finished, refused, lost or handed back), as a router that counts what
        it routes keeps it (llm-d's inference scheduler, the Gateway API inference
        extension's flow control, BLIS): raised at each dispatch, lowered at each end,
        never scraped, so never stale (``sim.fleet.routeviews``). Dispatch and the
        replica's taking of a request are one instant in fragsim, so the count equals
        waiting plus running of the replica at every routing decision."""
        sched = self._replica.sched
        return len(sched.waiting) + len(sched.running)

    @property
    def running_seqs(self) -> int:
        return self._replica.sched.running_seqs

    @property
    def capacity_tokens(self) -> int:
        """KV slots in the replica's pool (whole blocks or pages): fixed for an
        allocator's life, so read once per allocator."""
        alloc = self._replica.allocator
        if alloc is not self._capacity_of:
            self._capacity_of = alloc
            self._capacity_tokens = alloc.stats().capacity_tokens
        return self._capacity_tokens

    @property
    def free_tokens(self) -> int:
        return self._replica.allocator.free_and_largest_tokens()[0]

    @property
    def largest_free_extent_tokens(self) -> int:
        """The largest free extent one request can use (all free memory when paged)."""
        return self._replica.allocator.free_and_largest_tokens()[1]

    @property
    def kv_usage(self) -> float:
        """Share of the KV pool owned by requests (1 - free / capacity), in [0, 1]."""
        return 1.0 - self._replica.allocator.free_and_largest_tokens()[0] / self.capacity_tokens
