"""A read-only view of one replica at the current instant, for routers, restart policies
and autoscalers (the fleet's deciders read replicas only through it; they never mutate).

Reads are lazy: identity and lifecycle fields (``replica_id``, ``up``, ``uptime_s``)
touch no scheduler state; request counts bring only the queue up to now (fed requests
that have arrived are queued: ``Replica.observe_queue``); memory fields first bring the
replica up to now (``Replica.observe``: decode steps completed inside a fast-mode run
are applied too) and then read O(1) counters -- so a router that hashes or rotates costs
nothing, one that counts requests almost nothing, and one that reads KV usage one
observe per read.
Free memory does not depend on growth the engine has deferred (that only turns reserved
slots into used ones), so no read tells the allocator anything.
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

    # -- brought up to now first ------------------------------------------------------------
    # Counts of requests change only at the replica's decisions (admission, preemption,
    # finishes: a planned run of decode steps ends at its first finish, and growth
    # inside it needs no decision), never inside a step or a run: reading them needs
    # only the queue brought up to now (``Replica.observe_queue``), not the run.
    @property
    def waiting_requests(self) -> int:
        """Requests queued (arrived, not admitted)."""
        r = self._replica
        r.observe_queue()
        return len(r.sched.waiting)

    @property
    def running_requests(self) -> int:
        """Requests in the running batch (prefilling or decoding)."""
        r = self._replica
        r.observe_queue()
        return len(r.sched.running)

    @property
    def outstanding_requests(self) -> int:
        """Waiting plus running: what "least outstanding requests" routing counts."""
        r = self._replica
        r.observe_queue()
        sched = r.sched
        return len(sched.waiting) + len(sched.running)

    @property
    def running_seqs(self) -> int:
        r = self._replica
        r.observe_queue()
        return r.sched.running_seqs

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
        r = self._replica
        r.observe()
        return r.allocator.free_and_largest_tokens()[0]

    @property
    def largest_free_extent_tokens(self) -> int:
        """The largest free extent one request can use (all free memory when paged)."""
        r = self._replica
        r.observe()
        return r.allocator.free_and_largest_tokens()[1]

    @property
    def kv_usage(self) -> float:
        """Share of the KV pool owned by requests (1 - free / capacity), in [0, 1]."""
        r = self._replica
        r.observe()
        return 1.0 - r.allocator.free_and_largest_tokens()[0] / self.capacity_tokens
