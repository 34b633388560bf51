"""The autoscaler contract: every ``interval_s`` of simulated time the fleet asks
``Autoscaler.decide(fleet)`` for at most one decision: add or remove nodes (the fleet
provisions new ones with the pool's provisioning delay and drains removed ones), and/or
restart nodes (the runbook's answer to fragmentation), with a cause.

An autoscaler reads ``policies.fleet_view.FleetView`` only and keeps its own state (cooldown
timers, counters seen last time, windows of readings). It keeps within
``fleet.min_replicas``..``fleet.max_replicas`` itself (the fleet clamps as well).

Every autoscaler is built from one :class:`ScaleTiming` (how often it is asked, how many
nodes one decision may move, its two cooldowns: the fields every kind's config carries),
then its own parameters by name. Helpers shared by the autoscalers: :class:`Cooldowns` (a scale-up waits
``scale_up_cooldown_s`` after the previous scale-up; a scale-down waits
``scale_down_cooldown_s`` after the previous scale event of either direction, so a
fleet does not shrink right after growing) and :func:`clamped` (a wanted change cut to
the fleet's bounds, counting every node not gone, provisioning included).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.fleet_view import FleetView, countable


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """Add (``delta > 0``) or remove (``delta < 0``) nodes, and/or restart nodes."""

    delta: int
    cause: str
    restart: tuple[int, ...] = ()
    """Replica ids to restart instead of (or as well as) scaling (the runbook policy)."""
    fragmentation_failures: int = 0
    """Failures in the window that triggered this decision that were fragmentation
    failures (the fleet counts the replica-hours a scale-up buys as *avoidable* when
    its trigger failures were all fragmentation failures)."""
    capacity_failures: int = 0
    """Failures in that window that were genuine capacity shortages."""


@dataclass(frozen=True, slots=True)
class ScaleTiming:
    """When and how far an autoscaler may act (bounds checked by its pydantic config)."""

    interval_s: float = 15.0
    """Seconds of simulated time between the fleet's calls to ``decide``."""
    step: int = 1
    """At most this many nodes added or removed by one decision."""
    scale_up_cooldown_s: float = 0.0
    """Seconds after a scale-up before the next scale-up."""
    scale_down_cooldown_s: float = 300.0
    """Seconds after any scale event before a scale-down."""


class Autoscaler:
    """Built from a :class:`ScaleTiming`; subclasses implement :meth:`decide`. The fleet
    calls ``decide`` every ``interval_s`` (``timing.interval_s``)."""

    def __init__(self, timing: ScaleTiming) -> None:
        self.timing = timing
        self.interval_s = timing.interval_s
        self.step = timing.step

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        raise NotImplementedError


class Cooldowns:
    """When the last scale-up and the last scale event were, and what they allow now."""

    def __init__(self, timing: ScaleTiming) -> None:
        self.scale_up_cooldown_s = timing.scale_up_cooldown_s
        self.scale_down_cooldown_s = timing.scale_down_cooldown_s
        self._last_up_s: float | None = None
        self._last_scale_s: float | None = None

    def can_scale_up(self, now_s: float) -> bool:
        last = self._last_up_s
        return last is None or now_s - last >= self.scale_up_cooldown_s

    def can_scale_down(self, now_s: float) -> bool:
        last = self._last_scale_s
        return last is None or now_s - last >= self.scale_down_cooldown_s

    def note(self, decision: ScaleDecision | None, now_s: float) -> ScaleDecision | None:
        """Start the cooldowns a decision triggers; return it unchanged."""
        if decision is not None and decision.delta != 0:
            self._last_scale_s = now_s
            if decision.delta > 0:
                self._last_up_s = now_s
        return decision


def clamped(fleet: FleetView, delta: int) -> int:
    """``delta`` cut so the fleet (nodes not gone) stays within min..max replicas; 0 when
    the fleet is already at (or past) the bound in that direction."""
    size = countable(fleet.nodes)
    if delta > 0:
        return max(0, min(delta, fleet.max_replicas - size))
    if delta < 0:
        return -max(0, min(-delta, size - fleet.min_replicas))
    return 0
