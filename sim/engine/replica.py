"""One serving replica: a Scheduler over an Allocator, timed by a LatencyModel, with
uptime and restarts, composed with the *driver* that advances its time
(``sim.engine.driver.Driver``, a native base class): a SimPy process of its own
(``sim.engine.process``: exact mode, one event per step; fast mode, closed-form runs of
decode steps) or one SimPy event per
decision (``sim.engine.driven``: a fast fleet's replica, one decision at a time). The replica
holds the state and the step mechanics every driver shares (a run of decode steps
planned or applied, a restart's boundary, coming back); the driver decides when they
happen. Both process modes make the same allocator calls in the same order and sample
the same states, so they give the same requests, samples, events and summary up to
float rounding of summed step times (``sim.engine.process`` says how).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import simpy

from policies.allocators.base import Allocator
from sim.engine.driver import Driver
from sim.engine.events import RunPlan
from sim.engine.inbound import InboundKV
from sim.engine.outlet import ReplicaOutlet
from sim.engine.process import ExactProcess, FastProcess
from sim.engine.scheduler import Group, Scheduler, SchedulerConfig, Step
from sim.engine.view import ReplicaView
from sim.latency.base import LatencyModel, OutOfRange

RestartMode = Literal["drain", "kill", "lose"]
"""``drain``: stop admitting, go down when the batch is empty. ``kill``: go down at the
next step boundary; the batch waits here and is recomputed after. ``lose``: the process
dies at the next step boundary (a crash, a killed restart in a fleet): every request it
holds goes to its outlet's ``on_lost`` (its clients see an error)."""


