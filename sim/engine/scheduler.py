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
looking inside it; the run's last ``advance`` leaves ``in_step`` False.)

Retention (``Group.retain_s``, ``Group.retain_until_s``; ``sim.scenario.retention``): a
group that finishes ``ok`` with ``min(finish + retain_s, retain_until_s)`` after its
finish leaves the batch without freeing; ``begin_step`` frees the retained allocations
due by its time first, in due order. A release is a decision like an arrival: fast mode
cuts its runs at the step boundary at or after ``next_release_s()``, and an idle replica
wakes then. A restart (``reset_allocator``, ``take_all``) forgets them. KV inbound
from a disaggregated fleet's prefill replica (``sim.engine.inbound``) is reserved and
joins the batch at step boundaries, after growth and before admission; its landing is a
decision as a release is.

This module composes steps; the work is split by concern:

* ``sim.engine.running`` -- the waiting queue, the running batch, how requests leave;
* ``sim.engine.admission`` -- admission and placement (who enters, with what memory);
* ``sim.engine.growth`` -- decode growth, its one owner: the decode ticks
  (``sim.engine.ticks``: a step without a decision is O(1) in the batch size), growth
  decisions, preemption, and fast mode's runs. ``Scheduler(..., ticks=False)`` steps
  every group one by one (the reference the property tests compare with).

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

