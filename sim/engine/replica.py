"""One serving replica as a SimPy process: a Scheduler over an Allocator, timed by a
LatencyModel, with uptime and restarts.

Time advancement. In *exact* mode the process takes one SimPy event per iteration and
requests arrive as SimPy events (``feed`` starts an arrival process). In *fast* mode:

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
  An observer (``observe``) sees the steps completed by then and, strictly inside a step,
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
from collections.abc import Callable, Generator
from typing import Any, Literal

import simpy

from policies.allocators.base import Allocator
from sim.engine.events import Alarm, ArrivalTimer, RunPlan
from sim.engine.feed import Feed
from sim.engine.outlet import ReplicaOutlet
from sim.engine.scheduler import Group, Scheduler, SchedulerConfig, Step
from sim.engine.simpy_adapter import horizon_s, queue_of
from sim.engine.view import ReplicaView
from sim.latency.base import LatencyModel, OutOfRange

RestartMode = Literal["drain", "kill", "lose"]
"""``drain``: stop admitting, go down when the batch is empty. ``kill``: go down at the
next step boundary; the batch waits here and is recomputed after. ``lose``: the process
dies at the next step boundary (a crash, a killed restart in a fleet): every request it
holds goes to its outlet's ``on_lost`` (its clients see an error)."""


