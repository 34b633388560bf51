"""Decode growth, owned in one place: every decoding sequence grows by one KV slot per
step, and this module decides and applies it -- on the decode ticks
(``sim.engine.ticks``: O(1) in the batch size while no decision is due), one group at a
time through the allocator when a decision is due, with preemption (or failure) when
the allocator refuses, and in closed form over runs of pure-decode steps (fast mode).

The scheduler asks; this module answers::

    growth.grow(now, step)        # a step begins: every decoding group grows one slot
    growth.end_tick()             # ... and ends
    growth.rejoin(groups)         # groups that decode from the next step on
    growth.finished()             # groups that emitted their last token
    growth.drop(g)                # a group leaves the batch (finished, preempted, failed)
    growth.steady_steps()         # fast mode: steps needing no growth decision
    growth.advance(steps, ...)    # fast mode: apply them at once
    growth.sync_allocator()       # tell the allocator of deferred growth (before reads)

Where growth is a decision. A single-sequence group grows inside its headroom
(``Allocator.headroom_tokens``) with no allocator call (the growth is deferred and told
later: ``sync_deferred``). A pooled policy's growth draws blocks in bulk
(``policies.allocators.pooled``) while the pool covers the step. Anything else -- a
contiguous reallocation, a fork's copy-on-write write, a pool too short for the step, a
policy whose decisions read held tokens (compaction) -- goes through ``extend`` in
admission order, exactly as the reference path (every group stepped one by one:
``use_ticks=False``) makes it, so both paths make the same allocator calls in the same
order.
"""

from __future__ import annotations

import numpy as np

from policies.allocators.base import Allocator, FailureCause
from policies.allocators.pooled import PooledAllocator, as_pooled
from sim.engine.batch import Group, SchedEvent, Step, admission_order
from sim.engine.running import RunningBatch
from sim.engine.ticks import DecodeTicks, sync_deferred
from sim.latency.search import last_true


