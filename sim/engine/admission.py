"""Admission and placement: which waiting requests enter the batch, and their memory.

FCFS over the waiting queue, as vLLM's scheduler: the head is admitted while the batch
has room (``max_num_seqs``), the step has token budget (``max_num_batched_tokens``) and
the allocator places it; a refused head waits (``head_of_line``) or is skipped, and is
retried only once free memory or the largest free extent has grown past what it saw
(``Group.blocked``). Placement allocates the prompt (prefix-cache hits included), forks
the group's other sequences, and, for a recomputed request, grows them to what they held.
A swapped-out request comes back whole and decodes in the step that admits it.
"""

from __future__ import annotations

import math
from collections import deque

from policies.allocators.base import Allocation, Allocator
from sim.engine.batch import Group, Step
from sim.engine.growth import Growth
from sim.engine.offload import OffloadTiers
from sim.engine.running import RunningBatch


class Admission:
    """Admission and placement for one scheduler's batch. See the module docstring."""

    def __init__(
        self, batch: RunningBatch, growth: Growth, offload: OffloadTiers | None = None
    ) -> None:
        self.batch = batch
        self.growth = growth
        self.offload = offload
        """KV offload tiers: a placement loads the prefix past the GPU's hits from them."""
        self._next_seq_id = 0

    @property
    def next_seq_id(self) -> int:
        """The sequence id the next placement starts at (ids are this allocator's keys)."""
        return self._next_seq_id

    def take_seq_ids(self, count: int) -> None:
        """``count`` ids from :attr:`next_seq_id` were placed elsewhere (``sim.engine.inbound``)."""
        self._next_seq_id += count

    def expire(self, now: float) -> None:
        """Requests that waited past ``queue_timeout_s`` end ``timed-out``."""
        batch = self.batch
        t = batch.config.queue_timeout_s
        if t is None or not batch.waiting:
            return
        deadline = self.next_timeout_s()
        if deadline is None or now < deadline:
            return
        keep: deque[Group] = deque()
        for g in batch.waiting:
            if math.isnan(g.admit_s) and now >= g.enqueued_s + t:
                batch.finish(g, now, "timed-out")
            else:
                keep.append(g)
        batch.waiting = keep

    def next_timeout_s(self) -> float | None:
        """The earliest time a waiting request times out, if any does."""
        t = self.batch.config.queue_timeout_s
        if t is None:
            return None
        pending = [g.enqueued_s for g in self.batch.waiting if math.isnan(g.admit_s)]
        return min(pending) + t if pending else None

    def possible(self) -> bool:
        """Could the admission pass admit anything now? (Fast mode's steadiness.)"""
        batch = self.batch
        config = batch.config
        head = batch.waiting[0]
        if batch.running_seqs + head.num_seqs > config.max_num_seqs:
            return False  # the admission pass stops at a head that does not fit the batch
        budget = config.max_num_batched_tokens - batch.running_seqs
        if budget <= 0:
            return False
        if not config.chunked_prefill and (
            _prefill_work(head) > budget and budget < config.max_num_batched_tokens
        ):
            return False
        free, largest = batch.allocator.free_and_largest_tokens()
        for g in batch.waiting:
            if (
                g.blocked is None
                or not batch.running
                or free > g.blocked[0]
                or largest > g.blocked[1]
            ):
                return True
            if config.head_of_line:
                return False
        return False

    def admit(self, now: float, step: Step, decode_seqs: int, cap_tokens: int = 0) -> None:
        """The admission pass of a step whose decoding takes ``decode_seqs`` tokens.
        With ``allocate_per_chunk`` the step's running groups have been scheduled
        already (``step.prefill_chunks``) and each admitted group's first chunk (at most
        ``cap_tokens`` when > 0) joins them."""
        batch = self.batch
        config = batch.config
        waiting = batch.waiting
        per_chunk = config.allocate_per_chunk
        budget = config.max_num_batched_tokens - decode_seqs
        if per_chunk:
            for _, chunk in step.prefill_chunks:
                budget -= chunk
        else:
            for g in batch.prefilling:
                budget -= g.prefill_left_tokens
        skipped: deque[Group] = deque()
        while waiting:
            g = waiting[0]
            if batch.running_seqs + g.num_seqs > config.max_num_seqs:
                break
            if budget <= 0 or (
                not config.chunked_prefill
                and (_prefill_work(g) > budget and budget < config.max_num_batched_tokens)
            ):
                break
            if g.blocked is not None and (batch.running or batch.next_release_s() < math.inf):
                free, largest = batch.allocator.free_and_largest_tokens()
                if free <= g.blocked[0] and largest <= g.blocked[1]:
                    if config.head_of_line:
                        break
                    skipped.append(waiting.popleft())
                    continue
            waiting.popleft()
            if per_chunk and not g.swapped:
                chunk = self._place_chunk(g, now, budget, cap_tokens)
                if chunk:
                    step.prefill_chunks.append((g, chunk))
                    step.prefill_tokens += chunk
                    budget -= chunk
                    continue
            elif self._swap_in(g, now, step) if g.swapped else self._place(g, now, step):
                budget -= g.prefill_left_tokens
                continue
            failure = batch.allocator.last_failure()
            assert failure is not None, "allocator refused without recording why"
            batch.report("admission_failure", g, failure, self.growth.unsynced_tokens())
            if not batch.running and batch.next_release_s() == math.inf:
                # Nothing will be freed (an empty pool, or leaked memory only): it never
                # fits here.
                batch.reject(g, now, failure.cause if batch.held else "capacity")
            elif config.on_admission_failure == "reject" and math.isnan(g.admit_s):
                # A naive server refuses new requests; one it preempted waits.
                batch.reject(g, now, failure.cause)
            else:
                # A refused placement left the pool as it was (undone): read it now. A
                # first chunk refused without the whole-prompt gate may fit a smaller
                # budget later: retried every step, as vLLM does.
                g.blocked = batch.allocator.free_and_largest_tokens()
                if per_chunk and not config.reserve_full_prompt:
                    g.blocked = None
                if config.head_of_line:
                    waiting.appendleft(g)
                    break
                skipped.append(g)
        waiting.extendleft(reversed(skipped))

    def _place_chunk(self, g: Group, now: float, budget: int, cap_tokens: int) -> int:
        """vLLM v1's placement under chunked prefill: the prefix hits (capped one token
        short of the prompt, rounded down to a block) and the first chunk are allocated
        now, the rest as it runs (``Growth.grow_in_order``). With ``reserve_full_prompt``
        the whole prompt must fit first (vLLM's ``scheduler_reserve_full_isl``); while
        anything runs, ``watermark_tokens`` must stay free. Returns the chunk scheduled
        in this step, 0 on refusal (recorded by the allocator). A group of several
        sequences is placed whole (``_place``), its first chunk scheduled here."""
        batch = self.batch
        config = batch.config
        alloc = batch.allocator
        if g.num_seqs > 1:
            if not self._place(g, now):
                return 0
            chunk = min(g.prefill_left_tokens, budget)
            return cap_tokens if 0 < cap_tokens < chunk else chunk
        work = g.held_tokens if g.held_tokens > g.prompt_tokens else g.prompt_tokens
        hashes = g.prefix_hashes
        owner = g.request_id
        hit = alloc.prefix_hit_tokens(work - 1, hashes, owner) if hashes else 0
        chunk = min(work - hit, budget)
        if 0 < cap_tokens < chunk:
            chunk = cap_tokens
        keep = config.watermark_tokens if batch.running else 0
        if (
            not config.reserve_full_prompt
            and work > alloc.stats().capacity_tokens
            and not alloc.admission_fits(work, hashes, 0, owner, hit)
        ):
            # Chunk by chunk it would preempt itself forever (vLLM does): refused here,
            # rejected once nothing runs, as a whole prompt that cannot fit is.
            return 0
        if config.reserve_full_prompt:
            if not alloc.admission_fits(work, hashes, keep, owner, hit):
                return 0
        elif keep and not alloc.admission_fits(hit + chunk, hashes, keep, owner, hit):
            return 0
        first = self._next_seq_id
        got = alloc.allocate_chunk(first, hit + chunk, work, hashes, owner, hit)
        if got is None:
            return 0
        self._next_seq_id += 1
        g.seq_ids = [first]
        cached = min(got.cached_tokens, work - 1)
        g.prefill_left_tokens = work - cached
        g.cached_tokens = max(g.cached_tokens, cached)
        if alloc.caches_prefixes():
            _count_hits(g, work, cached)
        g.held_tokens = g.synced_tokens = hit + chunk
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(first)
        g.allocates_per_chunk = True
        if math.isnan(g.admit_s):
            g.admit_s = now
        g.blocked = None
        batch.join(g)
        return hit + chunk - cached

    def _place(self, g: Group, now: float, step: Step | None = None) -> bool:
        """Allocate the group's sequences; on any refusal undo and return False. With
        offload tiers, the prompt past the GPU's prefix hits is loaded from them, the
        load's time added to ``step`` (``sim.engine.offload``)."""
        alloc = self.batch.allocator
        if alloc.decisions_read_held:
            self.growth.sync_allocator()
        prompt = g.prompt_tokens
        resume_tokens = g.held_tokens if g.held_tokens > prompt else prompt
        grow = resume_tokens - prompt
        keep = self.batch.config.watermark_tokens
        if (
            keep
            and self.batch.running
            and not alloc.admission_fits(
                prompt, g.prefix_hashes, keep_free_tokens=keep + g.num_seqs * grow
            )
        ):
            return False
        first = self._next_seq_id
        placed = place_sequences(alloc, first, g, grow)
        if placed is None:
            return False
        got, ids = placed
        self._next_seq_id += g.num_seqs
        g.allocates_per_chunk = False
        g.seq_ids = ids
        cached = min(got.cached_tokens, g.prompt_tokens - 1)
        offload = self.offload
        if offload is not None and step is not None and g.prefix_hashes and not g.swapped:
            loaded, load_s = offload.load(g.prefix_hashes, cached, g.prompt_tokens - 1)
            cached += loaded
            step.stall_s += load_s
        if g.swapped:
            g.prefill_left_tokens = 0
        else:
            g.prefill_left_tokens = (g.prompt_tokens - cached) + g.num_seqs * grow
            g.cached_tokens = max(g.cached_tokens, cached)
            if alloc.caches_prefixes():
                _count_hits(g, resume_tokens, cached)
        g.held_tokens = g.synced_tokens = resume_tokens
        g.limit_tokens = resume_tokens + alloc.headroom_tokens(ids[0])
        if math.isnan(g.admit_s):
            g.admit_s = now
        g.blocked = None
        self.batch.join(g)
        return True

    def _swap_in(self, g: Group, now: float, step: Step) -> bool:
        """Bring a swapped-out group back, decoding in this very step, only if its next
        growth fits too; otherwise undo (no preemption, no transfer) and return False
        with the refusal recorded by the allocator."""
        if not self._place(g, now, step):
            return False
        alloc = self.batch.allocator
        for sid in g.seq_ids:
            if not alloc.extend(sid, 1):
                self.growth.drop(g)
                g.seq_ids = []
                return False
        g.swapped = False
        step.stall_s += g.num_seqs * g.held_tokens * self.batch.config.swap_s_per_token
        g.held_tokens = g.synced_tokens = g.held_tokens + 1
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[0])
        step.stepped.append(g)
        return True


