"""One serving replica as a SimPy process: a Scheduler over an Allocator, timed by a
LatencyModel, with uptime and restarts.

Time advancement. In *exact* mode the process takes one SimPy event per iteration. In
*fast* mode, after each real step it asks the scheduler how many pure-decode steps need
no decision (``Scheduler.steady_steps``), computes their end times in one vectorised
call, and sleeps until the last of them. An arrival or a restart request wakes it early:
it applies the steps completed by now, lets the step in progress finish (continuous
batching admits at step boundaries) and carries on with real steps. Observers call
:meth:`Replica.observe`, which applies completed steps without disturbing the plan.
Both modes make the same allocator calls in the same order, so they give the same
per-request results up to float rounding of summed step times.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import simpy

from policies.allocators.base import Allocator
from sim.latency import LatencyModel
from sim.scheduler import Group, SchedEvent, Scheduler, SchedulerConfig

RestartMode = Literal["drain", "kill"]


@dataclass(slots=True)
class _Plan:
    """A run of pure-decode steps: ``ends_s[i]`` is when step i+1 ends, from ``start_s``."""

    start_s: float
    ends_s: np.ndarray
    applied: int = 0

    def completed_by(self, now: float) -> int:
        return int(np.searchsorted(self.ends_s, now - self.start_s, side="right"))


class ReplicaHooks(Protocol):
    """What a replica reports to (the metrics recorder, later the fleet)."""

    def on_event(self, replica: Replica, event: SchedEvent) -> None: ...

    def on_done(self, replica: Replica, group: Group) -> None: ...

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None: ...


class _NoHooks:
    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        pass

    def on_done(self, replica: Replica, group: Group) -> None:
        pass

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        pass


class Replica:
    """A SimPy process serving requests submitted with :meth:`submit`."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        config: SchedulerConfig,
        make_allocator: Callable[[], Allocator],
        latency: LatencyModel,
        *,
        hooks: ReplicaHooks | None = None,
        exact: bool = False,
        max_macro_steps: int = 4096,
        initial_uptime_s: float = 0.0,
    ) -> None:
        self.env = env
        self.replica_id = replica_id
        self.latency = latency
        self.exact = exact
        self.max_macro_steps = max_macro_steps
        self.hooks: ReplicaHooks = hooks or _NoHooks()
        self._make_allocator = make_allocator
        self.sched = Scheduler(
            config,
            make_allocator(),
            on_event=lambda e: self.hooks.on_event(self, e),
            on_retry=self._retry,
            on_done=lambda g: self.hooks.on_done(self, g),
        )
        self.started_s = env.now - initial_uptime_s
        self.up = True
        self.restarts = 0
        self.steps_total = 0
        self.wakeups_total = 0
        self._plan: _Plan | None = None
        self._wake: simpy.Event | None = None
        self._restart: tuple[RestartMode, float] | None = None
        self._back_up: simpy.Event | None = None
        self.process = env.process(self._run())

    # -- the outside world ---------------------------------------------------------
    @property
    def allocator(self) -> Allocator:
        return self.sched.allocator

    @property
    def uptime_s(self) -> float:
        return self.env.now - self.started_s if self.up else 0.0

    def submit(self, group: Group) -> None:
        """A request arrives now."""
        self.sched.submit(group, self.env.now)
        self._poke()

    def request_restart(self, mode: RestartMode, downtime_s: float) -> simpy.Event:
        """Restart at the next step boundary: ``kill`` drops the running batch (its
        requests wait and are recomputed), ``drain`` stops admitting and restarts when
        the batch is empty. The process is down for ``downtime_s`` (model load), then
        comes back with a fresh allocator. Returns an event that fires when it is back
        up (a request while one is pending returns the pending one)."""
        if self._restart is None and self.up:
            self._restart = (mode, downtime_s)
            self._back_up = self.env.event()
            self._poke()
        assert self._back_up is not None
        return self._back_up

    def observe(self) -> None:
        """Bring the scheduler's state up to now (apply decode steps completed inside a
        fast-mode run) without changing the plan."""
        plan = self._plan
        if plan is not None:
            m = plan.completed_by(self.env.now)
            if m > plan.applied:
                self.sched.advance(m - plan.applied)
                plan.applied = m

    # -- the process ------------------------------------------------------------------
    def _poke(self) -> None:
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def _retry(self, group: Group, delay_s: float) -> None:
        """A client retries a refused request after ``delay_s``."""
        timer = self.env.timeout(delay_s)
        assert timer.callbacks is not None
        timer.callbacks.append(lambda _: self.submit(group))

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env, sched = self.env, self.sched
        while True:
            if self._restart is not None:
                mode, downtime_s = self._restart
                if mode == "kill" or not sched.running:
                    yield from self._go_down(mode, downtime_s)
                    continue
                sched.admitting = False
            step = sched.begin_step(env.now)
            if step is None:
                if self._restart is not None:  # a drain just emptied the batch
                    continue
                # Idle with work queued would wait forever: that is a scheduler bug.
                assert not (sched.waiting and sched.admitting), "scheduler stalled"
                self._wake = env.event()
                yield self._wake
                self._wake = None
                self.wakeups_total += 1
                continue
            dt = self.latency.step_time_s(step.prefill_tokens, step.decode_seqs, step.kv_tokens)
            yield env.timeout(dt + step.stall_s)
            sched.end_step(step, env.now)
            self.steps_total += 1
            if not self.exact and self._restart is None:
                yield from self._macro()

    def _macro(self) -> Generator[simpy.Event, Any, None]:
        env, sched = self.env, self.sched
        k = min(sched.steady_steps(), self.max_macro_steps)
        if k < 2:
            return
        seqs, kv0 = sched.decode_load()
        j = np.arange(1, k + 1, dtype=np.int64)
        ends = np.cumsum(
            self.latency.step_times_s(
                np.zeros(k, dtype=np.int64), np.full(k, seqs, dtype=np.int64), kv0 + j * seqs
            )
        )
        deadline = sched.next_timeout_s()
        if deadline is not None and deadline <= env.now:
            return  # a timeout is already due: the next real step enforces it
        if deadline is not None:  # the boundary at/after a queue timeout is a decision
            k = min(k, int(np.searchsorted(ends, deadline - env.now, side="left")) + 1)
            ends = ends[:k]
        plan = _Plan(env.now, ends)
        self._plan = plan
        wake = self._wake = env.event()
        yield env.timeout(float(ends[-1])) | wake
        self._wake = None
        self.wakeups_total += 1
        self.observe()
        target = k
        if wake.triggered and plan.applied < k:
            last_end_s = plan.start_s + (float(ends[plan.applied - 1]) if plan.applied else 0.0)
            if env.now > last_end_s:
                # Woken inside a step: it still completes, then we decide.
                target = plan.applied + 1
                yield env.timeout(max(0.0, plan.start_s + float(ends[plan.applied]) - env.now))
            else:  # woken exactly on a step boundary: decide now
                target = plan.applied
        if plan.applied < target:
            sched.advance(target - plan.applied)
            plan.applied = target
        self._plan = None
        self.steps_total += plan.applied
        sched.finish_ready(env.now)

    def _go_down(self, mode: RestartMode, downtime_s: float) -> Generator[simpy.Event, Any, None]:
        self._restart = None
        self.restarts += 1
        self.hooks.on_restart(self, mode, downtime_s)
        self.sched.reset_allocator(self._make_allocator())
        self.sched.admitting = False
        self.up = False
        yield self.env.timeout(downtime_s)
        self.up = True
        self.started_s = self.env.now
        self.sched.admitting = True
        if self._back_up is not None:
            self._back_up.succeed()
            self._back_up = None
