"""KV inbound to a decode replica of a disaggregated fleet (``sim.fleet.disagg``): the
decode side's reservation of a request's blocks while its KV is transferred, as vLLM's
scheduler keeps a request whose KV comes from a remote prefill
(``RequestStatus.WAITING_FOR_REMOTE_KVS``: its blocks allocated when it is scheduled,
the connector reading into them, the request scheduled once ``finished_recving`` says so).

1. **Handed over** (:meth:`Inbound.add`, at the fleet's hand-off instant): the request
   is *pending*; the replica decides at its next step boundary, as for a submitted
   request.
2. **Reserved** at that boundary (``Scheduler.begin_step``, after the batch's growth,
   as vLLM schedules running requests before waiting ones; not in a step that had to
   preempt): the prompt is allocated, its other sequences forked and each sequence
   extended by the first decode step's slot -- the allocator calls a swap-in makes, in
   its order. The transfer starts then and lasts ``transfer_s`` (the decode side reads
   into blocks it holds); those blocks are this replica's from now on (its used memory,
   its fragmentation samples). A refusal is an ``admission_failure`` event and ends the
   request ``rejected-fragmentation`` / ``rejected-capacity`` (reported ``on_done``;
   ``InboundKV.refused``): its owner applies the refusal's fate.
3. **Joined** at the first step boundary at or after the transfer's end (a decision, as
   a release of retained memory is: ``next_ready_s``, which fast mode cuts its runs at):
   the request enters the batch and decodes in that very step (a swap-in with no stall),
   before any waiting request is admitted (its memory is held already). While the batch
   has no room for it (``max_num_seqs``, the step's token budget) it waits, holding its
   blocks, in the order its KV landed.

A replica going down loses its inbound (:meth:`Inbound.take_all`: blocks freed, records
``dropped``); its owner hands them on. Nothing here reads a free list: the allocator
answers.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

from sim.engine.admission import Admission, place_sequences
from sim.engine.batch import Group, Status, Step
from sim.engine.growth import Growth
from sim.engine.running import RunningBatch


@dataclass(slots=True, eq=False)
class InboundKV:
    """One request's KV on its way to this replica (the owner keeps it to read what
    happened: reserved, joined, refused or dropped). Compared by identity."""

    group: Group
    replica_id: int
    """The decode replica it was handed to."""
    transfer_s: float
    """The link's time for its KV, seconds (from its reservation)."""
    handed_s: float
    """When it was handed over."""
    reserved_s: float = math.nan
    """When its blocks were allocated (its transfer started); NaN: not (yet)."""
    joined_s: float = math.nan
    """When it joined the batch (its KV had landed); NaN: not (yet)."""
    refused: bool = False
    """Its reservation was refused (the request was reported ended ``rejected-*``)."""
    dropped: bool = False
    """The replica went down before it joined."""

    @property
    def settled(self) -> bool:
        """Whether it is past its reservation (reserved, refused or dropped)."""
        return self.refused or self.dropped or not math.isnan(self.reserved_s)


