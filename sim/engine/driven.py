"""A replica's driver in fast mode with no SimPy process of its own: its next decision is
one SimPy event (a :class:`~sim.engine.simpy_adapter.Call` at exactly the decision's
instant, priority ``LATE``), and the replica is brought further only when it fires. The
macro-step contract of DESIGN.md, applied from outside: the replica's state between
decisions is a real step in progress or a planned run of decode steps (``RunPlan``); a
reader sees it at ``env.now`` (``observe``: completed steps of a run applied, a step
begun inside it).

Decisions (:meth:`Driven.decide`, at :attr:`Driven.next_decision_s`):

* the end of a real step (``end_step``), then a run of decode steps up to the next
  decision the run can see coming (a finish, a growth the allocator must answer, a
  queue timeout, a release) planned, or the next real step begun;
* the end of a planned run (its steps applied, finished groups freed), then as above;
* a restart's step boundary (down now, with the outlet told; its downtime is a SimPy
  timer, as exact mode's, after which the replica decides again);
* an idle replica's next release of retained memory.

A request submitted at ``t`` (``env.now``) waits in the queue: an idle replica decides at
``t``; one inside a planned run decides at the end of the step in progress (at ``t`` when
``t`` is a step boundary of the run), as a woken process replica does; one inside a real
step decides at its end. A restart request does the same. Moving a decision earlier
cancels its event (:meth:`Call.cancel`) and makes a new one: the cancelled one stays in
SimPy's heap until it is due or reaches the heap's head, where
:func:`~sim.engine.simpy_adapter.live_horizon_s` pops it, so it never lowers the
horizon.

Order at one instant: requests arriving then are queued first (their events are
``URGENT``), then other processes act (samples, policies: ``NORMAL``), then replicas
decide (``LATE``); among replicas, in the order their decisions were scheduled (SimPy's
event ids). A decision runs ahead up to the next live event of the heap
(:meth:`horizon_s`): nobody can read or submit to the replica before it. The steps,
allocator calls and samples are those of exact mode; step end times are sums over
different cut points, so times equal exact mode's up to float rounding.

A decision never calls its owner from inside: it returns what it made (:class:`Decision`)
and the event hands that to the owner's ``apply`` after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from sim.engine.batch import Group, Step
from sim.engine.driver import Driver
from sim.engine.replica import Replica, RestartMode
from sim.engine.simpy_adapter import LATE, Call, live_horizon_s, now_of, queue_of


@dataclass(slots=True)
class Decision:
    """What a decision hands its owner to apply after it (the replica never calls its
    owner from inside a decision):

    * ``retries``: requests refused here whose clients try again, as ``(due time, time
      the retry was set, group)`` in the order they were refused;
    * ``down``: the replica reached a restart's step boundary (``(mode, downtime_s)``).
      The owner records its lifecycle change, then calls :meth:`Driven.go_down`
      (which returns the requests a ``lose`` restart loses: their clients see errors);
    * ``handoffs``: requests whose prefill ended here, handed to their owner to be
      decoded elsewhere (a disaggregated fleet's prefill replica, ``sim.fleet.disagg``),
      or whose KV reservation was refused here (a decode replica), as ``(time, group)``
      in the order they came; the decision stopped at the first of them (a decision
      boundary)."""

    retries: list[tuple[float, float, Group]] = field(default_factory=list)
    down: tuple[RestartMode, float] | None = None
    handoffs: list[tuple[float, Group]] = field(default_factory=list)


Apply = Callable[["Driven", Decision], None]
"""The owner's ``apply(driven, decision)``: what a decision handed back, applied after it."""


class Driven(Driver):
    """A replica's driver (``sim.engine.driver.Driver``) woken by one SimPy event at its
    next decision (see the module docstring): built with its owner's ``apply`` and given
    to a fast-mode :class:`~sim.engine.replica.Replica` as its ``driver``."""

    def __init__(self, apply: Apply) -> None:
        self._apply = apply
        self.next_decision_s = math.inf
        self._wake: Call | None = None
        """The event of the next decision (None: none scheduled)."""
        self._step: Step | None = None
        """The real step in progress (it ends at ``next_decision_s``)."""
        self._down = False
        """Down for a restart's downtime (back at ``next_decision_s``)."""
        self._horizon = -math.inf
        """While deciding: the next live event of the heap, lowered by the client retries
        the decision makes (-inf outside a decision: nothing is applied ahead of
        ``env.now``)."""
        self._decision: Decision | None = None
        """What the decision in progress hands back (None: nothing so far)."""

    def attach(self, replica: Replica) -> None:
        """No process: the replica's decisions are events of its environment."""
        self.replica = replica
        self.env = replica.env
        self._queue = queue_of(replica.env)

    def clock_s(self) -> float:
        return now_of(self.env)

    def next_arrival_s(self) -> float:
        """Requests come from the owner at its instants: none is known ahead."""
        return math.inf

    def _schedule(self, time_s: float) -> None:
        """The next decision is at ``time_s`` (inf: none): its event replaces any other."""
        self.next_decision_s = time_s
        wake = self._wake
        if wake is not None:
            wake.cancel()
        self._wake = Call(self.env, time_s, LATE, self._due) if time_s < math.inf else None

    def _due(self) -> None:
        """The decision's event fired (at ``next_decision_s``): decide, then hand what
        the decision made to the owner."""
        self._wake = None
        decision = self.decide(live_horizon_s(self._queue))
        if decision is not None:
            self._apply(self, decision)

    # -- inputs -----------------------------------------------------------------------
    def submit(self, group: Group, next_arrival_s: float) -> None:
        """A request arrives now; ``next_arrival_s`` is ignored (a routed request wakes
        only the replica it goes to)."""
        now = now_of(self.env)
        self.replica.sched.submit(group, now)
        self._wake_at(now)

    def feed(self, groups: list[Group]) -> None:
        raise ValueError("a driven replica's requests come from its owner (submit)")

    def queue_due(self) -> None:
        """Nothing held: the owner submits each request at its instant."""

    def restart_requested(self, changed: bool) -> None:
        """The replica decides at its next step boundary."""
        self._wake_at(now_of(self.env))

    def wake(self) -> None:
        """The replica decides at its next step boundary (KV handed over)."""
        self._wake_at(now_of(self.env))

    def _wake_at(self, now: float) -> None:
        """Something for the replica to decide came at ``now``: an idle replica decides
        now; inside a planned run, at the end of the step in progress (now, on one of
        its boundaries); inside a real step or down, when that ends."""
        if self._step is not None or self._down or not self.replica.up:
            return
        plan = self.replica._plan
        if plan is None:
            if self.next_decision_s > now:
                self._schedule(now)
            return
        m = plan.completed_by(now)
        if m >= plan.steps:
            return  # the run ends now: the decision is due already
        target = m + 1 if plan.end_s(m) < now else m
        if target < plan.steps:
            plan.steps = target
            self._schedule(plan.end_s(target))

    def horizon_s(self) -> float:
        """The next live event other than this replica's decision (given to
        :meth:`decide`, lowered by its client retries): a step or a run that ends before
        it is applied at once (nobody can read or submit to the replica in between); one
        that does not is left in progress."""
        return self._horizon

    def retry(self, group: Group, delay_s: float) -> None:
        """A request refused during a decision: its client's retry is handed back
        (:class:`Decision`); the replica stops running ahead at its due time (the
        retry may come back here)."""
        assert self._horizon > -math.inf, "a driven replica refuses only while deciding"
        now = self.replica.now_s
        due_s = now + delay_s
        decision = self._decision
        if decision is None:
            decision = self._decision = Decision()
        decision.retries.append((due_s, now, group))
        if due_s < self._horizon:
            self._horizon = due_s

    def hand_off(self, group: Group, done_s: float) -> None:
        """``group``'s prefill ended (or its KV reservation was refused) at ``done_s``
        during a decision (its owner's outlet says so): it is handed back (:class:`Decision`) and the replica stops running
        ahead there, so that the owner acts on it at that instant."""
        assert self._horizon > -math.inf, "a driven replica hands off only while deciding"
        decision = self._decision
        if decision is None:
            decision = self._decision = Decision()
        decision.handoffs.append((done_s, group))
        if done_s < self._horizon:
            self._horizon = done_s

    # -- decisions --------------------------------------------------------------------
    def decide(self, horizon_s: float) -> Decision | None:
        """The decision due at :attr:`next_decision_s` (``env.now`` is there), and every
        later one of this replica that falls before ``horizon_s`` (the next event that
        may read or reach the replica). Returns what the owner must apply (None:
        nothing)."""
        self._horizon = horizon_s
        self._decide()
        self._horizon = -math.inf
        decision = self._decision
        self._decision = None
        return decision

    def _decide(self) -> None:
        r = self.replica
        t = self.next_decision_s
        self.next_decision_s = math.inf
        r.wakeups_total += 1
        step = self._step
        if step is not None:
            self._step = None
            if self._end_step(step, t):
                return
            t = r._t
        elif r._plan is not None:
            self._end_run(t)
        r._t = t
        self._boundary(t)

    def _end_step(self, step: Step, t: float) -> bool:
        """End the real step ``step`` at ``t``, then plan a run of decode steps (applied
        at once when it ends before the horizon). True: a run is left in progress."""
        r = self.replica
        r.sched.end_step(step, t)
        r.steps_total += 1
        r._t = t
        if r._restart is not None:
            return False
        plan = r._macro()
        if plan is None:
            return False
        r._plan = plan
        self._schedule(plan.end_s(plan.steps))
        return True

    def _end_run(self, t: float) -> None:
        r = self.replica
        plan = r._plan
        assert plan is not None
        r._plan = None
        if plan.applied < plan.steps or plan.in_step:
            r.sched.advance(plan.steps - plan.applied)
            plan.applied = plan.steps
        r._close_run(plan, t)

    def _boundary(self, t: float) -> None:
        """At a step boundary (or idle) at ``t``: go down if a restart is due, else the
        next real step (ended at once, and the next decided, while they end before the
        horizon), else idle until the next release (or a submit)."""
        r = self.replica
        sched = r.sched
        while True:
            restart = r._restart
            if restart is not None:
                mode, downtime_s = restart
                if mode != "drain" or not sched.running:
                    self._go_down_now(mode, downtime_s)
                    return
                sched.admitting = False
            step = sched.begin_step(t)
            if step is None:
                if r._restart is not None:  # a drain just emptied the batch
                    continue
                self._schedule(r._next_release_s())  # frees memory: a decision
                return
            end_s = t + r._step_time_s(step) + step.stall_s
            if end_s >= self._horizon or r._restart is not None:
                # (A restart due: its boundary is decided at its own event, where its
                # downtime's timers start.)
                self._step = step
                self._schedule(end_s)
                return
            if self._end_step(step, end_s):
                return
            t = r._t

    def _go_down_now(self, mode: RestartMode, downtime_s: float) -> None:
        """A restart's step boundary: handed back (:class:`Decision`); the owner records
        it, then calls :meth:`go_down`."""
        self.replica._restart_due()
        decision = self._decision
        if decision is None:
            decision = self._decision = Decision()
        decision.down = (mode, downtime_s)

    def go_down(self, mode: RestartMode, downtime_s: float) -> list[Group]:
        """Go down for the restart a :class:`Decision` handed back (its owner has
        recorded it), at ``env.now``: returns the requests a ``lose`` restart loses (the
        owner's clients see errors); back after ``downtime_s`` (inf: gone for good)."""
        r = self.replica
        lost = r.sched.take_all() if mode == "lose" else []
        if not r._shut(downtime_s):
            return lost  # gone for good (scaled down)
        self._down = True
        # The downtime is a SimPy timer, set now as exact mode's process sets it: the
        # replica comes back in the same order with other events at that instant.
        env = r.env
        back = env.timeout((env.now + downtime_s) - env.now)
        assert back.callbacks is not None
        back.callbacks.append(self._back_up_now)
        return lost

    def _back_up_now(self, _event: simpy.Event) -> None:
        """The downtime is over (a SimPy callback, at ``env.now``): back up, with a
        fresh allocator; decide now (nothing waits: no request was routed here)."""
        now = now_of(self.env)
        self._down = False
        self.replica._come_back(now)
        self._schedule(now)

    def close(self) -> None:
        self._step = None
        self._schedule(math.inf)
