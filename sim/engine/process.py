"""A replica's own SimPy process: the drivers (``sim.engine.driver.Driver``) of a single
replica and of an exact-mode fleet's replicas -- :class:`ExactProcess` (one SimPy event
per step) and :class:`FastProcess` (closed-form runs of decode steps, few events).

Time advancement. In *exact* mode the process takes one SimPy event per iteration and
requests arrive as SimPy events (``Replica.feed`` starts an arrival process). In *fast* mode:

* After each real step it asks the scheduler how many pure-decode steps need no
  decision (``Scheduler.steady_steps``: O(1) on the decode ticks) and cuts that run at
  the step boundary at or after the next decision time (an arrival that could be
  admitted, a client retry, a queue timeout). The run's duration and the step in which
  a time falls are closed forms of the latency model (``decode_run_s``,
  ``steps_within_s``), so a run costs O(1) whatever its length.
* The replica keeps its own clock, ahead of ``env.now``: it applies real steps and runs
  that end strictly before the next event of any other process (``env.peek()``: the
  metric sampler, a restart, the end of the run, later a router) without yielding, and
  takes fed requests from its list at their arrival times. Nobody can observe the
  replica between its state changes, so this is the same history with far fewer SimPy
  events (a few per simulated hour instead of several per request).
* A run that crosses another process's event is planned (``RunPlan``) and slept through.
  An observer (``Replica.observe``) sees the steps completed by then and, strictly inside a step,
  that step begun (its growth applied), exactly as in exact mode; a restart request
  wakes the replica, the step in progress completes, then it decides.

At one instant, requests arriving then are queued first (exact mode schedules arrival
and retry timers URGENT), then other processes act (a sample counts them as waiting),
then the replica; between an arrival and a retry at the same instant, the one whose
timer was set first. Both modes make the same allocator calls in the same order and
sample the same states, so they give the same requests, samples, events and summary up
to float rounding of summed step times.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from sim.engine.batch import Group
from sim.engine.driver import Driver
from sim.engine.events import Alarm, ArrivalTimer, RunPlan
from sim.engine.feed import Feed
from sim.engine.simpy_adapter import horizon_s, queue_of

if TYPE_CHECKING:
    from sim.engine.replica import Replica, RestartMode


class _Process(Driver):
    """What both process drivers share: the replica's SimPy process, its alarm, and a
    restart's going down and coming back on SimPy timers."""

    def __init__(self) -> None:
        self._generators: list[Generator[simpy.Event, Any, None]] = []
        self.process: simpy.Process | None = None
        self._wake: Alarm | None = None

    def _start(self, replica: Replica, run: Generator[simpy.Event, Any, None]) -> None:
        self.r = replica
        self.env = replica.env
        self._generators.append(run)
        self.process = self.env.process(run)

    def clock_s(self) -> float:
        """``env.now`` (as SimPy keeps it: the replica's first clock reading is the
        environment's own start time)."""
        return self.env.now

    def restart_requested(self, changed: bool) -> None:
        if changed:
            self._poke()

    def wake(self) -> None:
        """An idle replica decides now; a stepping one at its step's end anyway."""
        self._poke()

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None:
            wake.poke()

    def close(self) -> None:
        for generator in self._generators:
            generator.close()
        self._generators.clear()
        self._wake = None

    def _go_down(self, mode: RestartMode, downtime_s: float) -> Generator[simpy.Event, Any, None]:
        r, env = self.r, self.env
        self._before_down()
        if not r._take_down(mode, downtime_s):
            return  # gone for good (scaled down): the process ends
        back_s = env.now + downtime_s
        yield from self._while_down(back_s)
        yield env.timeout(back_s - env.now)
        r._come_back(float(env.now))

    def _before_down(self) -> None:
        """Requests that arrived by now are queued before the restart (fast mode)."""

    def _while_down(self, back_s: float) -> Generator[simpy.Event, Any, None]:
        """Until ``back_s``: requests keep arriving (fast mode: and may be refused)."""
        yield from ()


