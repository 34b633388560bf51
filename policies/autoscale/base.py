"""The autoscaler contract: every ``interval_s`` of simulated time the fleet asks
``Autoscaler.decide(fleet)`` for at most one decision: add or remove nodes (the fleet
provisions new ones with the pool's provisioning delay and drains removed ones), and/or
restart nodes (the runbook's answer to fragmentation), with a cause.

An autoscaler reads ``sim.fleet.view.FleetView`` only and keeps its own state (cooldown
timers, counters seen last time, windows of readings). It keeps within
``fleet.min_replicas``..``fleet.max_replicas`` itself (the fleet clamps as well).
"""

from __future__ import annotations

from sim.fleet.view import FleetView, ScaleDecision


class Autoscaler:
    """Subclasses set ``interval_s`` and implement :meth:`decide`."""

    interval_s: float = 15.0

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        raise NotImplementedError