class Replica:
    """A replica serving requests submitted with :meth:`submit` or :meth:`feed`, its time
    advanced by its ``driver`` (default: its own SimPy process, exact or fast mode)."""

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
        driver: Driver | None = None,
    ) -> None:
        self.env = env
        self.replica_id = replica_id
        if driver is None:
            driver = ExactProcess() if exact else FastProcess()
        self.driver: Driver = driver
        driver.attach(self)  # (a process starts when the environment next runs)
        now = driver.clock_s()
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
        self.started_s = now - initial_uptime_s
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
        self._t = now
        """The replica's own clock: at or ahead of ``env.now`` (fast mode runs ahead up
        to the next time anything else may act)."""
        self._plan: RunPlan | None = None
        """A run of decode steps in progress that others may observe."""
        self._restart: tuple[RestartMode, float] | None = None
        self._back_up: simpy.Event | None = None

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
        """The replica's time: its driver's clock, or later while it runs ahead."""
        return max(self._t, self.driver.clock_s())

    @property
    def uptime_s(self) -> float:
        return self.now_s - self.started_s if self.up else 0.0

    def submit(self, group: Group, next_arrival_s: float = math.inf) -> None:
        """A request arrives now (the driver's clock), after any fed request due by now:
        a caller (a router) hands it over at its arrival.

        ``next_arrival_s``: when the caller's next request may arrive (inf: unknown or
        none). Fast mode cuts its runs of decode steps there, as it does at the next
        request of its own feed, instead of planning past it and being woken inside a
        step: a caller that knows its trace's times makes a routed replica nearly as
        cheap as a fed one. A stale hint (not after the replica's clock) is ignored."""
        self.driver.submit(group, next_arrival_s)

    def receive_kv(self, group: Group, transfer_s: float) -> InboundKV:
        """A disaggregated fleet hands ``group``'s KV to this replica now: its blocks are
        reserved at the next step boundary, the transfer runs ``transfer_s`` from there,
        then it joins the batch (``sim.engine.inbound``). The record says what became
        of it; a refused reservation is also reported ``on_done`` (``rejected-*``)."""
        kv = InboundKV(group, self.replica_id, transfer_s, self.now_s)
        self.sched.inbound.add(kv)
        self.driver.wake()
        return kv

    def take_inbound(self) -> list[InboundKV]:
        """The replica goes down: the KV inbound to it that has not joined its batch,
        its blocks freed (``Inbound.take_all``)."""
        return self.sched.inbound.take_all()

    def feed(self, groups: list[Group]) -> None:
        """Requests that arrive at their ``arrival_s`` (sorted, not before now), no
        router in between. Fast mode takes them from the list itself, with no SimPy
        event per arrival; exact mode runs one arrival process (an event per distinct
        arrival time)."""
        self.driver.feed(groups)

    def close(self) -> None:
        """End this replica for good (the run is over; it must not be stepped again):
        its driver lets go of it and its scheduler's callbacks are dropped, so no
        reference cycle keeps the replica, its requests or the environment alive once
        the caller lets go of them."""
        self.driver.close()
        self.sched.drop_callbacks()
        self._outlet = ReplicaOutlet()
        self._plan = None
        self._back_up = None

    def request_restart(self, mode: RestartMode, downtime_s: float) -> simpy.Event:
        """Restart at the next step boundary: ``kill`` drops the running batch (its
        requests wait and are recomputed), ``drain`` stops admitting and restarts when
        the batch is empty. The process is down for ``downtime_s`` (model load), then
        comes back with a fresh allocator. Returns an event that fires when it is back
        up (a request while one is pending returns the pending one)."""
        changed = False
        if self._restart is None and self.up:
            self._restart = (mode, downtime_s)
            self._back_up = self.env.event()
            changed = True
        elif self._restart is not None and self._restart[0] == "drain" and mode != "drain":
            # A drain cut short (its timeout, a crash): the rest is killed (or lost) at
            # the next step boundary, and the process is down for this ``downtime_s``.
            self._restart = (mode, downtime_s)
            changed = True
        self.driver.restart_requested(changed)
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
        self.driver.queue_due()
        plan = self._plan
        if plan is not None:
            now = self.driver.clock_s()
            m = plan.completed_by(now)
            # Strictly inside a step of the run: that step has begun (its growth is
            # applied), as in exact mode.
            in_step = m < plan.steps and plan.end_s(m) < now
            if m > plan.applied or in_step != plan.in_step:
                self.sched.advance(m - plan.applied, in_step=in_step)
                plan.applied = m
                plan.in_step = in_step

    def _retry(self, group: Group, delay_s: float) -> None:
        """A client retries a refused request after ``delay_s``: the driver says where."""
        self.driver.retry(group, delay_s)

    # -- step mechanics, shared by every driver -------------------------------------------
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
            cut_s = self.driver.next_arrival_s()
        timeout_s = sched.config.queue_timeout_s
        if timeout_s is not None:
            deadline = sched.next_timeout_s()
            if deadline is not None:
                if deadline <= t:
                    return None  # a timeout is already due: the next real step enforces it
                cut_s = min(cut_s, deadline)
            # Requests not queued yet time out too: the earliest arrives next.
            cut_s = min(cut_s, self.driver.next_arrival_s() + timeout_s)
        release_s = sched.next_release_s()  # frees memory: a decision
        if release_s <= t:
            return None
        cut_s = min(cut_s, release_s)
        seqs, kv0 = sched.decode_load()
        kv1 = kv0 + seqs
        latency = self.latency  # its methods called directly (not the bound ones kept)
        steps = k
        if cut_s < math.inf:
            # The boundary at or after the cut is a decision: run up to it.
            budget_s = cut_s - t
            m = latency.steps_within_s(seqs, kv1, budget_s, k)
            if m < k:
                steps = m if latency.decode_run_s(seqs, kv1, m) >= budget_s else m + 1
        end_s = t + latency.decode_run_s(seqs, kv1, steps)
        if end_s < self.driver.horizon_s():
            if self._out_of_range is not None:
                self._out_of_range.note_run(seqs, kv1, steps)
            sched.advance(steps)
            self._t = end_s
            self.steps_total += steps
            sched.finish_ready(end_s)
            return None
        return RunPlan(t, seqs, kv1, steps, self._run_s, self._within)

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