class ExactProcess(_Process):
    """One SimPy event per iteration (the reference for fast mode); fed requests arrive
    as SimPy events, and clients retry on the replica on a SimPy timer."""

    def attach(self, replica: Replica) -> None:
        self._start(replica, self._run())

    def horizon_s(self) -> float:
        return float(self.env.now)

    def next_arrival_s(self) -> float:
        return math.inf

    def submit(self, group: Group, next_arrival_s: float) -> None:
        self.r.sched.submit(group, self.env.now)
        self._poke()

    def feed(self, groups: list[Group]) -> None:
        arrivals = self._arrivals(groups)
        self._generators.append(arrivals)
        self.env.process(arrivals)

    def queue_due(self) -> None:
        """Nothing held: requests are queued at their arrival events."""

    def retry(self, group: Group, delay_s: float) -> None:
        r = self.r
        if r._outlet.takes_retries:
            r._outlet.on_retry(r, group, delay_s)
            return
        timer = ArrivalTimer(self.env, delay_s)
        assert timer.callbacks is not None
        timer.callbacks.append(lambda _: r.submit(group))

    def _arrivals(self, groups: list[Group]) -> Generator[simpy.Event, Any, None]:
        env, r = self.env, self.r
        due_s = env.now  # the arrival time waited for (env.now may differ by a rounding)
        for g in groups:
            if g.arrival_s > due_s:
                yield ArrivalTimer(env, max(0.0, g.arrival_s - env.now))
                due_s = g.arrival_s
            r.submit(g)

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env, r = self.env, self.r
        sched = r.sched
        while True:
            r._t = env.now
            if r._restart is not None:
                mode, downtime_s = r._restart
                if mode != "drain" or not sched.running:
                    yield from self._go_down(mode, downtime_s)
                    if not r.up:
                        return  # gone for good
                    continue
                sched.admitting = False
            step = sched.begin_step(env.now)
            if step is None:
                if r._restart is not None:  # a drain just emptied the batch
                    continue
                release_s = r._next_release_s()
                # A release is a decision, as an arrival.
                delay_s = max(0.0, release_s - env.now) if release_s < math.inf else None
                self._wake = Alarm(env, delay_s)
                yield self._wake
                self._wake = None
                r.wakeups_total += 1
                continue
            yield env.timeout(r._step_time_s(step) + step.stall_s)
            sched.end_step(step, env.now)
            r.steps_total += 1


