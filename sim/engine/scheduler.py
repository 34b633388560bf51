"""Iteration-level (continuous-batching) scheduler. Pure Python: no SimPy, no clock.

The SimPy replica (and later the GPU replay) drives it with one protocol::

    step = sched.begin_step(now)      # growth, preemption, admission; None when idle
    ...the step runs for latency(step) + step.stall_s seconds...
    sched.end_step(step, now)         # prefill progress, tokens out, finishes

and, in fast mode, jumps over runs of pure-decode steps::

    k = sched.steady_steps()          # steps that need no decision (0: take a real step)
    sched.advance(m)                  # apply m <= k of those steps at once
    sched.finish_ready(now)           # free the groups that emitted their last token

(``advance(m, in_step=True)`` also begins the next step of the run, for an observer
looking inside it; the run's last ``advance`` leaves ``in_step`` False.) Decoding
groups sit on decode ticks (``sim.ticks``): a step without a decision
is O(1) in the batch size; ``Scheduler(..., ticks=False)`` steps every group one by one
(the reference the property tests compare with).

The scheduler asks the allocator; the allocator answers. Each request is a *group* of
``n`` sequences (parallel sampling / beam width) that prefill together, share the prompt
through ``Allocator.fork`` and decode in lockstep, one token each per step.

Token accounting (vLLM's): admission allocates the prompt; the step that finishes the
prefill emits output token 1; each later decode step first grows every sequence by one
slot (the KV of the token it feeds) and emits the next token. A decoding group therefore
holds ``prompt + generated - 1`` slots per sequence, and ``output - 1`` growths happen.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from policies.allocators.base import Allocator, FailureCause
from sim.engine.batch import (
    Group,
    OnAdmissionFailure,
    Preemption,
    SchedEvent,
    SchedulerConfig,
    Status,
    Step,
)
from sim.engine.ticks import DecodeTicks, sync_deferred

__all__ = [
    "Group",
    "OnAdmissionFailure",
    "Preemption",
    "SchedEvent",
    "Scheduler",
    "SchedulerConfig",
    "Status",
    "Step",
]


def _admission_order(g: Group) -> int:
    return g.order


def _ignore_event(event: SchedEvent) -> None:
    pass


def _ignore_retry(group: Group, delay_s: float) -> None:
    pass


def _ignore_done(group: Group) -> None:
    pass


class Scheduler:
    """FCFS continuous batching over one allocator. See the module docstring."""

    def __init__(
        self,
        config: SchedulerConfig,
        allocator: Allocator,
        *,
        on_event: Callable[[SchedEvent], None] = lambda e: None,
        on_retry: Callable[[Group, float], None] = lambda g, delay_s: None,
        on_done: Callable[[Group], None] = lambda g: None,
        ticks: bool = True,
    ) -> None:
        self.config = config
        self.allocator = allocator
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        """The batch in admission order (the last is the first preemption victim)."""
        self.prefilling: list[Group] = []
        """Running groups with prefill left, in admission order."""
        self.running_seqs = 0
        self.admitting = True
        self._on_event = on_event
        self._on_retry = on_retry
        self._on_done = on_done
        self._next_seq_id = 0
        self.preemptions_total = 0
        self.use_ticks = ticks
        """Advance decoding single-sequence groups on decode ticks (``sim.ticks``); off,
        every group is stepped one by one (the reference path the tests compare with)."""
        self._ticks = DecodeTicks(allocator)
        self._ticking = False
        """True while every decoding group is registered with ``_ticks``; False while
        every group's fields are explicit (a step with a growth decision)."""
        self._order = 0
        self._run_begun = False
        """A fast-mode run's next step has begun (``advance(..., in_step=True)``)."""
        self._grown_before = -1
        """While ticking growth meets a refusal: members admitted before this order have
        already grown in this step (``unsynced_tokens`` counts it)."""

    # -- arrivals ---------------------------------------------------------------------
    def drop_callbacks(self) -> None:
        """Forget the event, retry and done callbacks (they usually close over the
        owner, a reference cycle); later events go nowhere."""
        self._on_event = _ignore_event
        self._on_retry = _ignore_retry
        self._on_done = _ignore_done

    def submit(self, group: Group, now: float) -> None:
        """Queue a request (first arrival or client retry)."""
        if group.prompt_tokens >= self.config.max_seq_tokens:
            self._finish(group, now, "rejected-too-long")
            return
        if group.num_seqs > self.config.max_num_seqs:  # can never be batched here
            self._finish(group, now, "rejected-capacity")
            return
        # Generation stops at the maximum sequence length, as serving engines do.
        # Every request has at least one prompt token and emits at least one token.
        group.prompt_tokens = max(1, group.prompt_tokens)
        group.output_tokens = max(
            1, min(group.output_tokens, self.config.max_seq_tokens - group.prompt_tokens)
        )
        group.enqueued_s = now
        group.blocked = None
        self.waiting.append(group)

    def reset_allocator(self, allocator: Allocator) -> None:
        """A restart: every running group loses its KV and waits to be recomputed."""
        self._unregister_all()
        for g in reversed(list(self.running)):
            self._note_reserved(g)
            self._leave_batch(g)
            g.swapped = False
            self._requeue_preempted(g, count=False)
        self.allocator = allocator
        self._ticks = DecodeTicks(allocator)
        for g in self.waiting:
            g.blocked = None
            if g.swapped:  # host memory goes with the process
                g.swapped = False
                g.held_tokens = g.prompt_tokens + g.generated_tokens

    # -- one step -----------------------------------------------------------------------
    def begin_step(self, now: float) -> Step | None:
        """Grow decoding groups (preempting on failure), admit, compose the step."""
        self._expire_waiting(now)
        copied0 = self._copied_total()
        step = Step()
        ticks = self._ticks
        if self._ticking and not self._tick_growth(now, step):
            self._unregister_all()  # a growth decision: step every group explicitly
        ticks.tick += 1
        decoding = step.decoding
        if not self._ticking:
            self._grow_explicit(now, step)
        # As vLLM does: no admission in a step that had to preempt (unless the batch
        # emptied, which would leave the step with nothing to run).
        if self.admitting and self.waiting and not (step.preempted and self.running):
            seqs = ticks.seqs
            for g in decoding:
                seqs += g.num_seqs
            self._admit(now, step, seqs)
        decode_seqs = ticks.seqs
        kv_tokens = ticks.kv_tokens()
        for g in decoding:
            decode_seqs += g.num_seqs
            kv_tokens += g.num_seqs * g.held_tokens
        budget = self.config.max_num_batched_tokens - decode_seqs
        for g in self.prefilling:
            chunk = g.prefill_left_tokens
            if self.config.chunked_prefill:
                chunk = min(chunk, budget)
            elif chunk > budget and step.prefill_chunks:
                continue
            if chunk <= 0:
                break
            step.prefill_chunks.append((g, chunk))
            step.prefill_tokens += chunk
            budget -= chunk
        if not decode_seqs and not step.prefill_chunks:
            ticks.tick -= 1
            return None
        step.decode_seqs = decode_seqs
        for g, c in step.prefill_chunks:
            kv_tokens += g.held_tokens - g.prefill_left_tokens + c
        step.kv_tokens = kv_tokens
        step.stall_s += (self._copied_total() - copied0) * self.config.copy_s_per_token
        return step

    def _tick_growth(self, now: float, step: Step) -> bool:
        """Grow the ticking groups by one slot, as the reference path would. Members
        whose growth needs the allocator grow explicitly, in admission order, and decode
        in this step as explicit groups (they rejoin at its end); the rest grow with the
        tick, pooled blocks drawn in bulk. On a pooled pool that is done only when the
        step's draws all fit (then their order cannot matter); when the pool is short
        the crossing members draw one by one (``_tick_growth_refused``). False: a step
        the reference path must take (nothing changed)."""
        ticks = self._ticks
        alloc = self.allocator
        due = ticks.due()
        if due:
            if alloc.decisions_read_held:
                return False  # compaction reads held tokens: the reference path syncs
            if ticks.block_tokens is not None:
                need = ticks.pooled_need()
                for g in due:
                    ticks.materialize(g)
                    grow = g.held_tokens - g.synced_tokens + 1
                    need += sum(alloc.blocks_to_extend(sid, grow) for sid in g.seq_ids)
                if need > alloc.pool_free_blocks():
                    return False
                pooled = ticks.pooled_need()
                if pooled > 0:
                    ok = ticks.reserve(pooled)
                    assert ok
            for g in due:  # cannot be refused on a pooled pool (checked above)
                if g.in_batch:  # an earlier refusal may have preempted it
                    self._grown_before = g.order
                    self._grow_due(g, now, step)
                    self._grown_before = -1
            return True
        found = ticks.try_grow()
        if found == "short":
            crossing = ticks.crossing(self.running)
            if any(g.num_seqs > 1 for g in crossing):
                return False  # forks draw sequence by sequence: the reference path does
            self._tick_growth_refused(now, step, crossing)
        return True

    def _grow_due(self, g: Group, now: float, step: Step) -> None:
        """A member's growth needs the allocator: it leaves the ticks and grows as in
        ``_grow_explicit`` (decoding in this step unless it left the batch)."""
        self._ticks.leave(g)
        if g.num_seqs > 1:
            if self._grow(g, now, step):
                step.decoding.append(g)
            return
        alloc = self.allocator
        sid = g.seq_ids[0]
        sync_deferred(alloc, g)
        if alloc.extend(sid, 1) or self._grow_refused(g, sid, now, step):
            g.held_tokens += 1
            g.synced_tokens = g.held_tokens
            g.limit_tokens = g.held_tokens + alloc.headroom_tokens(sid)
            step.decoding.append(g)

    def _tick_growth_refused(self, now: float, step: Step, crossing: list[Group]) -> None:
        """The pool cannot cover this step's pooled growth. Members crossing into a new
        block draw one each in admission order (as one ``extend(sid, 1)`` each would):
        the first ones from what is free, then the first refused one preempts (or
        fails) exactly as in ``_grow_explicit``."""
        ticks = self._ticks
        alloc = self.allocator
        free = alloc.pool_free_blocks()
        if free:
            ok = ticks.reserve(free)
            assert ok
        for g in crossing[free:]:
            if not g.in_batch or ticks.reserve(1):  # preempted earlier / a block was freed
                continue
            # The real refusal, with its record: the eager call, then the reference path.
            ticks.sync(g)
            sid = g.seq_ids[0]
            self._grown_before = g.order  # members before g have grown (for samples)
            if alloc.extend(sid, 1) or self._grow_refused(g, sid, now, step):
                ticks.grew_explicitly(g)
            self._grown_before = -1
        assert ticks.pooled_blocks(ticks.tick + 1) == ticks.reserved_blocks, "pooled drift"

    def _grow_explicit(self, now: float, step: Step) -> None:
        """Grow every decoding group by one slot, in admission order, preempting on
        refusal (every group's fields are explicit here)."""
        decoding = step.decoding
        extend = self.allocator.extend
        for g in list(self.running):
            # A group may have left the batch as an earlier group's preemption victim.
            if g.prefill_left_tokens or not g.in_batch:
                continue
            if g.num_seqs > 1:
                if self._grow(g, now, step):
                    decoding.append(g)
            elif g.held_tokens < g.limit_tokens:  # inside its headroom: no decision
                g.held_tokens += 1
                decoding.append(g)
            else:
                sid = g.seq_ids[0]
                sync_deferred(self.allocator, g)
                if self.allocator.decisions_read_held:
                    self.sync_allocator()
                if extend(sid, 1) or self._grow_refused(g, sid, now, step):
                    g.held_tokens += 1
                    g.synced_tokens = g.held_tokens
                    g.limit_tokens = g.held_tokens + self.allocator.headroom_tokens(sid)
                    decoding.append(g)

    def end_step(self, step: Step, now: float) -> None:
        """Apply a finished step: prefill progress, one token per group, finishes."""
        ticks = self._ticks
        ticks.done += 1
        done: list[Group] = []
        joined: list[Group] = []
        for g, chunk in step.prefill_chunks:
            g.prefill_left_tokens -= chunk
            if g.prefill_left_tokens == 0:
                self.prefilling.remove(g)
                g.generated_tokens += 1
                if math.isnan(g.first_token_s):
                    g.first_token_s = now
                if g.generated_tokens >= g.output_tokens:
                    done.append(g)
                else:
                    joined.append(g)
        finished = ticks.pop_finished() if ticks.members else []
        for g in step.decoding:
            g.generated_tokens += 1
            if g.generated_tokens >= g.output_tokens:
                finished.append(g)
            elif self._ticking:
                joined.append(g)
        if len(finished) > 1:
            finished.sort(key=_admission_order)
        for g in done:
            if g.in_batch:
                self._drop(g)
                self._finish(g, now, "ok")
        for g in finished:
            if g.in_batch:
                if g.reg:
                    self._ticks.leave(g, leaving_batch=True)
                self._drop(g)
                self._finish(g, now, "ok")
        if not self.use_ticks:
            return
        if self._ticking:
            for g in joined:
                self._ticks.join(g)
        else:
            self._ticking = True
            for g in self.running:
                if not g.prefill_left_tokens:
                    self._ticks.join(g)

    def step_decoding(self, step: Step) -> list[Group]:
        """Every group decoding in ``step`` (between ``begin_step`` and ``end_step``), in
        admission order: ticking members and ``step.decoding``. O(batch); for tools."""
        out = [g for g in self.running if g.reg] + step.decoding
        return sorted(out, key=_admission_order)

    # -- fast mode --------------------------------------------------------------------
    def steady_steps(self) -> int:
        """How many pure-decode steps can run from now with no decision: no prefill, no
        admission possible, no finish before the last of them, and growth the allocator
        covers without choosing. 0 means: take a real step."""
        if not self.running or self.prefilling:
            return 0
        if self.waiting and self.admitting and self._admission_possible():
            return 0
        if not self._ticking:
            return self._steady_explicit()
        return self._ticks.steady_steps()

    def _steady_explicit(self) -> int:
        k = min(g.output_tokens - g.generated_tokens for g in self.running)
        alloc = self.allocator
        block = alloc.pool_block_tokens
        heads: list[int] = []
        for g in self.running:
            if g.num_seqs == 1:
                heads.append(g.limit_tokens - g.held_tokens)
                continue
            for sid in g.seq_ids:
                h = alloc.headroom_tokens(sid)
                # A shared (copy-on-write) partly filled last block must be copied first:
                # growing past the headroom by one block then draws two. Take a real step.
                if (
                    block is not None
                    and g.num_seqs > 1
                    and (alloc.blocks_to_extend(sid, h + block) != 1)
                ):
                    return 0
                heads.append(h)
        headroom = np.asarray(heads, dtype=np.int64)
        if block is None:
            return int(min(k, int(headroom.min())))
        free_blocks = alloc.pool_free_blocks()

        def blocks(steps: int) -> int:
            return int(((np.maximum(steps - headroom, 0) + block - 1) // block).sum())

        if blocks(k) <= free_blocks:
            return k
        lo, hi = 0, k  # blocks(lo) fits, blocks(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks(mid) <= free_blocks:
                lo = mid
            else:
                hi = mid
        return lo

    def advance(self, steps: int, *, in_step: bool = False) -> None:
        """Apply ``steps`` pure-decode steps to every running group (fast mode). The
        caller guarantees that the run stays inside ``steady_steps()`` as it was at the
        run's start. ``in_step`` also begins the next step of the run (its growth, as
        ``begin_step`` would): the state an observer sees inside that step. The next
        ``advance`` of the run takes it into account; the run's last ``advance`` must
        leave ``in_step`` False before any other call."""
        grow = steps + in_step - self._run_begun
        assert steps >= 0 and grow >= 0, "a run cannot go back"
        self._run_begun = in_step
        if steps <= 0 and grow == 0:
            return
        self._ticks.advance(grow, steps)  # no members unless ticking
        if self._ticking:
            return
        alloc = self.allocator
        for g in self.running:
            g.held_tokens += grow
            g.generated_tokens += steps
            if g.num_seqs > 1:
                for sid in g.seq_ids:
                    ok = alloc.extend(sid, grow)
                    assert ok, "growth inside the steady bound was refused"
            elif g.held_tokens > g.limit_tokens:  # pooled growth: blocks the pool covers
                sync_deferred(self.allocator, g)
                g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[0])

    def sync_allocator(self) -> None:
        """Tell the allocator of growth deferred inside sequences' headroom (and bring
        ticking groups' fields up to date). Growth there is a pure counter update (no
        decision, no change to free memory), so it is applied lazily: before reading
        held/used tokens (metrics) and before decisions of policies whose decisions read
        other requests' held tokens (compaction)."""
        for g in self.running:
            if g.reg:
                self._ticks.sync(g)
            elif g.num_seqs == 1:
                sync_deferred(self.allocator, g)

    def finish_ready(self, now: float) -> None:
        """Free groups that have emitted their last token (after ``advance``)."""
        if not self._ticking:
            self._collect_finished(now)
            return
        for g in self._ticks.pop_finished():
            if g.in_batch:
                self._ticks.leave(g, leaving_batch=True)
                self._drop(g)
                self._finish(g, now, "ok")

    def decode_load(self) -> tuple[int, int]:
        """(decode sequences, KV tokens held) of the running batch."""
        if self._ticking and not self.prefilling:
            return self._ticks.seqs, self._ticks.kv_tokens()
        self.sync_allocator()
        return (
            sum(g.num_seqs for g in self.running),
            sum(g.num_seqs * g.held_tokens for g in self.running),
        )

    def unsynced_tokens(self) -> int:
        """Growth the allocator has not been told of yet (deferred inside headroom or
        taken by ticking): the pool's used tokens are this much higher than it reports,
        and its reserved-unused tokens this much lower. No allocator call; O(1) while
        ticking, O(batch) otherwise."""
        ticks = self._ticks
        grown_before = self._grown_before
        if self._ticking:
            # Members only: every other running group (prefilling, or swapped in this
            # step) holds what the allocator knows.
            total = ticks.unsynced_tokens()
            if grown_before >= 0:
                total += sum(g.num_seqs for g in self.running if g.reg and g.order < grown_before)
            return total
        total = 0
        for g in self.running:
            if g.num_seqs == 1:
                total += g.held_tokens - g.synced_tokens
        return total

    def next_timeout_s(self) -> float | None:
        """The earliest time a waiting request times out, if any does."""
        t = self.config.queue_timeout_s
        if t is None:
            return None
        pending = [g.enqueued_s for g in self.waiting if math.isnan(g.admit_s)]
        return min(pending) + t if pending else None

    # -- decode ticks -------------------------------------------------------------------
    def _unregister_all(self) -> None:
        """Make every group's fields explicit (the reference path takes over)."""
        if not self._ticking:
            return
        self._ticking = False
        for g in self.running:
            if g.reg:
                self._ticks.leave(g)
        self._ticks.clear_heaps()

    # -- internals ------------------------------------------------------------------
    def _copied_total(self) -> int:
        return self.allocator.copied_tokens_total()

    def _expire_waiting(self, now: float) -> None:
        t = self.config.queue_timeout_s
        if t is None or not self.waiting:
            return
        deadline = self.next_timeout_s()
        if deadline is None or now < deadline:
            return
        keep: deque[Group] = deque()
        for g in self.waiting:
            if math.isnan(g.admit_s) and now >= g.enqueued_s + t:
                self._finish(g, now, "timed-out")
            else:
                keep.append(g)
        self.waiting = keep

    def _admission_possible(self) -> bool:
        """Could the admission pass do anything now? (Used to decide steadiness.)"""
        if self.running_seqs + self.waiting[0].num_seqs > self.config.max_num_seqs:
            return False  # the admission pass stops at a head that does not fit the batch
        budget = self.config.max_num_batched_tokens - self.running_seqs
        if budget <= 0:
            return False
        if not self.config.chunked_prefill and (
            self._prefill_work(self.waiting[0]) > budget
            and budget < self.config.max_num_batched_tokens
        ):
            return False
        free, largest = self.allocator.free_and_largest_tokens()
        for g in self.waiting:
            if (
                g.blocked is None
                or not self.running
                or free > g.blocked[0]
                or largest > g.blocked[1]
            ):
                return True
            if self.config.head_of_line:
                return False
        return False

    def _admit(self, now: float, step: Step, decode_seqs: int) -> None:
        budget = self.config.max_num_batched_tokens - decode_seqs
        for g in self.prefilling:
            budget -= g.prefill_left_tokens
        skipped: deque[Group] = deque()
        while self.waiting:
            g = self.waiting[0]
            if self.running_seqs + g.num_seqs > self.config.max_num_seqs:
                break
            if budget <= 0 or (
                not self.config.chunked_prefill
                and (self._prefill_work(g) > budget and budget < self.config.max_num_batched_tokens)
            ):
                break
            if g.blocked is not None and self.running:
                free, largest = self.allocator.free_and_largest_tokens()
                if free <= g.blocked[0] and largest <= g.blocked[1]:
                    if self.config.head_of_line:
                        break
                    skipped.append(self.waiting.popleft())
                    continue
            self.waiting.popleft()
            if self._swap_in(g, now, step) if g.swapped else self._place(g, now):
                budget -= g.prefill_left_tokens
                continue
            failure = self.allocator.last_failure()
            assert failure is not None, "allocator refused without recording why"
            self._on_event(
                SchedEvent(
                    "admission_failure",
                    g.request_id,
                    failure.need_tokens,
                    failure.free_tokens,
                    failure.largest_free_extent_tokens,
                    failure.cause,
                )
            )
            if not self.running:  # an empty pool cannot hold it: it never fits here
                self._reject(g, now, "capacity")
            elif self.config.on_admission_failure == "reject" and math.isnan(g.admit_s):
                # A naive server refuses new requests; one it preempted waits.
                self._reject(g, now, failure.cause)
            else:
                # A refused placement left the pool as it was (undone): read it now.
                g.blocked = self.allocator.free_and_largest_tokens()
                if self.config.head_of_line:
                    self.waiting.appendleft(g)
                    break
                skipped.append(g)
        self.waiting.extendleft(reversed(skipped))

    def _prefill_work(self, g: Group) -> int:
        if g.swapped:
            return 0
        return g.held_tokens if g.held_tokens else g.prompt_tokens

    def _place(self, g: Group, now: float) -> bool:
        """Allocate the group's sequences; on any refusal undo and return False."""
        alloc = self.allocator
        if alloc.decisions_read_held:
            self.sync_allocator()
        prompt = g.prompt_tokens
        resume_tokens = g.held_tokens if g.held_tokens > prompt else prompt
        grow = resume_tokens - prompt
        first = self._next_seq_id
        got = alloc.allocate(
            first, prompt, reserve_tokens=prompt + g.output_tokens, prefix_hashes=g.prefix_hashes
        )
        if got is None:
            return False
        ids = [first]
        if g.num_seqs > 1 or grow:
            ids = list(range(first, first + g.num_seqs))
            placed = [first]
            ok = True
            for sid in ids[1:]:
                if not alloc.fork(first, sid):
                    ok = False
                    break
                placed.append(sid)
            if ok and grow:
                for sid in ids:
                    if not alloc.extend(sid, grow):
                        ok = False
                        break
            if not ok:  # undo; the refusal stays recorded (free does not clear it)
                for sid in placed:
                    alloc.free(sid)
                return False
        self._next_seq_id += g.num_seqs
        g.seq_ids = ids
        cached = min(got.cached_tokens, g.prompt_tokens - 1)
        if g.swapped:
            g.prefill_left_tokens = 0
        else:
            g.prefill_left_tokens = (g.prompt_tokens - cached) + g.num_seqs * grow
            g.cached_tokens = max(g.cached_tokens, cached)
        g.held_tokens = g.synced_tokens = resume_tokens
        g.limit_tokens = resume_tokens + alloc.headroom_tokens(ids[0])
        if math.isnan(g.admit_s):
            g.admit_s = now
        g.blocked = None
        self._note_reserved(g)
        self.running.append(g)
        self.running_seqs += g.num_seqs
        g.in_batch = True
        g.order = self._order
        self._order += 1
        if g.prefill_left_tokens:
            self.prefilling.append(g)
        return True

    def _swap_in(self, g: Group, now: float, step: Step) -> bool:
        """Bring a swapped-out group back, decoding in this very step, only if its next
        growth fits too; otherwise undo (no preemption, no transfer) and return False
        with the refusal recorded by the allocator."""
        if not self._place(g, now):
            return False
        alloc = self.allocator
        for sid in g.seq_ids:
            if not alloc.extend(sid, 1):
                self._drop(g)
                g.seq_ids = []
                return False
        g.swapped = False
        step.stall_s += g.num_seqs * g.held_tokens * self.config.swap_s_per_token
        g.held_tokens = g.synced_tokens = g.held_tokens + 1
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[0])
        step.decoding.append(g)
        return True

    def _note_reserved(self, g: Group) -> None:
        ids = g.seq_ids
        reserved_of = self.allocator.reserved_tokens
        r = reserved_of(ids[0]) if len(ids) == 1 else sum(reserved_of(sid) for sid in ids)
        if r > g.peak_reserved_tokens:
            g.peak_reserved_tokens = r

    def _grow(self, g: Group, now: float, step: Step) -> bool:
        """Grow each of ``g``'s sequences by one slot; preempt on refusal. False when
        ``g`` itself left the batch."""
        alloc = self.allocator
        if alloc.decisions_read_held:
            self.sync_allocator()
        for sid in g.seq_ids:
            if not alloc.extend(sid, 1) and not self._grow_refused(g, sid, now, step):
                return False
        g.held_tokens += 1
        g.synced_tokens = g.held_tokens
        g.limit_tokens = g.held_tokens + alloc.headroom_tokens(g.seq_ids[-1])
        return True

    def _grow_refused(self, g: Group, sid: int, now: float, step: Step) -> bool:
        """``extend(sid, 1)`` of ``g`` was just refused: preempt (or fail) until it is
        granted. False when ``g`` itself left the batch."""
        alloc = self.allocator
        while True:
            failure = alloc.last_failure()
            assert failure is not None, "allocator refused without recording why"
            self._on_event(
                SchedEvent(
                    "growth_failure",
                    g.request_id,
                    failure.need_tokens,
                    failure.free_tokens,
                    failure.largest_free_extent_tokens,
                    failure.cause,
                )
            )
            # Swapping out the only running group restores the same refusal on its
            # return: it can never grow here, so it fails like a naive server's.
            alone = len(self.running) == 1
            if self.config.preemption == "fail" or (alone and self.config.preemption == "swap"):
                self._drop(g)
                self._fail(g, now, failure.cause)
                return False
            victim = self.running[-1]
            self._preempt(victim, step, failure.cause)
            if victim is g:
                return False
            if alloc.extend(sid, 1):
                return True

    def _preempt(self, victim: Group, step: Step, cause: FailureCause) -> None:
        # A group still prefilling is recomputed even under swap (as vLLM does).
        swap = self.config.preemption == "swap" and victim.prefill_left_tokens == 0
        free, largest = self.allocator.free_and_largest_tokens()
        self._on_event(
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
        self._drop(victim)
        if victim in step.decoding:  # it grew for a step it will not run
            step.decoding.remove(victim)
            victim.held_tokens -= 1
        self.preemptions_total += 1
        step.preempted = True
        if swap:
            step.stall_s += victim.num_seqs * victim.held_tokens * self.config.swap_s_per_token
            victim.swapped = True
        self._requeue_preempted(victim, count=True)
        if victim.swapped:
            # Its state comes back whole, so it returns only once memory has grown.
            victim.blocked = self.allocator.free_and_largest_tokens()

    def _requeue_preempted(self, g: Group, *, count: bool) -> None:
        if count:
            g.preemptions += 1
        if not g.swapped:
            # Recompute (vLLM): prompt and every emitted token are prefilled again on
            # re-admission (the last token's KV was never stored), then the next token
            # comes out of that prefill.
            g.held_tokens = g.prompt_tokens + g.generated_tokens
        g.seq_ids = []
        g.prefill_left_tokens = 0
        g.blocked = None
        self.waiting.appendleft(g)

    def _drop(self, g: Group) -> None:
        """Take ``g`` out of the batch and free its memory (a sequence that grew
        earlier in a refused step goes with it)."""
        if g.reg:
            self._ticks.leave(g)
        self._note_reserved(g)
        for sid in g.seq_ids:
            self.allocator.free(sid)
        self._leave_batch(g)

    def _leave_batch(self, g: Group) -> None:
        assert not g.reg, "a ticking group must leave the decode ticks first"
        self.running.remove(g)
        self.running_seqs -= g.num_seqs
        g.in_batch = False
        if g.prefill_left_tokens:
            self.prefilling.remove(g)

    def _reject(self, g: Group, now: float, cause: FailureCause) -> None:
        self._retry_or_finish(g, now, f"rejected-{cause}")  # type: ignore[arg-type]

    def _fail(self, g: Group, now: float, cause: FailureCause) -> None:
        self._retry_or_finish(g, now, f"failed-{cause}")  # type: ignore[arg-type]

    def _retry_or_finish(self, g: Group, now: float, status: Status) -> None:
        if g.retries < self.config.retry_attempts:
            g.retries += 1
            g.seq_ids = []
            g.held_tokens = 0
            g.generated_tokens = 0
            g.prefill_left_tokens = 0
            g.admit_s = g.first_token_s = math.nan
            self._on_retry(g, self.config.retry_backoff_s * 2 ** (g.retries - 1))
            return
        self._finish(g, now, status)

    def _finish(self, g: Group, now: float, status: Status) -> None:
        g.status = status
        g.finish_s = now
        self._on_done(g)

    def _collect_finished(self, now: float) -> None:
        done = [g for g in self.running if g.generated_tokens >= g.output_tokens]
        for g in done:
            self._drop(g)
            self._finish(g, now, "ok")
