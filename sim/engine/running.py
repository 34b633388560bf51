"""The requests in a scheduler's hands: the waiting queue, the running batch, and how a
request leaves it (finished, refused, failed, retried by its client, requeued after a
preemption). Shared by the scheduler's admission (``sim.engine.admission``) and its
growth owner (``sim.engine.growth``); neither keeps a copy of this state.

A group in the batch is *placed*: its sequences hold allocator memory. Taking it out
(``release``) frees that memory; a group still on the decode ticks must leave them first
(``Growth.drop`` does both). A finished group with retention (``Group.retain_s``) leaves
without freeing (``hold``): its sequences stay allocated, owned by no request, until
``release_due`` frees them (or a restart replaces the allocator: ``forget_held``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

from policies.allocators.base import Allocator, Failure, FailureCause
from sim.engine.batch import (
    EventKind,
    Group,
    SchedEvent,
    SchedulerConfig,
    Status,
    remove_group,
)


def _ignore_event(event: SchedEvent) -> None:
    pass


def _ignore_retry(group: Group, delay_s: float) -> None:
    pass


def _ignore_done(group: Group) -> None:
    pass


class RunningBatch:
    """Waiting queue and running batch of one scheduler, with the callbacks that report
    what happens to requests (events, client retries, ends)."""

    def __init__(
        self,
        config: SchedulerConfig,
        allocator: Allocator,
        on_event: Callable[[SchedEvent], None],
        on_retry: Callable[[Group, float], None],
        on_done: Callable[[Group], None],
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
        self.preemptions_total = 0
        self.on_event = on_event
        self.on_retry = on_retry
        self.on_done = on_done
        self._next_order = 0
        self.held: list[tuple[float, int, list[int]]] = []
        """Retained allocations: a heap of (due time, tie-breaker, sequence ids); a due
        time of inf is never freed (a leak)."""
        self._held_tie = 0

    def drop_callbacks(self) -> None:
        """Forget the callbacks (they usually close over the owner, a reference cycle);
        later events go nowhere."""
        self.on_event = _ignore_event
        self.on_retry = _ignore_retry
        self.on_done = _ignore_done

    def report(self, kind: EventKind, g: Group, failure: Failure, pending_tokens: int) -> None:
        """An allocation failure of ``g``, as the allocator recorded it."""
        self.on_event(
            SchedEvent(
                kind,
                g.request_id,
                failure.need_tokens,
                failure.free_tokens,
                failure.largest_free_extent_tokens,
                failure.cause,
                "",
                pending_tokens,
            )
        )

    # -- membership ---------------------------------------------------------------------
    def join(self, g: Group) -> None:
        """A placed group enters the batch (last in admission order)."""
        self.note_reserved(g)
        self.running.append(g)
        self.running_seqs += g.num_seqs
        g.in_batch = True
        g.order = self._next_order
        self._next_order += 1
        if g.prefill_left_tokens:
            self.prefilling.append(g)

    def release(self, g: Group) -> None:
        """Take ``g`` out of the batch and free its memory (it must not be ticking)."""
        self.note_reserved(g)
        free = self.allocator.free
        for sid in g.seq_ids:
            free(sid)
        self.leave(g)

    def leave(self, g: Group) -> None:
        """Take ``g`` out of the batch without freeing (its memory is gone already)."""
        assert not g.tick_id, "a ticking group must leave the decode ticks first"
        remove_group(self.running, g)
        self.running_seqs -= g.num_seqs
        g.in_batch = False
        if g.prefill_left_tokens:
            remove_group(self.prefilling, g)

    def hold(self, g: Group, due_s: float) -> None:
        """Take ``g`` out of the batch keeping its memory until ``due_s`` (it must not
        be ticking, and the allocator must know all its growth)."""
        self.note_reserved(g)
        heapq.heappush(self.held, (due_s, self._held_tie, g.seq_ids))
        self._held_tie += 1
        self.leave(g)

    def next_release_s(self) -> float:
        """When the next retained allocation is freed (inf: none will be)."""
        held = self.held
        return held[0][0] if held else math.inf

    def release_due(self, now: float) -> None:
        """Free the retained allocations due by ``now``, in due order."""
        held = self.held
        free = self.allocator.free
        while held and held[0][0] <= now:
            for sid in heapq.heappop(held)[2]:
                free(sid)

    def forget_held(self) -> None:
        """The allocator is being replaced (a restart): retained memory goes with it."""
        self.held = []

    def note_reserved(self, g: Group) -> None:
        ids = g.seq_ids
        reserved_of = self.allocator.reserved_tokens
        r = reserved_of(ids[0]) if len(ids) == 1 else sum(reserved_of(sid) for sid in ids)
        if r > g.peak_reserved_tokens:
            g.peak_reserved_tokens = r

    def requeue(self, g: Group, *, count: bool) -> None:
        """A preempted (or restarted) group waits at the head of the queue."""
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

    # -- ends ---------------------------------------------------------------------------
    def reject(self, g: Group, now: float, cause: FailureCause) -> None:
        self._retry_or_finish(g, now, "rejected-" + cause)  # type: ignore[arg-type]

    def fail(self, g: Group, now: float, cause: FailureCause) -> None:
        self._retry_or_finish(g, now, "failed-" + cause)  # type: ignore[arg-type]

    def _retry_or_finish(self, g: Group, now: float, status: Status) -> None:
        delay_s = self.config.retry.next_try(g)
        if delay_s is not None:
            self.on_retry(g, delay_s)
            return
        self.finish(g, now, status)

    def finish(self, g: Group, now: float, status: Status) -> None:
        g.end(status, now)
        self.on_done(g)