class FastProcess(_Process):
    """Real steps where a decision is due, closed-form runs of pure-decode steps in
    between, and SimPy events only where another process could act in between (the
    module docstring); fed requests and own client retries held in a ``Feed``."""

    def attach(self, replica: Replica) -> None:
        self._events = queue_of(replica.env)
        """SimPy's event heap, read by :meth:`horizon_s` (``sim.engine.simpy_adapter``)."""
        self._feed = Feed(float(replica.env.now))
        """Fed requests and own client retries not queued yet."""
        self._yielded_at_s = -math.inf
        """The instant the replica last let other processes act first (once per instant)."""
        self._start(replica, self._run())

    def horizon_s(self) -> float:
        """``env.peek()``, the time of the next event of any process, without a Python
        call (asked a few times per request)."""
        return horizon_s(self._events)

    def next_arrival_s(self) -> float:
        """When the next fed request or client retry arrives (inf: none pending)."""
        return self._feed.next_s(self.r._t)

    def submit(self, group: Group, next_arrival_s: float) -> None:
        r = self.r
        now = self.env.now
        self._feed.submit_due(now, r.sched)
        self._feed.caller_next_s = next_arrival_s
        r.sched.submit(group, now)
        plan = r._plan
        if plan is not None:
            m = plan.completed_by(now)
            if m + 1 >= plan.steps and plan.end_s(m) < now:
                # Strictly inside the run's last step: the replica decides at its end
                # anyway (a run planned up to this arrival ends there): no wake-up.
                return
        self._poke()

    def feed(self, groups: list[Group]) -> None:
        self._feed.extend(groups, float(self.env.now))
        self._poke()

    def queue_due(self) -> None:
        if self._feed.pending():
            self._feed.submit_due(self.env.now, self.r.sched)

    def retry(self, group: Group, delay_s: float) -> None:
        r = self.r
        if r._outlet.takes_retries:
            r._outlet.on_retry(r, group, delay_s)
            return
        self._feed.add_retry(r._t + delay_s, r._t, group)

    def close(self) -> None:
        super().close()
        self._feed.clear()

    def _before_down(self) -> None:
        self._feed.submit_due(self.env.now, self.r.sched)

    def _while_down(self, back_s: float) -> Generator[simpy.Event, Any, None]:
        env, r = self.env, self.r
        while (nxt := self.next_arrival_s()) < back_s:
            yield env.timeout(nxt - env.now)
            r._t = env.now
            self._feed.submit_due(env.now, r.sched)

    def _run(self) -> Generator[simpy.Event, Any, None]:
        """``env.peek()`` (:meth:`horizon_s`) is the horizon: the next event of any other
        process. The replica applies its own state changes strictly before it without
        yielding (nobody can observe them sooner) and yields to reach anything at or
        past it."""
        env, r = self.env, self.r
        sched = r.sched
        while True:
            if r._restart is not None:
                mode, downtime_s = r._restart
                if mode != "drain" or not sched.running:
                    if r._t > env.now:
                        yield env.timeout(r._t - env.now)
                    yield from self._go_down(mode, downtime_s)
                    if not r.up:
                        return  # gone for good
                    continue
                sched.admitting = False
            t = r._t
            if self.horizon_s() <= t and self._yielded_at_s != t:
                # Another process acts at this very instant: it goes first (a sample
                # at t sees the requests arrived by t queued, not yet admitted). Once
                # per instant: events queued at t after this wait (another replica
                # waiting the same way) act after it, or two replicas would wait for
                # each other forever.
                self._yielded_at_s = t
                yield env.timeout(t - env.now)
                continue
            self._feed.submit_due(t, sched)
            step = sched.begin_step(t)
            if step is None:
                if r._restart is not None:  # a drain just emptied the batch
                    continue
                release_s = r._next_release_s()
                nxt = min(self.next_arrival_s(), release_s)
                if nxt < self.horizon_s():
                    r._t = nxt
                    continue
                wake = self._wake = Alarm(env, None if nxt == math.inf else nxt - env.now)
                yield wake
                self._wake = None
                r._t = env.now
                r.wakeups_total += 1
                continue
            end_s = t + r._step_time_s(step) + step.stall_s
            if end_s >= self.horizon_s():
                yield env.timeout(end_s - env.now)
            r._t = end_s
            sched.end_step(step, end_s)
            r.steps_total += 1
            if r._restart is None:
                plan = r._macro()
                if plan is not None:
                    yield from self._sleep_through(plan)

    def _sleep_through(self, plan: RunPlan) -> Generator[simpy.Event, Any, None]:
        """Sleep until a run another process may observe ends (or a restart request wakes
        the replica: the step in progress completes, then it decides)."""
        env, r = self.env, self.r
        sched = r.sched
        r._plan = plan
        wake = self._wake = Alarm(env, plan.end_s(plan.steps) - env.now)
        yield wake
        self._wake = None
        r.wakeups_total += 1
        r.observe()
        target = plan.steps
        if wake.poked and plan.applied < target:
            last_end_s = plan.end_s(plan.applied)
            if env.now > last_end_s:
                # Woken inside a step: it still completes, then we decide.
                target = plan.applied + 1
                yield env.timeout(max(0.0, plan.end_s(target) - env.now))
            else:  # woken exactly on a step boundary: decide now
                target = plan.applied
        if plan.applied < target or plan.in_step:
            sched.advance(target - plan.applied)
            plan.applied = target
        r._plan = None
        r._t = env.now
        r._close_run(plan, env.now)
