"""A replica's driver in fast mode with no SimPy process: its owner's loop advances it
(``sim.fleet.loop``), one *decision* at a time, in time order with everything else the
owner schedules. The macro-step contract of DESIGN.md, applied from outside: the
replica's state between decisions is a real step in progress or a planned run of decode
steps (``RunPlan``); a reader sees it at the owner's current instant (``observe``:
completed steps of a run applied, a step begun inside it); the replica is brought
further only when its next decision falls due.

Decisions (:meth:`Driven.decide`, at :attr:`Driven.next_decision_s`):

* the end of a real step (``end_step``), then a run of decode steps up to the next
  decision the run can see coming (a finish, a growth the allocator must answer, a
  queue timeout, a release) planned, or the next real step begun;
* the end of a planned run (its steps applied, finished groups freed), then as above;
* a restart's step boundary (down now, with the outlet told; its downtime is a SimPy
  timer, as exact mode's, after which the replica decides again);
* an idle replica's next release of retained memory.

A request submitted at the owner's instant ``t`` waits in the queue: an idle replica
decides at ``t``; one inside a planned run decides at the end of the step in progress
(at ``t`` when ``t`` is a step boundary of the run), as a woken process replica does;
one inside a real step decides at its end. A restart request does the same.

Order at one instant, kept by the owner's loop: requests arriving then are queued first,
then other processes act (samples, policies), then replicas decide; among replicas, in
the order their decisions were scheduled. The steps, allocator calls and samples are
those of exact mode; step end times are sums over different cut points, so times equal
exact mode's up to float rounding.

The owner's loop must run a decision that may take the replica down at ``env.now``
(:attr:`Driven.needs_env_time`): the owner applies it (``Decision``: its lifecycle
moves on) and the replica's downtime starts, on SimPy timers set from ``env.now``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from sim.engine.batch import Group, Step
from sim.engine.replica import Replica, RestartMode


class Clock:
    """The owner's current instant (at or after ``env.now``), shared with its replicas."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s


@dataclass(slots=True)
class Decision:
    """What a decision hands its owner's loop to apply after it (the replica never calls
    its owner from inside a decision):

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


class Agenda:
    """The replicas' next decisions: a binary heap with one entry per replica (its
    latest schedule), ordered by ``(time, tie)``, ties broken by the order they were
    scheduled. Rescheduling moves the replica's entry (no stale entries to skip), and
    keys are compared as plain floats and ints (no tuples)."""

    def __init__(self) -> None:
        self._times: list[float] = []
        self._ties: list[int] = []
        self._items: list[Driven] = []
        self._tie = 0

    def push(self, time_s: float, replica: Driven) -> None:
        """(Re)schedule ``replica``'s next decision at ``time_s`` (finite)."""
        tie = self._tie
        self._tie += 1
        i = replica.agenda_index
        if i < 0:
            i = len(self._items)
            self._times.append(time_s)
            self._ties.append(tie)
            self._items.append(replica)
            replica.agenda_index = i
            self._up(i)
            return
        old_s = self._times[i]
        self._times[i] = time_s
        self._ties[i] = tie  # a later tie: the key grew unless the time fell
        if time_s < old_s:
            self._up(i)
        else:
            self._down(i)

    def discard(self, replica: Driven) -> None:
        """``replica`` has no decision scheduled (any entry of it removed)."""
        if replica.agenda_index >= 0:
            self._remove_at(replica.agenda_index)

    def next_s(self) -> float:
        """When the next decision is due (inf: none)."""
        return self._times[0] if self._items else math.inf

    def pop(self) -> Driven:
        """The replica whose decision is next, taken off the agenda (call after
        :meth:`next_s`)."""
        replica = self._items[0]
        self._remove_at(0)
        return replica

    def _less(self, i: int, j: int) -> bool:
        ti, tj = self._times[i], self._times[j]
        return ti < tj or (ti == tj and self._ties[i] < self._ties[j])

    def _swap(self, i: int, j: int) -> None:
        times, ties, items = self._times, self._ties, self._items
        times[i], times[j] = times[j], times[i]
        ties[i], ties[j] = ties[j], ties[i]
        items[i], items[j] = items[j], items[i]
        items[i].agenda_index = i
        items[j].agenda_index = j

    def _up(self, i: int) -> None:
        while i > 0:
            parent = (i - 1) >> 1
            if not self._less(i, parent):
                return
            self._swap(i, parent)
            i = parent

    def _down(self, i: int) -> None:
        n = len(self._items)
        while True:
            child = 2 * i + 1
            if child >= n:
                return
            if child + 1 < n and self._less(child + 1, child):
                child += 1
            if not self._less(child, i):
                return
            self._swap(i, child)
            i = child

    def _remove_at(self, i: int) -> None:
        self._items[i].agenda_index = -1
        last = len(self._items) - 1
        if i != last:
            self._times[i] = self._times[last]
            self._ties[i] = self._ties[last]
            moved = self._items[last]
            self._items[i] = moved
            moved.agenda_index = i
        self._times.pop()
        self._ties.pop()
        self._items.pop()
        if i < last:
            self._up(i)
            self._down(i)


