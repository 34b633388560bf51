"""The SimPy events a replica waits on and the run of decode steps it plans
(``sim.engine.replica``): :class:`RunPlan` (a run another process may observe),
:class:`ArrivalTimer` (a timeout processed before ordinary events at its time) and
:class:`Alarm` (a timer or a poke, whichever comes first, without a Condition)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy
from simpy.events import URGENT

from sim.engine.simpy_adapter import due_now, process_in_place, schedule_succeeded


@dataclass(slots=True)
class RunPlan:
    """A run of ``steps`` pure-decode steps from ``start_s`` that another process may
    observe (it crosses the next outside event); ``end_s(j)`` is when step ``j`` ends."""

    start_s: float
    decode_seqs: int
    kv_first_tokens: int
    """KV tokens the run's first step reads (every later step reads ``decode_seqs`` more)."""
    steps: int
    run_s: Callable[[int, int, int], float]
    within: Callable[[int, int, float, int], int]
    applied: int = 0
    in_step: bool = False
    """The step after the ``applied`` ones has begun (an observer looked inside it)."""

    def end_s(self, steps: int) -> float:
        return self.start_s + self.run_s(self.decode_seqs, self.kv_first_tokens, steps)

    def completed_by(self, now: float) -> int:
        return self.within(self.decode_seqs, self.kv_first_tokens, now - self.start_s, self.steps)


class ArrivalTimer(simpy.Event):
    """A timeout processed before every ordinary event at its time (SimPy's URGENT
    priority, which process starts use): requests arriving at an instant (first
    arrivals, client retries) are queued before anything else happens then, so a sample
    taken at that instant counts them and the replica reacts after it — the order fast
    mode reproduces without events. Triggered at creation, as ``simpy.Timeout`` is."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        super().__init__(env)
        schedule_succeeded(env, self, URGENT, delay)  # Timeout's, at URGENT priority


class Alarm(simpy.Event):
    """What an idle or sleeping replica yields: ``env.timeout(delay_s) | wake`` (or
    ``wake`` alone when ``delay_s`` is None) without SimPy's Condition object, fired by
    the timer or by :meth:`poke`, whichever comes first.

    It is processed exactly where the Condition was, so events at one instant keep
    their order: the Condition was scheduled when the timer, or the ``wake`` event the
    poke scheduled, was processed; here the timer's callback, or that of the ``nudge``
    the poke schedules, succeeds this event at that same point. Without a timer the
    poke succeeds it at once, as it did ``wake``. A timer or nudge that comes second
    (the alarm already fired) does nothing, as the Condition's check did.

    When nothing else is queued at this instant, the event scheduled there would be
    the very next one processed: the alarm is then processed in place (its callbacks,
    the sleeper's resumption, run now, as ``Environment.step`` would run them), which
    saves an event per wake-up and changes no order."""

    def __init__(self, env: simpy.Environment, delay_s: float | None) -> None:
        super().__init__(env)
        self.poked = False
        """Poked before the sleeper resumed (what ``wake.triggered`` said)."""
        self._timed = delay_s is not None
        if delay_s is not None:
            timer = env.timeout(delay_s)
            assert timer.callbacks is not None
            timer.callbacks.append(self._ring)

    def poke(self) -> None:
        if self.poked:
            return
        self.poked = True
        if self._timed:
            nudge = simpy.Event(self.env)
            assert nudge.callbacks is not None
            nudge.callbacks.append(self._ring)
            nudge.succeed()
        elif not self.triggered:
            self.succeed()

    def _ring(self, _event: simpy.Event) -> None:
        if self.triggered:
            return
        if due_now(self.env):
            self.succeed()  # others act at this instant first
            return
        process_in_place(self)
