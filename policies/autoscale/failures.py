"""Autoscalers triggered by allocation failures and the queue: the seed's naive one, and
the runbook's "diagnose before scaling".

``naive`` (the autoscaler of the seed's example): allocation failures since its previous
check (summed over nodes, per replica id, see
:class:`~policies.restart.tracking.CounterDeltas`) reaching ``failure_threshold``, or
the fleet's waiting requests reaching ``queue_threshold``, add ``step`` nodes; after
``scale_down_window_s`` with no failure at all and the queue below its threshold, one
node goes. It cannot tell a fragmented node from a full one: the decision reports how
many of its trigger failures were fragmentation failures so the fleet can count the
replica-hours bought for them as avoidable.

``runbook`` diagnoses first. A node whose high-free failures went up (a failure while
more than 25 % of its memory was free: fragmentation on a capable node) is restarted,
not scaled for (``ScaleDecision(delta=0, restart=(...))``), at most
``max_concurrent_restarts`` of its restarts in flight (the diagnosis is
:class:`~policies.restart.signals.AlertRestart`; alerts over the bound wait). Only the
failures not at high free memory count toward ``failure_threshold``; the queue trigger
is ignored while a diagnosed node is still waiting for or going through its restart (its
queue is the restart's, not a capacity signal). Scale-down is as ``naive``'s.
"""

from __future__ import annotations

from policies.autoscale.base import Autoscaler, Cooldowns, ScaleDecision, ScaleTiming, clamped
from policies.fleet_view import FleetView, countable
from policies.restart.signals import AlertRestart
from policies.restart.tracking import CounterDeltas, FleetDeltas, by_id


class NaiveAutoscaler(Autoscaler):
    """Scale up on any allocation failure or a long queue; down after a quiet window."""

    name = "naive"

    def __init__(
        self,
        timing: ScaleTiming,
        *,
        failure_threshold: int,
        queue_threshold: int,
        scale_down_window_s: float,
    ) -> None:
        super().__init__(timing)
        self.failure_threshold = failure_threshold
        self.queue_threshold = queue_threshold
        self.scale_down_window_s = scale_down_window_s
        self._cooldowns = Cooldowns(timing)
        self._deltas = CounterDeltas()
        self._busy_s: float | None = None
        """The last check with a failure or a long queue (or the first check)."""

    def _scale_up(
        self, fleet: FleetView, deltas: FleetDeltas, failures: int, reason: str
    ) -> ScaleDecision | None:
        if not self._cooldowns.can_scale_up(fleet.now_s):
            return None
        delta = clamped(fleet, self.step)
        if delta == 0:
            return None
        size = countable(fleet.nodes)
        cut = "" if delta == self.step else f" (step {self.step}, max {fleet.max_replicas})"
        cause = (
            f"{self.name}: {reason} ({failures} failure(s) since the last check,"
            f" {deltas.fragmentation_failures} fragmentation, {deltas.capacity_failures}"
            f" capacity; {fleet.waiting_requests} waiting): {size} -> {size + delta}{cut}"
        )
        decision = ScaleDecision(
            delta,
            cause,
            fragmentation_failures=deltas.fragmentation_failures,
            capacity_failures=deltas.capacity_failures,
        )
        return self._cooldowns.note(decision, fleet.now_s)

    def _scale_down(self, fleet: FleetView) -> ScaleDecision | None:
        assert self._busy_s is not None
        quiet_s = fleet.now_s - self._busy_s
        if quiet_s < self.scale_down_window_s or not self._cooldowns.can_scale_down(fleet.now_s):
            return None
        delta = clamped(fleet, -1)
        if delta == 0:
            return None
        size = countable(fleet.nodes)
        cause = (
            f"{self.name}: no failure and queue < {self.queue_threshold} for {quiet_s:.0f} s"
            f" (window {self.scale_down_window_s:.0f} s): {size} -> {size + delta}"
        )
        return self._cooldowns.note(ScaleDecision(delta, cause), fleet.now_s)

    def _observe(self, fleet: FleetView) -> tuple[FleetDeltas, bool]:
        """The failure deltas and whether the queue is long; notes a busy check."""
        deltas = self._deltas.update(fleet.nodes)
        queued = fleet.waiting_requests >= self.queue_threshold
        if self._busy_s is None or deltas.failures > 0 or queued:
            self._busy_s = fleet.now_s
        return deltas, queued

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        deltas, queued = self._observe(fleet)
        failed = deltas.failures >= self.failure_threshold
        if failed or queued:
            reason = (
                f"{deltas.failures} failure(s) >= {self.failure_threshold}"
                if failed
                else f"{fleet.waiting_requests} waiting >= {self.queue_threshold}"
            )
            return self._scale_up(fleet, deltas, deltas.failures, reason)
        return self._scale_down(fleet)


class RunbookAutoscaler(NaiveAutoscaler):
    """Diagnose before scaling: restart nodes failing at high free memory, scale only for
    genuine capacity failures or a queue no restart explains."""

    name = "runbook"

    def __init__(
        self,
        timing: ScaleTiming,
        *,
        failure_threshold: int,
        queue_threshold: int,
        scale_down_window_s: float,
        max_concurrent_restarts: int,
        min_uptime_s: float,
    ) -> None:
        super().__init__(
            timing,
            failure_threshold=failure_threshold,
            queue_threshold=queue_threshold,
            scale_down_window_s=scale_down_window_s,
        )
        self._diagnosis = AlertRestart(timing.interval_s, min_uptime_s, max_concurrent_restarts)

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        deltas, queued = self._observe(fleet)
        restarts = [d.replica_id for d in self._diagnosis.decide(fleet)]
        high_free = sum(d.high_free_failures for d in deltas.per_node.values())
        genuine = deltas.failures - high_free
        decision: ScaleDecision | None = None
        if genuine >= self.failure_threshold:
            reason = (
                f"{genuine} capacity failure(s) not at high free memory >= {self.failure_threshold}"
            )
            decision = self._scale_up(fleet, deltas, genuine, reason)
        elif queued and not self._diagnosis.outstanding:
            reason = (
                f"{fleet.waiting_requests} waiting >= {self.queue_threshold}, no restart pending"
            )
            decision = self._scale_up(fleet, deltas, genuine, reason)
        elif deltas.failures == 0 and not queued:
            decision = self._scale_down(fleet)
        if not restarts:
            return decision
        nodes = by_id(fleet.nodes)
        on = ", ".join(
            f"replica {r} ({self._diagnosis.served[r]} failure(s), {nodes[r].free_share:.0%} free)"
            for r in restarts
        )
        verdict = "restart, not scale" if decision is None else f"restart; {decision.cause}"
        return ScaleDecision(
            0 if decision is None else decision.delta,
            f"runbook: failures at high free memory on {on}: {verdict}",
            restart=tuple(restarts),
            fragmentation_failures=deltas.fragmentation_failures,
            capacity_failures=deltas.capacity_failures,
        )