class Driven:
    """A replica's driver (``sim.engine.replica.Driver``) when its owner's loop advances
    it (see the module docstring): built with the owner's ``clock`` and ``agenda`` and
    given to a fast-mode :class:`~sim.engine.replica.Replica` as its ``driver``."""

    def __init__(self, clock: Clock, agenda: Agenda) -> None:
        self.clock = clock
        self.agenda = agenda
        self.agenda_index = -1
        """Where the replica's entry is in its agenda's heap (-1: none)."""
        self.next_decision_s = math.inf
        self._step: Step | None = None
        """The real step in progress (it ends at ``next_decision_s``)."""
        self._down = False
        """Down for a restart's downtime (back at ``next_decision_s``)."""
        self._horizon = -math.inf
        """While deciding: the owner's next item other than this replica's decisions,
        lowered by the client retries the decision makes (-inf outside a decision:
        nothing is applied ahead of the clock)."""
        self._decision: Decision | None = None
        """What the decision in progress hands back (None: nothing so far)."""

    def attach(self, replica: Replica) -> None:
        """No process: the owner's loop advances the replica."""
        self.replica = replica

    def clock_s(self) -> float:
        return self.clock.now_s

    def next_arrival_s(self) -> float:
        """Requests come from the owner at its instants: none is known ahead."""
        return math.inf

    @property
    def needs_env_time(self) -> bool:
        """Whether the next decision may change the replica's life (a restart is due:
        the owner runs it at ``env.now``)."""
        return self.replica._restart is not None

    def _schedule(self, time_s: float) -> None:
        self.next_decision_s = time_s
        if time_s < math.inf:
            self.agenda.push(time_s, self)
        else:
            self.agenda.discard(self)

    # -- inputs -----------------------------------------------------------------------
    def submit(self, group: Group, next_arrival_s: float) -> None:
        """A request arrives at the owner's instant; ``next_arrival_s`` is ignored (a
        routed request wakes only the replica it goes to)."""
        now = self.clock.now_s
        self.replica.sched.submit(group, now)
        self._wake_at(now)

    def feed(self, groups: list[Group]) -> None:
        raise ValueError("a driven replica's requests come from its owner's loop (submit)")

    def queue_due(self) -> None:
        """Nothing held: the owner submits each request at its instant."""

    def restart_requested(self, changed: bool) -> None:
        """The replica decides at its next step boundary."""
        self._wake_at(self.clock.now_s)

    def wake(self) -> None:
        """The replica decides at its next step boundary (KV handed over)."""
        self._wake_at(self.clock.now_s)

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
        """The owner's next item other than this replica's own decisions (given to
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
        """The decision due at :attr:`next_decision_s` (the owner's clock is there),
        and every later one of this replica that falls before ``horizon_s`` (the
        owner's next item other than this replica's decisions). Returns what the owner
        must apply (None: nothing)."""
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
                # (A restart due: its boundary must be decided at ``env.now``.)
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
        now = float(self.replica.env.now)
        self._down = False
        self.replica._come_back(now)
        self._schedule(now)

    def close(self) -> None:
        self._step = None
        self.agenda.discard(self)