class Replica:
    """A SimPy process serving requests submitted with :meth:`submit` or :meth:`feed`."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        config: SchedulerConfig,
        make_allocator: Callable[[], Allocator],
        latency: LatencyModel,
        *,
        outlet: ReplicaOutlet | None = None,
        exact: bool = False,
        max_macro_steps: int = 4096,
        initial_uptime_s: float = 0.0,
        out_of_range: OutOfRange | None = None,
    ) -> None:
        self.env = env
        self.replica_id = replica_id
        self.latency = latency
        self.exact = exact
        self.max_macro_steps = max_macro_steps
        self._run_s = latency.decode_run_s
        self._within = latency.steps_within_s
        self._out_of_range = out_of_range
        """Where the steps simulated outside the latency model's validity range are
        counted (the run's, shared by a pool's replicas; None: not counted)."""
        out: ReplicaOutlet = outlet if outlet is not None else ReplicaOutlet()
        self._outlet = out
        """Where everything is reported (``sim.engine.outlet``): one object, the owner's."""
        self._make_allocator = make_allocator
        self.sched = Scheduler(
            config,
            make_allocator(),
            on_event=lambda e: out.on_event(self, e),
            on_retry=self._retry,
            on_done=lambda g: out.on_done(self, g),
        )
        self.started_s = env.now - initial_uptime_s
        self.up = True
        self.accepting = True
        """Whether a router may send it requests (a fleet clears it while the replica
        warms up or drains); the replica itself ignores it."""
        self._capacity_of: Allocator | None = None
        """The allocator ``_capacity_tokens`` was read from (a restart replaces it)."""
        self._capacity_tokens = 0
        self.restarts = 0
        self.steps_total = 0
        self.wakeups_total = 0
        self._t = env.now
        """The replica's own clock: at or ahead of ``env.now`` (fast mode runs ahead up
        to the next event of any other process)."""
        self._events = queue_of(env)
        """SimPy's event heap, read by :meth:`_horizon_s` (``sim.engine.simpy_adapter``)."""
        self._feed = Feed(float(env.now))
        """Fast mode: fed requests and own client retries not queued yet."""
        self._yielded_at_s = -math.inf
        """The instant fast mode last let other processes act first (once per instant)."""
        self._plan: RunPlan | None = None
        self._wake: Alarm | None = None
        self._restart: tuple[RestartMode, float] | None = None
        self._back_up: simpy.Event | None = None
        self._generators: list[Generator[simpy.Event, Any, None]] = []
        self.process: simpy.Process | None = None
        self._start()

    def _start(self) -> None:
        """Start the replica's SimPy process (a driven replica has none)."""
        self._generators.append(self._run_exact() if self.exact else self._run_fast())
        self.process = self.env.process(self._generators[0])

    def _clock_s(self) -> float:
        """The time observers read the replica at: ``env.now`` (a driven replica: its
        driver's clock)."""
        return float(self.env.now)

    # -- the outside world ---------------------------------------------------------
    @property
    def allocator(self) -> Allocator:
        return self.sched.allocator

    @property
    def capacity_tokens(self) -> int:
        """KV slots in the pool now (fixed for an allocator's life: read once per
        allocator)."""
        alloc = self.sched.allocator
        if alloc is not self._capacity_of:
            self._capacity_of = alloc
            self._capacity_tokens = alloc.stats().capacity_tokens
        return self._capacity_tokens

    @property
    def view(self) -> ReplicaView:
        """What routers and policies may read of this replica now (read-only, lazy).
        A new small object per call: the replica keeps no reference to it (no cycle)."""
        return ReplicaView(self)

    @property
    def back_up(self) -> simpy.Event | None:
        """The event that fires when a pending restart is over (None: none pending)."""
        return self._back_up

    @property
    def now_s(self) -> float:
        """The replica's time: ``env.now``, or later while fast mode runs ahead."""
        return max(self._t, self._clock_s())

    @property
    def uptime_s(self) -> float:
        return self.now_s - self.started_s if self.up else 0.0

    def submit(self, group: Group, next_arrival_s: float = math.inf) -> None:
        """A request arrives now (``env.now``), after any fed request due by now: a
        caller (a router) hands it over at its arrival event.

        ``next_arrival_s``: when the caller's next request may arrive (inf: unknown or
        none). Fast mode cuts its runs of decode steps there, as it does at the next
        request of its own feed, instead of planning past it and being woken inside a
        step: a caller that knows its trace's times makes a routed replica nearly as
        cheap as a fed one. A stale hint (not after the replica's clock) is ignored."""
        now = self.env.now
        if self.exact:
            self.sched.submit(group, now)
            self._poke()
            return
        self._feed.submit_due(now, self.sched)
        self._feed.caller_next_s = next_arrival_s
        self.sched.submit(group, now)
        plan = self._plan
        if plan is not None:
            m = plan.completed_by(now)
            if m + 1 >= plan.steps and plan.end_s(m) < now:
                # Strictly inside the run's last step: the replica decides at its end
                # anyway (a run planned up to this arrival ends there): no wake-up.
                return
        self._poke()

    def feed(self, groups: list[Group]) -> None:
        """Requests that arrive at their ``arrival_s`` (sorted, not before now), no
        router in between. Fast mode takes them from the list itself, with no SimPy
        event per arrival; exact mode runs one arrival process (an event per distinct
        arrival time)."""
        if self.exact:
            arrivals = self._arrivals(groups)
            self._generators.append(arrivals)
            self.env.process(arrivals)
            return
        self._feed.extend(groups, float(self.env.now))
        self._poke()

    def close(self) -> None:
        """End this replica for good (the run is over; it must not be stepped again):
        its suspended processes are closed and its scheduler's callbacks dropped, so no
        reference cycle keeps the replica, its requests or the environment alive once
        the caller lets go of them."""
        for generator in self._generators:
            generator.close()
        self._generators.clear()
        self.sched.drop_callbacks()
        self._outlet = ReplicaOutlet()
        self._feed.clear()
        self._plan = None
        self._wake = self._back_up = None

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
        elif self._restart is not None and self._restart[0] == "drain" and mode != "drain":
            # A drain cut short (its timeout, a crash): the rest is killed (or lost) at
            # the next step boundary, and the process is down for this ``downtime_s``.
            self._restart = (mode, downtime_s)
            self._poke()
        assert self._back_up is not None
        return self._back_up

    def take_waiting(self) -> list[Group]:
        """Take this replica's waiting queue (brought up to now first): a drain that
        redirects its queue. The caller submits them elsewhere."""
        self.observe()
        return self.sched.take_waiting()

    def observe(self) -> None:
        """Bring the scheduler's state up to now (apply decode steps completed inside a
        fast-mode run, queue fed requests that have arrived) without changing the plan.
        Its owner calls it before a decider or a sample reads the replica's memory (views
        only read: ``sim.engine.view``); the replica's own reports
        (``sim.engine.outlet``) are made with its state current and never ask for this."""
        if self._feed.pending():
            self._feed.submit_due(self.env.now, self.sched)
        plan = self._plan
        if plan is not None:
            now = self._clock_s()
            m = plan.completed_by(now)
            # Strictly inside a step of the run: that step has begun (its growth is
            # applied), as in exact mode.
            in_step = m < plan.steps and plan.end_s(m) < now
            if m > plan.applied or in_step != plan.in_step:
                self.sched.advance(m - plan.applied, in_step=in_step)
                plan.applied = m
                plan.in_step = in_step

    # -- arrivals ---------------------------------------------------------------------
    def _poke(self) -> None:
        wake = self._wake
        if wake is not None:
            wake.poke()

    def _retry(self, group: Group, delay_s: float) -> None:
        """A client retries a refused request after ``delay_s``: the owner's clients
        (``takes_retries``), or here."""
        if self._outlet.takes_retries:
            self._outlet.on_retry(self, group, delay_s)
            return
        if self.exact:
            timer = ArrivalTimer(self.env, delay_s)
            assert timer.callbacks is not None
            timer.callbacks.append(lambda _: self.submit(group))
            return
        self._feed.add_retry(self._t + delay_s, self._t, group)

    def _arrivals(self, groups: list[Group]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        due_s = env.now  # the arrival time waited for (env.now may differ by a rounding)
        for g in groups:
            if g.arrival_s > due_s:
                yield ArrivalTimer(env, max(0.0, g.arrival_s - env.now))
                due_s = g.arrival_s
            self.submit(g)

    def _next_arrival_s(self) -> float:
        """When the next fed request or client retry arrives (inf: none pending)."""
        return self._feed.next_s(self._t)

    def _submit_due(self, now: float) -> None:
        """Queue every fed request and retry due by ``now``, each at its own time."""
        self._feed.submit_due(now, self.sched)

    # -- the processes ----------------------------------------------------------------
    def _run_exact(self) -> Generator[simpy.Event, Any, None]:
        """One SimPy event per iteration (the reference for fast mode)."""
        env, sched = self.env, self.sched
        while True:
            self._t = env.now
            if self._restart is not None:
                mode, downtime_s = self._restart
                if mode != "drain" or not sched.running:
                    yield from self._go_down(mode, downtime_s)
                    if not self.up:
                        return  # gone for good
                    continue
                sched.admitting = False
            step = sched.begin_step(env.now)
            if step is None:
                if self._restart is not None:  # a drain just emptied the batch
                    continue
                release_s = self._next_release_s()
                # A release is a decision, as an arrival.
                delay_s = max(0.0, release_s - env.now) if release_s < math.inf else None
                self._wake = Alarm(env, delay_s)
                yield self._wake
                self._wake = None
                self.wakeups_total += 1
                continue
            yield env.timeout(self._step_time_s(step) + step.stall_s)
            sched.end_step(step, env.now)
            self.steps_total += 1

    def _horizon_s(self) -> float:
        """``env.peek()``, the time of the next event of any process, without a Python
        call (fast mode asks a few times per request)."""
        return horizon_s(self._events)

    def _run_fast(self) -> Generator[simpy.Event, Any, None]:
        """Real steps where a decision is due, closed-form runs of pure-decode steps in
        between, and SimPy events only where another process could act in between.

        ``env.peek()`` (:meth:`_horizon_s`) is the horizon: the next event of any other
        process. The replica
        applies its own state changes strictly before it without yielding (nobody can
        observe them sooner) and yields to reach anything at or past it."""
        env, sched = self.env, self.sched
        while True:
            if self._restart is not None:
                mode, downtime_s = self._restart
                if mode != "drain" or not sched.running:
                    if self._t > env.now:
                        yield env.timeout(self._t - env.now)
                    yield from self._go_down(mode, downtime_s)
                    if not self.up:
                        return  # gone for good
                    continue
                sched.admitting = False
            t = self._t
            if self._horizon_s() <= t and self._yielded_at_s != t:
                # Another process acts at this very instant: it goes first (a sample
                # at t sees the requests arrived by t queued, not yet admitted). Once
                # per instant: events queued at t after this wait (another replica
                # waiting the same way) act after it, or two replicas would wait for
                # each other forever.
                self._yielded_at_s = t
                yield env.timeout(t - env.now)
                continue
            self._submit_due(t)
            step = sched.begin_step(t)
            if step is None:
                if self._restart is not None:  # a drain just emptied the batch
                    continue
                release_s = self._next_release_s()
                nxt = min(self._next_arrival_s(), release_s)
                if nxt < self._horizon_s():
                    self._t = nxt
                    continue
                wake = self._wake = Alarm(env, None if nxt == math.inf else nxt - env.now)
                yield wake
                self._wake = None
                self._t = env.now
                self.wakeups_total += 1
                continue
            end_s = t + self._step_time_s(step) + step.stall_s
            if end_s >= self._horizon_s():
                yield env.timeout(end_s - env.now)
            self._t = end_s
            sched.end_step(step, end_s)
            self.steps_total += 1
            if self._restart is None:
                plan = self._macro()
                if plan is not None:
                    yield from self._sleep_through(plan)

    def _macro(self) -> RunPlan | None:
        """A run of pure-decode steps up to the next decision: a finish, a growth
        decision, the step boundary at or after the next arrival or queue timeout.
        Applied at once when it ends before any other process's next event; otherwise
        returned as a plan to sleep through (observers see its completed steps)."""
        sched = self.sched
        k = sched.steady_steps()
        if k < 1:
            return None
        if k > self.max_macro_steps:
            k = self.max_macro_steps
        t = self._t
        # An arrival is a decision unless it can only queue behind a waiting head that
        # cannot be admitted (head-of-line blocking) or nothing is admitted at all: then
        # it is queued (at its own time) at the next boundary that is a decision anyway.
        cut_s = math.inf
        if sched.admitting and not (sched.waiting and sched.config.head_of_line):
            cut_s = self._next_arrival_s()
        timeout_s = sched.config.queue_timeout_s
        if timeout_s is not None:
            deadline = sched.next_timeout_s()
            if deadline is not None:
                if deadline <= t:
                    return None  # a timeout is already due: the next real step enforces it
                cut_s = min(cut_s, deadline)
            # Requests not queued yet time out too: the earliest arrives next.
            cut_s = min(cut_s, self._next_arrival_s() + timeout_s)
        release_s = sched.next_release_s()  # frees memory: a decision
        if release_s <= t:
            return None
        cut_s = min(cut_s, release_s)
        seqs, kv0 = sched.decode_load()
        kv1 = kv0 + seqs
        run_s = self._run_s
        steps = k
        if cut_s < math.inf:
            # The boundary at or after the cut is a decision: run up to it.
            budget_s = cut_s - t
            m = self._within(seqs, kv1, budget_s, k)
            if m < k:
                steps = m if run_s(seqs, kv1, m) >= budget_s else m + 1
        end_s = t + run_s(seqs, kv1, steps)
        if end_s < self._horizon_s():
            if self._out_of_range is not None:
                self._out_of_range.note_run(seqs, kv1, steps)
            sched.advance(steps)
            self._t = end_s
            self.steps_total += steps
            sched.finish_ready(end_s)
            return None
        return RunPlan(t, seqs, kv1, steps, run_s, self._within)

    def _sleep_through(self, plan: RunPlan) -> Generator[simpy.Event, Any, None]:
        """Sleep until a run another process may observe ends (or a restart request wakes
        the replica: the step in progress completes, then it decides)."""
        env, sched = self.env, self.sched
        self._plan = plan
        wake = self._wake = Alarm(env, plan.end_s(plan.steps) - env.now)
        yield wake
        self._wake = None
        self.wakeups_total += 1
        self.observe()
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
        self._plan = None
        self._t = env.now
        self._close_run(plan, env.now)

    def _go_down(self, mode: RestartMode, downtime_s: float) -> Generator[simpy.Event, Any, None]:
        if not self.exact:  # requests that arrived by now are queued before the restart
            self._submit_due(self.env.now)
        if not self._take_down(mode, downtime_s):
            return  # gone for good (scaled down): the process ends
        env = self.env
        back_s = env.now + downtime_s
        if not self.exact:  # requests keep arriving (and may be refused at once)
            while (nxt := self._next_arrival_s()) < back_s:
                yield env.timeout(nxt - env.now)
                self._t = env.now
                self._submit_due(env.now)
        yield env.timeout(back_s - env.now)
        self._come_back(float(env.now))

    # -- shared by the process and the driven replica -------------------------------------
    def _step_time_s(self, step: Step) -> float:
        """The latency model's time for the real step ``step`` (its stall apart),
        counted where the model is out of its range."""
        dt = self.latency.step_time_s(step.prefill_tokens, step.decode_seqs, step.kv_tokens)
        if self._out_of_range is not None:
            self._out_of_range.note_step(step.prefill_tokens, step.decode_seqs, step.kv_tokens)
        return dt

    def _next_release_s(self) -> float:
        """An idle replica's next decision of its own: the next release of retained
        memory (inf: none). Idle with work queued, admitting and nothing to free would
        wait forever: a scheduler bug."""
        sched = self.sched
        release_s = sched.next_release_s()
        assert release_s < math.inf or not (sched.waiting and sched.admitting), "scheduler stalled"
        return release_s

    def _close_run(self, plan: RunPlan, t: float) -> None:
        """A planned run ended at ``t`` with its ``applied`` steps: counted (and where
        the latency model is out of range), its finished groups freed."""
        if self._out_of_range is not None:
            self._out_of_range.note_run(plan.decode_seqs, plan.kv_first_tokens, plan.applied)
        self.steps_total += plan.applied
        self.sched.finish_ready(t)

    def _take_down(self, mode: RestartMode, downtime_s: float) -> bool:
        """A restart's step boundary: the replica goes down now (the outlet told, a
        ``lose`` restart's requests handed to ``on_lost``). Returns True when it comes
        back after ``downtime_s`` (its allocator already replaced by a fresh one; the
        caller waits, then calls :meth:`_come_back`); False when it is gone for good
        (``downtime_s`` inf: scaled down; the pending ``back_up`` event fired)."""
        self._restart_due()
        self._outlet.on_restart(self, mode, downtime_s)
        if mode == "lose":
            lost = self.sched.take_all()
            if lost:
                self._outlet.on_lost(self, lost)
        return self._shut(downtime_s)

    def _restart_due(self) -> None:
        """A restart's step boundary is reached: counted, no longer pending."""
        self._restart = None
        self.restarts += 1

    def _shut(self, downtime_s: float) -> bool:
        """The process is down now (after its restart was reported and a ``lose``
        restart's requests taken): True when it comes back after ``downtime_s`` with a
        fresh allocator; False when it is gone for good (``back_up`` fired)."""
        self.up = False
        self.sched.admitting = False
        if downtime_s == math.inf:
            self._fire_back_up()
            return False
        self.sched.reset_allocator(self._make_allocator())
        return True

    def _come_back(self, now: float) -> None:
        """The downtime is over at ``now``: up again, admitting, its clock there."""
        self._t = now
        self.up = True
        self.started_s = now
        self.sched.admitting = True
        self._fire_back_up()

    def _fire_back_up(self) -> None:
        if self._back_up is not None:
            self._back_up.succeed()
            self._back_up = None