from policies.allocators.base import Allocator
from sim.engine.admission import Admission
from sim.engine.batch import (
    Group,
    OnAdmissionFailure,
    Preemption,
    SchedEvent,
    SchedulerConfig,
    Status,
    Step,
    admission_order,
    remove_group,
)
from sim.engine.growth import Growth
from sim.engine.inbound import Inbound
from sim.engine.offload import OffloadTiers
from sim.engine.running import RunningBatch

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
        self.batch = RunningBatch(config, allocator, on_event, on_retry, on_done)
        self.growth = Growth(self.batch, use_ticks=ticks)
        self.offload = None if config.offload is None else OffloadTiers(config.offload)
        """The replica's KV offload tiers, if the scenario has any."""
        self.admission = Admission(self.batch, self.growth, self.offload)
        self.inbound = Inbound(self.batch, self.growth, self.admission)
        """KV inbound from a disaggregated fleet's prefill replicas (``sim.engine.inbound``)."""

    # -- state, read-only for callers ---------------------------------------------------
    @property
    def allocator(self) -> Allocator:
        return self.batch.allocator

    @property
    def waiting(self) -> deque[Group]:
        return self.batch.waiting

    @property
    def running(self) -> list[Group]:
        """The batch in admission order (the last is the first preemption victim)."""
        return self.batch.running

    @property
    def running_seqs(self) -> int:
        return self.batch.running_seqs

    @property
    def preemptions_total(self) -> int:
        return self.batch.preemptions_total

    @property
    def admitting(self) -> bool:
        """False while a replica drains or is down: nothing is admitted."""
        return self.batch.admitting

    @admitting.setter
    def admitting(self, value: bool) -> None:
        self.batch.admitting = value

    # -- arrivals ---------------------------------------------------------------------
    def drop_callbacks(self) -> None:
        """Forget the event, retry and done callbacks (they usually close over the
        owner, a reference cycle); later events go nowhere."""
        self.batch.drop_callbacks()

    def submit(self, group: Group, now: float) -> None:
        """Queue a request (first arrival or client retry)."""
        config = self.config
        if group.prompt_tokens >= config.max_seq_tokens:
            self.batch.finish(group, now, "rejected-too-long")
            return
        if group.num_seqs > config.max_num_seqs:  # can never be batched here
            self.batch.finish(group, now, "rejected-capacity")
            return
        if group.prompt_tokens < 1:
            raise ValueError(f"request {group.request_id}: prompt_tokens must be >= 1")
        # Generation stops at the maximum sequence length, as serving engines do, and
        # the prefill emits one token even for a request that asks for none; the record
        # keeps output_tokens as the trace said.
        group.target_tokens = max(
            1, min(group.output_tokens, config.max_seq_tokens - group.prompt_tokens)
        )
        group.enqueued_s = now
        group.blocked = None
        self.batch.waiting.append(group)

    def reset_allocator(self, allocator: Allocator) -> None:
        """A restart: every running group loses its KV and waits to be recomputed."""
        batch = self.batch
        self.growth.stop_ticking()
        for g in reversed(list(batch.running)):
            batch.note_reserved(g)
            batch.leave(g)
            g.swapped = False
            batch.requeue(g, count=False)
        batch.forget_held()
        batch.allocator = allocator
        if self.offload is not None:
            self.offload.restart()
        self.growth.reset(allocator)
        for g in batch.waiting:
            g.blocked = None
            if g.swapped:  # host memory goes with the process
                g.swapped = False
                g.held_tokens = g.prompt_tokens + g.generated_tokens

    def take_waiting(self) -> list[Group]:
        """Take every waiting request out of the queue (a drain that redirects its queue
        to other replicas), in queue order. A swapped-out request loses its host copy
        (it leaves this process): it is recomputed wherever it goes next."""
        waiting = self.batch.waiting
        out = list(waiting)
        waiting.clear()
        for g in out:
            _detach(g)
        return out

    def take_all(self) -> list[Group]:
        """Take every request out (the running batch in admission order, then the queue):
        the process is gone (a crash, a killed restart) and its clients see errors. The
        allocator's state is left as it was: the caller replaces it."""
        batch = self.batch
        self.growth.stop_ticking()
        out = []
        for g in list(batch.running):
            batch.note_reserved(g)
            batch.leave(g)
            out.append(g)
        out.extend(batch.waiting)
        batch.waiting.clear()
        batch.forget_held()
        for g in out:
            _detach(g)
        return out

    # -- one step -----------------------------------------------------------------------
    def begin_step(self, now: float) -> Step | None:
        """Free retained allocations due by ``now``, grow decoding groups (preempting
        on failure), admit, compose the step."""
        batch = self.batch
        if batch.held:
            batch.release_due(now)
        growth = self.growth
        config = self.config
        self.admission.expire(now)
        alloc = batch.allocator
        copied0 = alloc.copied_tokens_total()
        step = Step()
        # vLLM caps a prefill chunk only while someone else could use the budget (and,
        # adaptive, never below a fair share of it).
        cap = config.long_prefill_token_threshold
        eligible = len(batch.running) + len(batch.waiting)
        if eligible <= 1:
            cap = 0
        elif cap and config.long_prefill_adaptive:
            cap = max(cap, config.max_num_batched_tokens // eligible)
        per_chunk = config.allocate_per_chunk
        if per_chunk and batch.prefilling:
            growth.grow_in_order(now, step, config.max_num_batched_tokens, cap)
        else:
            growth.grow(now, step)
        # As vLLM does: no admission in a step that had to preempt (unless the batch
        # emptied, which would leave the step with nothing to run). Inbound KV first:
        # its memory is reserved at this boundary, and held once it has landed.
        inbound = self.inbound
        if inbound.active and not (step.preempted and batch.running):
            inbound.step(now, step)
        if batch.admitting and batch.waiting and not (step.preempted and batch.running):
            self.admission.admit(now, step, growth.load(step)[0], cap)
        decode_seqs, kv_tokens = growth.load(step)
        budget = config.max_num_batched_tokens - decode_seqs
        # Per chunk, the passes above scheduled every chunk already.
        for g in [] if per_chunk else batch.prefilling:
            chunk = g.prefill_left_tokens
            if config.chunked_prefill:
                chunk = min(chunk, budget)
                if 0 < cap < chunk:
                    chunk = cap
            elif chunk > budget and step.prefill_chunks:
                continue
            if chunk <= 0:
                break
            step.prefill_chunks.append((g, chunk))
            step.prefill_tokens += chunk
            budget -= chunk
        if not decode_seqs and not step.prefill_chunks:
            growth.cancel_step()
            return None
        step.decode_seqs = decode_seqs
        for g, c in step.prefill_chunks:
            # A group placed per chunk holds what it computed and this chunk.
            kv_tokens += (
                g.held_tokens
                if g.allocates_per_chunk
                else (g.held_tokens - g.prefill_left_tokens + c)
            )
        step.kv_tokens = kv_tokens
        step.stall_s += (alloc.copied_tokens_total() - copied0) * config.copy_s_per_token
        return step

    def end_step(self, step: Step, now: float) -> None:
        """Apply a finished step: prefill progress, one token per group, finishes."""
        batch = self.batch
        growth = self.growth
        growth.end_tick()
        done: list[Group] = []
        joined: list[Group] = []
        for g, chunk in step.prefill_chunks:
            g.prefill_left_tokens -= chunk
            if g.prefill_left_tokens == 0:
                remove_group(batch.prefilling, g)
                g.generated_tokens += 1
                if math.isnan(g.first_token_s):
                    g.first_token_s = now
                if self.offload is not None and g.prefix_hashes:
                    self.offload.store(g.prefix_hashes, g.prompt_tokens)
                if g.generated_tokens >= g.target_tokens:
                    done.append(g)
                else:
                    joined.append(g)
        finished = growth.finished()
        for g in step.stepped:
            g.generated_tokens += 1
            if g.generated_tokens >= g.target_tokens:
                finished.append(g)
            elif growth.ticking:
                joined.append(g)
        if len(finished) > 1:
            finished.sort(key=admission_order)
        self._retire(done, now)
        self._retire(finished, now)
        growth.rejoin(joined)

    def step_decoding(self, step: Step) -> list[Group]:
        """Every group decoding in ``step`` (between ``begin_step`` and ``end_step``), in
        admission order: ticking members and ``step.stepped``. O(batch); for tools."""
        return self.growth.step_decoding(step)

    # -- fast mode --------------------------------------------------------------------
    def steady_steps(self) -> int:
        """How many pure-decode steps can run from now with no decision: no prefill, no
        admission possible, no finish before the last of them, and growth the allocator
        covers without choosing. 0 means: take a real step."""
        batch = self.batch
        if not batch.running or batch.prefilling:
            return 0
        if batch.waiting and batch.admitting and self.admission.possible():
            return 0
        if self.inbound.active and self.inbound.decision_due():
            return 0
        return self.growth.steady_steps()

    def advance(self, steps: int, *, in_step: bool = False) -> None:
        """Apply ``steps`` pure-decode steps to every running group (fast mode). The
        caller guarantees that the run stays inside ``steady_steps()`` as it was at the
        run's start. ``in_step`` also begins the next step of the run (its growth, as
        ``begin_step`` would): the state an observer sees inside that step. The next
        ``advance`` of the run takes it into account; the run's last ``advance`` must
        leave ``in_step`` False before any other call."""
        self.growth.advance(steps, in_step=in_step)

    def finish_ready(self, now: float) -> None:
        """Free groups that have emitted their last token (after ``advance``)."""
        self._retire(self.growth.finished_ready(), now)

    def decode_load(self) -> tuple[int, int]:
        """(decode sequences, KV tokens held) of the running batch."""
        return self.growth.decode_load()

    # -- reading ------------------------------------------------------------------------
    def sync_allocator(self) -> None:
        """Tell the allocator of growth deferred inside sequences' headroom (and bring
        ticking groups' fields up to date); see ``Growth.sync_allocator``."""
        self.growth.sync_allocator()

    def unsynced_tokens(self) -> int:
        """Growth the allocator has not been told of yet: the pool's used tokens are this
        much higher than it reports. O(1) while ticking, O(batch) otherwise."""
        return self.growth.unsynced_tokens()

    def next_release_s(self) -> float:
        """When the next retained allocation is freed or inbound KV lands (inf: none
        will)."""
        release_s = self.batch.next_release_s()
        if self.inbound.landing:
            return min(release_s, self.inbound.next_ready_s())
        return release_s

    def next_timeout_s(self) -> float | None:
        """The earliest time a waiting request times out, if any does."""
        return self.admission.next_timeout_s()

    # -- internals ------------------------------------------------------------------
    def _retire(self, groups: list[Group], now: float) -> None:
        """Groups that emitted their last token leave the batch, ``ok`` (their memory
        freed, or kept until their retention is due)."""
        growth = self.growth
        batch = self.batch
        for g in groups:
            if g.in_batch:
                due_s = min(now + g.retain_s, g.retain_until_s)
                if due_s > now:
                    growth.hold(g, due_s)
                else:
                    growth.drop(g)
                batch.finish(g, now, "ok")


def _detach(g: Group) -> None:
    """``g`` leaves this replica: nothing of it stays here (it holds no memory)."""
    g.seq_ids = []
    g.swapped = False
    g.prefill_left_tokens = 0
    g.blocked = None
