"""Autoscalers that follow a load metric: none, KV usage against a target (Kubernetes
HPA's rule), and the queue per node (KEDA's).

``kv_target``: the mean ``kv_usage`` over the serving nodes against ``target`` gives
``desired = ceil(serving * mean / target)`` (HPA's ``ceil(current * metric / target)``,
with HPA's tolerance: within ``tolerance`` of the target, desired is the current size).
It is compared with the fleet size counting every node not gone, so nodes still
provisioning count as capacity on its way. Up: at once (after ``scale_up_cooldown_s``,
default 0), by at most ``step``. Down: HPA's stabilization window -- the highest desired
over the last ``scale_down_window_s`` (the checks in ``[now - window, now]``, and only
once the scaler has watched a whole window) must be below the current size; the fleet
then shrinks toward it by at most ``step``.

``queue``: ``desired = ceil(waiting / queue_threshold)``, waiting requests over the
fleet. Above the current size, add up to ``step``. Below it, remove up to ``step`` once
``scale_down_cooldown_s`` (KEDA's ``cooldownPeriod``) has passed both since the trigger
was last active (desired at or above the current size) and since the last scale event.
"""

from __future__ import annotations

import math
from collections import deque

from policies.autoscale.base import Autoscaler, Cooldowns, ScaleDecision, ScaleTiming, clamped
from policies.fleet_view import FleetView, countable, serving
from policies.restart.tracking import EPS_S


class NoAutoscaler(Autoscaler):
    """Never scales."""

    def __init__(self, timing: ScaleTiming | None = None) -> None:
        super().__init__(timing or ScaleTiming())

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        return None


def _ceil(x: float) -> int:
    """``ceil`` that does not round 2.0000000000000004 up to 3."""
    return math.ceil(x - 1e-9)


class KvTargetAutoscaler(Autoscaler):
    """HPA on mean KV usage: scale up at once, down after a stabilization window."""

    def __init__(
        self, timing: ScaleTiming, *, target: float, tolerance: float, scale_down_window_s: float
    ) -> None:
        super().__init__(timing)
        self.target = target
        self.tolerance = tolerance
        self.scale_down_window_s = scale_down_window_s
        self._cooldowns = Cooldowns(timing)
        self._desired: deque[tuple[float, int]] = deque()
        self._first_s: float | None = None

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        now = fleet.now_s
        if self._first_s is None:
            self._first_s = now
        nodes = serving(fleet.nodes)
        if not nodes:
            return None
        size = countable(fleet.nodes)
        mean = sum(n.kv_usage for n in nodes) / len(nodes)
        ratio = mean / self.target
        desired = size if abs(ratio - 1.0) <= self.tolerance else _ceil(len(nodes) * ratio)
        self._desired.append((now, desired))
        while self._desired[0][0] < now - self.scale_down_window_s - EPS_S:
            self._desired.popleft()
        reading = f"mean kv usage {mean:.2f} over {len(nodes)} serving vs target {self.target:g}"
        if desired > size:
            delta = clamped(fleet, min(desired - size, self.step))
            if delta == 0 or not self._cooldowns.can_scale_up(now):
                return None
            cause = f"kv_target: {reading}: desired {desired}: {size} -> {size + delta}"
            return self._cooldowns.note(ScaleDecision(delta, cause), now)
        stable = max(d for _, d in self._desired)
        watched = now - self._first_s >= self.scale_down_window_s - EPS_S
        if stable >= size or not watched or not self._cooldowns.can_scale_down(now):
            return None
        delta = clamped(fleet, -min(size - stable, self.step))
        if delta == 0:
            return None
        cause = (
            f"kv_target: {reading}: max desired {stable} over {self.scale_down_window_s:.0f} s"
            f": {size} -> {size + delta}"
        )
        return self._cooldowns.note(ScaleDecision(delta, cause), now)


class QueueAutoscaler(Autoscaler):
    """KEDA on the queue: one node per ``queue_threshold`` waiting requests."""

    def __init__(self, timing: ScaleTiming, *, queue_threshold: int) -> None:
        super().__init__(timing)
        self.queue_threshold = queue_threshold
        self._cooldowns = Cooldowns(timing)
        self._active_s: float | None = None
        """The last check where the queue asked for at least the current size."""

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        now = fleet.now_s
        size = countable(fleet.nodes)
        waiting = fleet.waiting_requests
        desired = _ceil(waiting / self.queue_threshold)
        if self._active_s is None or desired >= size:
            self._active_s = now
        reading = f"{waiting} waiting, {self.queue_threshold} per node: desired {desired}"
        if desired > size:
            delta = clamped(fleet, min(desired - size, self.step))
            if delta == 0 or not self._cooldowns.can_scale_up(now):
                return None
            cause = f"queue: {reading}: {size} -> {size + delta}"
            return self._cooldowns.note(ScaleDecision(delta, cause), now)
        quiet_s = now - self._active_s
        cooldown_s = self._cooldowns.scale_down_cooldown_s
        if desired >= size or quiet_s < cooldown_s or not self._cooldowns.can_scale_down(now):
            return None
        delta = clamped(fleet, -min(size - desired, self.step))
        if delta == 0:
            return None
        cause = f"queue: {reading} for {quiet_s:.0f} s (cooldown {cooldown_s:.0f} s): {size} -> {size + delta}"
        return self._cooldowns.note(ScaleDecision(delta, cause), now)
