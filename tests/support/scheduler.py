"""One driver of the iteration-level scheduler for tests (stories and properties alike).

:class:`SchedulerDriver` runs a :class:`~sim.engine.scheduler.Scheduler` the way the
replica's exact mode does, on a hand-made clock: queue what has arrived, ``begin_step``,
let the step's time pass (``STEP_S`` plus the stall it reports), ``end_step``; when
nothing runs, jump to the next arrival. Arrivals and client retries wait on a heap
ordered by time, ties by a counter. Times are rounded to 1e-9 s so hand-checked stories
read as round numbers.

It keeps what a story asserts (``steps``, ``events``, ``retries``, ``done``) and ``log``,
everything observable in order (steps, events with the pool at that instant, finished
records, pool samples at the ``probes`` steps), for properties that compare two runs
with ``==``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from policies.allocators.base import Allocator, AllocStats
from sim.engine.batch import Group, SchedEvent, SchedulerConfig
from sim.engine.scheduler import Scheduler

STEP_S = 0.01
"""Seconds every step takes, before its stall."""


@dataclass(frozen=True)
class StepLog:
    """One step as the driver saw it."""

    end_s: float
    prefill: list[tuple[int, int]]
    """(request id, chunk tokens) prefilled in the step."""
    decoding: list[int]
    """Request ids decoding in the step, in admission order."""
    decode_seqs: int
    kv_tokens: int
    stall_s: float


def _nan_as_none(x: float) -> float | None:
    """Logs compare with ``==``: NaN equals itself only as the same object, which a
    compiled build (unboxed floats) does not keep."""
    return None if math.isnan(x) else x


def done_record(g: Group) -> tuple[Any, ...]:
    """What a finished group's request record holds, comparable with ``==``."""
    return (
        g.request_id,
        g.status,
        _nan_as_none(g.admit_s),
        _nan_as_none(g.first_token_s),
        _nan_as_none(g.finish_s),
        g.preemptions,
        g.retries,
        g.peak_reserved_tokens,
        g.cached_tokens,
    )


class SchedulerDriver:
    """A scheduler over ``allocator`` on a hand-made clock (see the module docstring).

    ``probes``: step indices (0-based) after which the pool is synced and sampled into
    ``log``, as a periodic sample would. ``before_end_step``: called after each step's
    time passes, before ``end_step`` applies it (a spy: compiled Scheduler methods cannot
    be patched)."""

    def __init__(
        self,
        config: SchedulerConfig,
        allocator: Allocator,
        *,
        ticks: bool = True,
        probes: Iterable[int] = (),
    ) -> None:
        self.now = 0.0
        self.steps: list[StepLog] = []
        self.events: list[tuple[float, SchedEvent]] = []
        self.retries: list[tuple[float, int, float]] = []
        """(time, request id, backoff) of every client retry."""
        self.done: list[Group] = []
        self.log: list[tuple[Any, ...]] = []
        self.probes = frozenset(probes)
        self.before_end_step: Callable[[], None] | None = None
        self._pending: list[tuple[float, int, Group]] = []
        self._tie = 0
        self.sched = Scheduler(
            config,
            allocator,
            on_event=self._on_event,
            on_retry=self._on_retry,
            on_done=self._on_done,
            ticks=ticks,
        )

    # -- the scheduler's callbacks ------------------------------------------------------
    def _on_event(self, e: SchedEvent) -> None:
        self.events.append((self.now, e))
        # The growth pending at the event differs by path (ticks or not); the pool it
        # implies (the allocator's stats with it applied) must not.
        event = (e.kind, e.request_id, e.need_tokens, e.free_tokens)
        pool = self.pool_at_failure(e.pending_tokens) if e.kind != "preemption" else None
        self.log.append(
            ("event", self.now, event, e.largest_free_extent_tokens, e.cause, e.detail, pool)
        )

    def _on_retry(self, g: Group, delay_s: float) -> None:
        self.retries.append((self.now, g.request_id, delay_s))
        self._push(round(self.now + delay_s, 9), g)

    def _on_done(self, g: Group) -> None:
        self.done.append(g)
        self.log.append(("done", *done_record(g)))

    def _push(self, t: float, g: Group) -> None:
        heapq.heappush(self._pending, (t, self._tie, g))
        self._tie += 1

    # -- driving ------------------------------------------------------------------------
    def add(self, *groups: Group) -> SchedulerDriver:
        """Queue ``groups`` to arrive at their ``arrival_s``."""
        for g in groups:
            self._push(g.arrival_s, g)
        return self

    def run(self, max_iterations: int = 20_000, until_s: float | None = None) -> SchedulerDriver:
        """Run until nothing is left (or the clock reaches ``until_s``; ``run`` again to
        go on). Fails if it has not settled after ``max_iterations`` steps and jumps."""
        sched = self.sched
        for _ in range(max_iterations):
            if until_s is not None and self.now >= until_s:
                return self
            while self._pending and self._pending[0][0] <= self.now + 1e-12:
                sched.submit(heapq.heappop(self._pending)[2], self.now)
            step = sched.begin_step(self.now)
            if step is None:
                if not self._pending:
                    return self
                self.now = self._pending[0][0]
                continue
            decoding = [g.request_id for g in sched.step_decoding(step)]
            self.now = round(self.now + STEP_S + step.stall_s, 9)
            prefill = [(g.request_id, c) for g, c in step.prefill_chunks]
            self.steps.append(
                StepLog(self.now, prefill, decoding, step.decode_seqs, step.kv_tokens, step.stall_s)
            )
            self.log.append(
                (
                    "step",
                    prefill,
                    decoding,
                    step.decode_seqs,
                    step.kv_tokens,
                    round(step.stall_s, 12),
                )
            )
            if self.before_end_step is not None:
                self.before_end_step()
            sched.end_step(step, self.now)
            if len(self.steps) - 1 in self.probes:
                self.log.append(("sample", self.pool(), len(sched.running)))
        raise AssertionError(f"the scheduler did not settle in {max_iterations} iterations")

    # -- what tests read ----------------------------------------------------------------
    def pool(self) -> AllocStats:
        """The allocator's stats once deferred growth is applied (the scheduler may tell
        the allocator of growth inside a sequence's headroom lazily), as a periodic
        sample reads them."""
        self.sched.sync_allocator()
        return self.sched.allocator.stats()

    def pool_at_failure(self, unsynced: int) -> tuple[int, int, int]:
        """(used, reserved unused, free) as a failure-time sample reads them: nothing
        synced, the growth not yet told to the allocator (``SchedEvent.pending_tokens``)
        counted as used."""
        s = self.sched.allocator.stats()
        return (s.used_tokens + unsynced, s.reserved_unused_tokens - unsynced, s.free_tokens)

    def kinds(self) -> list[tuple[str, int]]:
        """(event kind, request id) of every event, in order."""
        return [(e.kind, e.request_id) for _, e in self.events]

    def by_id(self) -> dict[int, Group]:
        """Finished groups by request id."""
        return {g.request_id: g for g in self.done}