class Inbound:
    """The KV inbound to one scheduler's replica (the module docstring)."""

    def __init__(self, batch: RunningBatch, growth: Growth, admission: Admission) -> None:
        self.batch = batch
        self.growth = growth
        self.admission = admission
        self.pending: list[InboundKV] = []
        """Handed over, reserved at the next step boundary (in hand-off order)."""
        self.landing: list[tuple[float, int, InboundKV]] = []
        """Reserved, KV in flight: a heap of (ready time, tie, record)."""
        self.landed: deque[InboundKV] = deque()
        """KV here, waiting for room in the batch (in landing order)."""
        self._tie = 0

    @property
    def active(self) -> bool:
        return bool(self.pending or self.landing or self.landed)

    def add(self, kv: InboundKV) -> None:
        """A request's KV is handed over now (``kv.handed_s``): reserved at the next step
        boundary. Its target length is set as ``Scheduler.submit`` sets it."""
        g = kv.group
        config = self.batch.config
        g.target_tokens = max(1, min(g.output_tokens, config.max_seq_tokens - g.prompt_tokens))
        g.enqueued_s = kv.handed_s
        g.blocked = None
        self.pending.append(kv)

    def next_ready_s(self) -> float:
        """When the next transfer in flight ends (inf: none)."""
        return self.landing[0][0] if self.landing else math.inf

    def decision_due(self) -> bool:
        """Whether the next step boundary has work here: a reservation to make, or a
        landed request the batch has room for (fast mode's steadiness; in a steady run
        every running sequence decodes)."""
        if self.pending:
            return True
        if not self.landed:
            return False
        return self._fits(self.landed[0].group, self.batch.running_seqs)

    def step(self, now: float, step: Step) -> None:
        """At the boundary ``now`` (the step being composed): reserve what is pending,
        then join, in landing order, what has landed while the batch has room."""
        if self.pending:
            pending = self.pending
            self.pending = []
            for kv in pending:
                self._reserve(kv, now)
        landing = self.landing
        while landing and landing[0][0] <= now:
            self.landed.append(heapq.heappop(landing)[2])
        landed = self.landed
        while landed:
            g = landed[0].group
            decode_seqs = self.growth.load(step)[0] + step.prefill_tokens
            if not self._fits(g, decode_seqs):
                return
            self._join(landed.popleft(), now, step)

    def take_all(self) -> list[InboundKV]:
        """The replica goes down: every record not joined yet, in hand-off order of
        pending, then in reservation order; reserved blocks freed, each ``dropped``."""
        reserved = [kv for _, _, kv in sorted(self.landing)] + list(self.landed)
        reserved.sort(key=lambda kv: kv.reserved_s)
        free = self.batch.allocator.free
        for kv in reserved:
            for sid in kv.group.seq_ids:
                free(sid)
            kv.group.seq_ids = []
        out = self.pending + reserved
        self.pending = []
        self.landing = []
        self.landed = deque()
        for kv in out:
            kv.dropped = True
        return out

    # -- internals ------------------------------------------------------------------------
    def _fits(self, g: Group, decode_seqs: int) -> bool:
        config = self.batch.config
        return (
            self.batch.running_seqs + g.num_seqs <= config.max_num_seqs
            and decode_seqs + g.num_seqs <= config.max_num_batched_tokens
        )

    def _reserve(self, kv: InboundKV, now: float) -> None:
        """Allocate ``kv``'s blocks now (its transfer starts), or refuse it."""
        g = kv.group
        batch = self.batch
        config = batch.config
        if g.num_seqs > config.max_num_seqs or g.prompt_tokens >= config.max_seq_tokens:
            self._refuse(kv, now, "rejected-capacity")  # never fits this replica's batch
            return
        if not self._allocate(g):
            failure = batch.allocator.last_failure()
            assert failure is not None, "allocator refused without recording why"
            batch.report("admission_failure", g, failure, self.growth.unsynced_tokens())
            self._refuse(kv, now, "rejected-" + failure.cause)  # type: ignore[arg-type]
            return
        kv.reserved_s = now
        heapq.heappush(self.landing, (now + kv.transfer_s, self._tie, kv))
        self._tie += 1

    def _allocate(self, g: Group) -> bool:
        """The swap-in's allocator calls (``Admission._swap_in``): the prompt (with the
        watermark while anything runs), the forks, one slot per sequence; on any refusal
        undone, False (the refusal recorded by the allocator)."""
        alloc = self.batch.allocator
        if alloc.decisions_read_held:
            self.growth.sync_allocator()
        prompt = g.prompt_tokens
        keep = self.batch.config.watermark_tokens
        if (
            keep
            and self.batch.running
            and not alloc.admission_fits(prompt, g.prefix_hashes, keep_free_tokens=keep)
        ):
            return False
        placed = place_sequences(alloc, self.admission.next_seq_id, g, 1)
        if placed is None:
            return False
        ids = placed[1]
        self.admission.take_seq_ids(g.num_seqs)
        g.seq_ids = ids
        return True

    def _refuse(self, kv: InboundKV, now: float, status: Status) -> None:
        kv.refused = True
        self.batch.finish(kv.group, now, status)

    def _join(self, kv: InboundKV, now: float, step: Step) -> None:
        """``kv``'s request enters the batch now, decoding in ``step``: it holds its
        prompt and its first token's slot (the prefill's one token generated)."""
        g = kv.group
        alloc = self.batch.allocator
        g.swapped = False
        g.prefill_left_tokens = 0
        g.allocates_per_chunk = False
        g.held_tokens = g.synced_tokens = g.prompt_tokens + g.generated_tokens
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[0])
        g.blocked = None
        kv.joined_s = now
        self.batch.join(g)
        step.stepped.append(g)