def _prefill_work(g: Group) -> int:
    if g.swapped:
        return 0
    return g.held_tokens if g.held_tokens else g.prompt_tokens


def _count_hits(g: Group, queried: int, cached: int) -> None:
    """An admission looked up ``queried`` tokens and found ``cached`` in the prefix
    cache (an allocator that caches prefixes only: vLLM looks nothing up, and counts
    nothing, without one): counted as vLLM's ``record_prefix_cache_stats`` counts it, a
    first admission apart from a re-admission after a preemption
    (``Group.prefix_queried_tokens``)."""
    if math.isnan(g.admit_s):
        g.prefix_queried_tokens += queried
        g.prefix_hit_tokens += cached
    else:
        g.preempted_queried_tokens += queried
        g.preempted_hit_tokens += cached


def place_sequences(
    alloc: Allocator, first: int, g: Group, grow_tokens: int
) -> tuple[Allocation, list[int]] | None:
    """``g``'s prompt allocated as sequence ``first`` (its reserve and prefix hashes
    given), forked into its ``num_seqs`` sequences ``first, first + 1, ...``, each then
    extended by ``grow_tokens``: the allocation and the sequence ids. On any refusal
    everything placed is freed again and None (the refusal stays recorded: ``free``
    does not clear it)."""
    prompt = g.prompt_tokens
    got = alloc.allocate(
        first, prompt, reserve_tokens=prompt + g.target_tokens, prefix_hashes=g.prefix_hashes
    )
    if got is None:
        return None
    if g.num_seqs == 1 and not grow_tokens:
        return got, [first]
    ids = list(range(first, first + g.num_seqs))
    placed = [first]
    ok = True
    for sid in ids[1:]:
        if not alloc.fork(first, sid):
            ok = False
            break
        placed.append(sid)
    if ok and grow_tokens:
        for sid in ids:
            if not alloc.extend(sid, grow_tokens):
                ok = False
                break
    if not ok:
        for sid in placed:
            alloc.free(sid)
        return None
    return got, ids
