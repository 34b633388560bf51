"""What a run records: periodic and failure-time samples of every replica's pool, the
allocation-failure / preemption / restart event log, and finished requests.

Definitions (DESIGN.md, the seeds):

* ``largest_contiguous_free_block_ratio`` = largest usable free extent / total free;
  missing (NaN) when nothing is free, never alerted on.
* Waste breakdown as shares of KV capacity: *token states* (slots holding tokens),
  *reservation* (reserved slots the request's own future tokens will fill), *internal
  fragmentation* (reserved slots it will never fill), *external fragmentation & free*
  (everything not reserved). The four add up to 1.
* A failure is *fragmentation* when total free >= the need but no usable extent is
  large enough, *capacity* otherwise (the allocator classifies it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from sim.engine.batch import Group, SchedEvent
from sim.results.frames import frame, request_frame

if TYPE_CHECKING:
    from sim.engine.replica import Replica, RestartMode

SAMPLE_COLUMNS = (
    "time_s",
    "replica",
    "trigger",
    "up",
    "uptime_s",
    "capacity_tokens",
    "used_tokens",
    "reserved_unused_tokens",
    "shared_tokens",
    "free_tokens",
    "cached_free_tokens",
    "largest_free_extent_tokens",
    "free_extent_count",
    "largest_contiguous_free_block_ratio",
    "share_token_states",
    "share_reservation",
    "share_internal_fragmentation",
    "share_external_fragmentation_free",
    "running_requests",
    "running_seqs",
    "waiting_requests",
    "preemptions_total",
)
EVENT_COLUMNS = (
    "time_s",
    "replica",
    "kind",
    "request_id",
    "need_tokens",
    "free_tokens",
    "largest_free_extent_tokens",
    "free_share",
    "cause",
    "uptime_s",
    "detail",
)


@dataclass
class Recorder:
    """Collects rows as the simulation runs; :meth:`frames` turns them into DataFrames.

    Implements the replica hooks (``on_event``, ``on_done``, ``on_restart``)."""

    samples: list[tuple[object, ...]] = field(default_factory=list)
    events: list[tuple[object, ...]] = field(default_factory=list)
    done: list[Group] = field(default_factory=list)
    """Ended requests, in the order they ended (unfinished ones appended at the end)."""
    done_replicas: list[int] = field(default_factory=list)
    """The replica each of ``done`` ended on (-1: unfinished)."""
    done_count: int = 0
    on_count: Callable[[int], None] | None = None
    """Called with the number of ended requests after each one ends."""
    last_finish_s: float = 0.0
    """When the most recently ended request ended (a replica's clock, which may be
    ahead of ``env.now``)."""

    # -- replica hooks --------------------------------------------------------------
    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        capacity = replica.allocator.stats().capacity_tokens
        self.events.append(
            (
                replica.now_s,
                replica.replica_id,
                event.kind,
                event.request_id,
                event.need_tokens,
                event.free_tokens,
                event.largest_free_extent_tokens,
                event.free_tokens / capacity,
                event.cause,
                replica.uptime_s,
                event.detail,
            )
        )
        if event.kind != "preemption":
            self.sample(replica, trigger="failure", pending_tokens=event.pending_tokens)

    def on_done(self, replica: Replica, group: Group) -> None:
        self.done_count += 1
        # Fast mode may report a request refused at its arrival after a later finish.
        self.last_finish_s = max(self.last_finish_s, group.finish_s)
        self.done.append(group)
        self.done_replicas.append(replica.replica_id)
        if self.on_count is not None:
            self.on_count(self.done_count)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        s = replica.allocator.stats()
        self.events.append(
            (
                replica.now_s,
                replica.replica_id,
                "restart",
                -1,
                0,
                s.free_tokens,
                s.largest_free_extent_tokens,
                s.free_tokens / s.capacity_tokens,
                "",
                replica.uptime_s,
                f"{mode} downtime_s={downtime_s:g}",
            )
        )

    # -- sampling ---------------------------------------------------------------------
    def sample(self, replica: Replica, trigger: str = "periodic", pending_tokens: int = 0) -> None:
        """Record the replica's pool and batch as of now. A failure sample is taken at
        the failure's event: ``pending_tokens`` is the growth the allocator had not been
        told of then (``SchedEvent.pending_tokens``)."""
        replica.observe()
        sched = replica.sched
        alloc = replica.allocator
        # Reservation vs internal fragmentation needs every sequence's reservation: done
        # on periodic samples (the time-weighted breakdown); failure samples record the
        # pool's signals only and leave the split missing. They do not tell the allocator
        # of deferred growth either (that is O(batch) allocator calls at every failure):
        # deferred growth only turns reserved slots into used ones, so it is added here.
        reservation: float = math.nan
        if trigger == "failure":
            s = alloc.stats()
            pending = pending_tokens
            if pending:
                s = s.with_growth_applied(pending)
        else:
            sched.sync_allocator()
            s = alloc.stats()
            reserved_to_fill = 0
            reserved_of = alloc.reserved_tokens
            for g in sched.running:
                final, held = g.final_tokens, g.held_tokens
                for sid in g.seq_ids:
                    reserved_to_fill += max(0, min(reserved_of(sid), final) - held)
            reservation = float(min(reserved_to_fill, s.reserved_unused_tokens))
        cap = s.capacity_tokens
        ratio = s.largest_contiguous_free_block_ratio
        self.samples.append(
            (
                replica.now_s,
                replica.replica_id,
                trigger,
                replica.up,
                replica.uptime_s,
                cap,
                s.used_tokens,
                s.reserved_unused_tokens,
                s.shared_tokens,
                s.free_tokens,
                s.cached_free_tokens,
                s.largest_free_extent_tokens,
                s.free_extent_count,
                math.nan if ratio is None else ratio,
                s.used_tokens / cap,
                reservation / cap,
                (s.reserved_unused_tokens - reservation) / cap,
                s.free_tokens / cap,
                len(sched.running),
                sched.running_seqs,
                len(sched.waiting),
                sched.preemptions_total,
            )
        )

    def finish(self, groups: list[Group]) -> None:
        """Close the run: requests still queued or running are recorded ``unfinished``."""
        for g in groups:
            if g.status == "unfinished":
                self.done.append(g)
                self.done_replicas.append(-1)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(requests, timeseries, events), requests sorted by request id."""
        requests = request_frame(self.done, self.done_replicas)
        return requests, frame(self.samples, SAMPLE_COLUMNS), frame(self.events, EVENT_COLUMNS)