class Growth:
    """Decode growth of one scheduler's batch. See the module docstring."""

    def __init__(self, batch: RunningBatch, *, use_ticks: bool = True) -> None:
        self.batch = batch
        self.use_ticks = use_ticks
        """Advance decoding groups on the decode ticks; off, every group is stepped one
        by one (the reference path the property tests compare with)."""
        self.allocator: Allocator = batch.allocator
        self.pool: PooledAllocator | None = as_pooled(batch.allocator)
        self.ticks = DecodeTicks(batch.allocator)
        self.ticking = False
        """True while every decoding group is on the ticks; False while every group's
        fields are explicit (a step with a growth decision)."""
        self._run_begun = False
        """A fast-mode run's next step has begun (``advance(..., in_step=True)``)."""

    def reset(self, allocator: Allocator) -> None:
        """A fresh allocator (a restart); nothing may be on the ticks."""
        assert not self.ticking
        self.allocator = allocator
        self.pool = as_pooled(allocator)
        self.ticks = DecodeTicks(allocator)

    # -- one step -----------------------------------------------------------------------
    def grow(self, now: float, step: Step) -> None:
        """A step begins: every decoding group grows by one slot, preempting on refusal.
        Groups grown one by one go to ``step.stepped``; the rest grow with the tick."""
        if self.ticking and not self._grow_ticking(now, step):
            self.stop_ticking()  # a growth decision: step every group explicitly
        self.ticks.tick += 1
        if not self.ticking:
            self._grow_stepped(now, step)

    def grow_in_order(self, now: float, step: Step, budget_tokens: int, cap_tokens: int) -> int:
        """vLLM v1's pass over the running batch (``allocate_per_chunk``): in admission
        order, a decoding group takes one token of the step's budget and grows one slot;
        a prefilling group takes its next chunk (at most ``cap_tokens`` when > 0, and
        what budget is left) and, if placed per chunk, allocates it; a refusal preempts
        the last group, as decode growth does. The pass stops when the budget is spent
        (later decoders sit the step out) or a group preempts itself. Every group is
        stepped explicitly. Returns the budget left for admission."""
        self.stop_ticking()
        self.ticks.tick += 1
        for g in list(self.batch.running):
            if budget_tokens <= 0:
                break
            if not g.in_batch:  # an earlier group's preemption victim
                continue
            left = g.prefill_left_tokens
            if not left:
                if g.num_seqs == 1 and g.held_tokens < g.limit_tokens:
                    g.held_tokens += 1  # inside its headroom: no decision
                    step.stepped.append(g)
                else:
                    self._grow_group(g, now, step, -1)
                    if not g.in_batch:
                        break
                budget_tokens -= g.num_seqs
                continue
            chunk = min(left, budget_tokens)
            if 0 < cap_tokens < chunk:
                chunk = cap_tokens
            if g.allocates_per_chunk and not self._extend_chunk(g, chunk, now, step):
                break
            step.prefill_chunks.append((g, chunk))
            step.prefill_tokens += chunk
            budget_tokens -= chunk
        return budget_tokens

    def _extend_chunk(self, g: Group, chunk: int, now: float, step: Step) -> bool:
        """Allocate a per-chunk group's next ``chunk``, preempting on refusal; False
        when ``g`` itself left the batch."""
        alloc = self.allocator
        sid = g.seq_ids[0]
        if not alloc.extend(sid, chunk) and not self._grow_refused(g, sid, now, step, -1, chunk):
            return False
        g.held_tokens += chunk
        g.synced_tokens = g.held_tokens
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(sid)
        return True

    def cancel_step(self) -> None:
        """The step begun by ``grow`` runs nothing (nothing was decoding)."""
        self.ticks.tick -= 1

    def end_tick(self) -> None:
        """The step ends: every member emitted one token."""
        self.ticks.done += 1

    def load(self, step: Step) -> tuple[int, int]:
        """(decode sequences, KV tokens they read) of a step being composed."""
        ticks = self.ticks
        seqs = ticks.seqs
        kv = ticks.kv_tokens()
        for g in step.stepped:
            seqs += g.num_seqs
            kv += g.num_seqs * g.held_tokens
        return seqs, kv

    def finished(self) -> list[Group]:
        """Members that emitted their last token (still registered), in tick order."""
        return self.ticks.pop_finished() if self.ticks.members else []

    def finished_ready(self) -> list[Group]:
        """After ``advance``: every group that emitted its last token."""
        if self.ticking:
            return self.ticks.pop_finished()
        return [g for g in self.batch.running if g.generated_tokens >= g.target_tokens]

    def rejoin(self, joined: list[Group]) -> None:
        """After a step: ``joined`` start decoding (prefill done, or stepped this step);
        when the step was taken explicitly, every decoding group goes back on the ticks."""
        if not self.use_ticks:
            return
        ticks = self.ticks
        if self.ticking:
            for g in joined:
                ticks.join(g)
            return
        self.ticking = True
        for g in self.batch.running:
            if not g.prefill_left_tokens:
                ticks.join(g)

    def drop(self, g: Group) -> None:
        """Take ``g`` out of the batch (off the ticks first) and free its memory."""
        if g.tick_id:
            self.ticks.leave(g, leaving_batch=True)
        self.batch.release(g)

    def hold(self, g: Group, due_s: float) -> None:
        """Take ``g`` out of the batch (off the ticks first) keeping its memory until
        ``due_s`` (retention); the allocator is told of its deferred growth first."""
        if g.tick_id:
            self.ticks.leave(g, leaving_batch=True)
        sync_deferred(self.allocator, g)
        self.batch.hold(g, due_s)

    def stop_ticking(self) -> None:
        """Make every group's fields explicit (the reference path takes over)."""
        if not self.ticking:
            return
        self.ticking = False
        ticks = self.ticks
        for g in self.batch.running:
            if g.tick_id:
                ticks.leave(g)
        ticks.clear_heaps()

    # -- growth on the ticks ------------------------------------------------------------
    def _grow_ticking(self, now: float, step: Step) -> bool:
        """Grow the ticking groups by one slot, as the reference path would. Members
        whose growth needs the allocator grow explicitly, in admission order, and decode
        in this step as stepped groups (they rejoin at its end); the rest grow with the
        tick, pooled blocks drawn in bulk. On a pooled pool that is done only when the
        step's draws all fit (then their order cannot matter); when the pool is short
        the crossing members draw one by one (``_grow_crossing``). False: a step the
        reference path must take (nothing changed)."""
        ticks = self.ticks
        due = ticks.due() if ticks.any_due() else None
        if due:
            if self.allocator.decisions_read_held:
                return False  # compaction reads held tokens: the reference path syncs
            pool = self.pool
            if pool is not None:
                need = ticks.pooled_need()
                for g in due:
                    ticks.materialize(g)
                    grow = g.held_tokens - g.synced_tokens + 1
                    need += sum(pool.blocks_to_extend(sid, grow) for sid in g.seq_ids)
                if need > pool.pool_free_blocks():
                    return False
                pooled = ticks.pooled_need()
                if pooled > 0:
                    ok = ticks.reserve(pooled)
                    assert ok
            for g in due:  # cannot be refused on a pooled pool (checked above)
                if g.in_batch:  # an earlier refusal may have preempted it
                    ticks.leave(g)
                    self._grow_group(g, now, step, g.order)
            return True
        if ticks.try_grow() == "short":
            crossing = ticks.crossing(self.batch.running)
            if any(g.num_seqs > 1 for g in crossing):
                return False  # forks draw sequence by sequence: the reference path does
            self._grow_crossing(now, step, crossing)
        return True

    def _grow_crossing(self, now: float, step: Step, crossing: list[Group]) -> None:
        """The pool cannot cover this step's pooled growth. Members crossing into a new
        block draw one each in admission order (as one ``extend(sid, 1)`` each would):
        the first ones from what is free, then the first refused one preempts (or
        fails) exactly as the reference path does."""
        ticks = self.ticks
        pool = self.pool
        assert pool is not None
        free = pool.pool_free_blocks()
        if free:
            ok = ticks.reserve(free)
            assert ok
        for g in crossing[free:]:
            if not g.in_batch or ticks.reserve(1):  # preempted earlier / a block was freed
                continue
            # The real refusal, with its record: the eager call, then the reference path.
            ticks.sync(g)
            sid = g.seq_ids[0]
            if pool.extend(sid, 1) or self._grow_refused(g, sid, now, step, g.order):
                ticks.grew_explicitly(g)
        assert ticks.pooled_blocks(ticks.tick + 1) == ticks.reserved_blocks, "pooled drift"

    # -- growth one group at a time ---------------------------------------------------------
    def _grow_stepped(self, now: float, step: Step) -> None:
        """Grow every decoding group by one slot, in admission order, preempting on
        refusal (every group's fields are explicit here)."""
        stepped = step.stepped
        for g in list(self.batch.running):
            # A group may have left the batch as an earlier group's preemption victim.
            if g.prefill_left_tokens or not g.in_batch:
                continue
            if g.num_seqs == 1 and g.held_tokens < g.limit_tokens:
                g.held_tokens += 1  # inside its headroom: no decision
                stepped.append(g)
            else:
                self._grow_group(g, now, step, -1)

    def _grow_group(self, g: Group, now: float, step: Step, grown_before: int) -> None:
        """Grow each of ``g``'s sequences by one slot through the allocator, preempting
        on refusal; ``g`` decodes in this step unless it left the batch.
        ``grown_before``: on the ticks, members admitted before this order have grown in
        this step already (-1: none; see ``unsynced_tokens``)."""
        alloc = self.allocator
        ids = g.seq_ids
        if len(ids) == 1:
            sync_deferred(alloc, g)
        if alloc.decisions_read_held:
            self.sync_allocator()
        for sid in ids:
            if not alloc.extend(sid, 1) and not self._grow_refused(g, sid, now, step, grown_before):
                return
        g.held_tokens += 1
        g.synced_tokens = g.held_tokens
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(ids[-1])
        step.stepped.append(g)

    def _grow_refused(
        self, g: Group, sid: int, now: float, step: Step, grown_before: int, tokens: int = 1
    ) -> bool:
        """``extend(sid, tokens)`` of ``g`` was just refused: preempt (or fail) until it
        is granted. False when ``g`` itself left the batch."""
        alloc = self.allocator
        batch = self.batch
        preemption = batch.config.preemption
        while True:
            failure = alloc.last_failure()
            assert failure is not None, "allocator refused without recording why"
            batch.report("growth_failure", g, failure, self.unsynced_tokens(grown_before))
            # Swapping out the only running group restores the same refusal on its
            # return: it can never grow here, so it fails like a naive server's.
            alone = len(batch.running) == 1
            if preemption == "fail" or (alone and preemption == "swap"):
                self.drop(g)
                batch.fail(g, now, failure.cause)
                return False
            victim = batch.running[-1]
            self._preempt(victim, step, failure.cause)
            if victim is g:
                return False
            if alloc.extend(sid, tokens):
                return True

    def _preempt(self, victim: Group, step: Step, cause: FailureCause) -> None:
        batch = self.batch
        config = batch.config
        alloc = self.allocator
        # A group still prefilling is recomputed even under swap (as vLLM does).
        swap = config.preemption == "swap" and victim.prefill_left_tokens == 0
        free, largest = alloc.free_and_largest_tokens()
        batch.on_event(
            SchedEvent(
                "preemption",
                victim.request_id,
                0,
                free,
                largest,
                cause,
                "swap" if swap else "recompute",
            )
        )
        self.drop(victim)
        if victim in step.stepped:  # it grew for a step it will not run
            step.stepped.remove(victim)
            victim.held_tokens -= 1
        batch.preemptions_total += 1
        step.preempted = True
        if swap:
            step.stall_s += victim.num_seqs * victim.held_tokens * config.swap_s_per_token
            victim.swapped = True
        batch.requeue(victim, count=True)
        if victim.swapped:
            # Its state comes back whole, so it returns only once memory has grown.
            victim.blocked = alloc.free_and_largest_tokens()

    # -- fast mode: runs of pure-decode steps -------------------------------------------------
    def steady_steps(self) -> int:
        """How many pure-decode steps every running group can take with no growth
        decision (and no finish before the last of them). The caller checked that
        nothing prefills and nothing can be admitted."""
        if self.ticking:
            return self.ticks.steady_steps()
        running = self.batch.running
        k = min(g.target_tokens - g.generated_tokens for g in running)
        alloc = self.allocator
        pool = self.pool
        block = None if pool is None else pool.pool_block_tokens
        heads: list[int] = []
        for g in running:
            if g.num_seqs == 1:
                heads.append(g.limit_tokens - g.held_tokens)
                continue
            for sid in g.seq_ids:
                h = alloc.headroom_tokens(sid)
                # A shared (copy-on-write) partly filled last block must be copied first:
                # growing past the headroom by one block then draws two. Take a real step.
                if (
                    pool is not None
                    and block is not None
                    and pool.blocks_to_extend(sid, h + block) != 1
                ):
                    return 0
                heads.append(h)
        headroom = np.asarray(heads, dtype=np.int64)
        if pool is None or block is None:
            return int(min(k, int(headroom.min())))
        free_blocks = pool.pool_free_blocks()
        b = block

        def fits(steps: int) -> bool:
            return int(((np.maximum(steps - headroom, 0) + b - 1) // b).sum()) <= free_blocks

        return last_true(0, k, fits)

    def advance(self, steps: int, *, in_step: bool = False) -> None:
        """Apply ``steps`` pure-decode steps to every running group (fast mode), inside
        ``steady_steps()`` as it was at the run's start. ``in_step`` also begins the next
        step of the run (its growth): the state an observer sees inside that step; the
        run's last ``advance`` leaves it False."""
        grow = steps + in_step - self._run_begun
        assert steps >= 0 and grow >= 0, "a run cannot go back"
        self._run_begun = in_step
        if steps <= 0 and grow == 0:
            return
        self.ticks.advance(grow, steps)  # no members unless ticking
        if self.ticking:
            return
        alloc = self.allocator
        for g in self.batch.running:
            g.held_tokens += grow
            g.generated_tokens += steps
            if g.num_seqs > 1:
                for sid in g.seq_ids:
                    ok = alloc.extend(sid, grow)
                    assert ok, "growth inside the steady bound was refused"
            elif g.held_tokens > g.limit_tokens:  # pooled growth: blocks the pool covers
                sync_deferred(alloc, g)
                g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[0])

    # -- reading ------------------------------------------------------------------------
    def decode_load(self) -> tuple[int, int]:
        """(decode sequences, KV tokens held) of the running batch (nothing prefills)."""
        if self.ticking:
            return self.ticks.seqs, self.ticks.kv_tokens()
        self.sync_allocator()
        running = self.batch.running
        return (
            sum(g.num_seqs for g in running),
            sum(g.num_seqs * g.held_tokens for g in running),
        )

    def sync_allocator(self) -> None:
        """Tell the allocator of growth deferred inside sequences' headroom (and bring
        ticking groups' fields up to date). Growth there is a pure counter update (no
        decision, no change to free memory), so it is applied lazily: before reading
        held/used tokens (metrics) and before decisions of policies whose decisions read
        other requests' held tokens (compaction)."""
        ticks = self.ticks
        alloc = self.allocator
        for g in self.batch.running:
            if g.tick_id:
                ticks.sync(g)
            elif g.num_seqs == 1:
                sync_deferred(alloc, g)

    def unsynced_tokens(self, grown_before: int = -1) -> int:
        """Growth the allocator has not been told of yet (deferred inside headroom or
        taken on the ticks): the pool's used tokens are this much higher than it
        reports, and its reserved-unused tokens this much lower. ``grown_before``: while
        a step's tick growth meets a refusal, the members admitted before that order
        have grown already (the tick counts them from the step's end). No allocator
        call; O(1) while ticking, O(batch) otherwise."""
        running = self.batch.running
        if self.ticking:
            # Members only: every other running group (prefilling, or swapped in this
            # step) holds what the allocator knows.
            total = self.ticks.unsynced_tokens()
            if grown_before >= 0:
                total += sum(g.num_seqs for g in running if g.tick_id and g.order < grown_before)
            return total
        total = 0
        for g in running:
            if g.num_seqs == 1:
                total += g.held_tokens - g.synced_tokens
        return total

    def step_decoding(self, step: Step) -> list[Group]:
        """Every group decoding in ``step``, in admission order. O(batch); for tools."""
        out = [g for g in self.batch.running if g.tick_id] + step.stepped
        return sorted(out, key=admission_order)
