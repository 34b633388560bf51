"""The restart-policy contract: every ``interval_s`` of simulated time the fleet asks
``RestartPolicy.decide(fleet)`` which nodes to restart now, and why.

A policy reads ``policies.fleet_view.FleetView`` only (it never mutates it) and may keep its
own state (when a node's ratio first fell below a threshold, the next scheduled time per
node, an RNG seeded from its config). It returns nodes that are ``active``; the fleet
ignores a decision for a node in any other state (already draining or down). How the
node is drained (wait with a timeout, kill, redirect the queue) and how long it is down
(the pool's model-load time) are the fleet's configuration, not the policy's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from policies.fleet_view import FleetView, NodeView
from policies.restart.tracking import InFlight


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """Restart one node (drain mode and downtime are the fleet's configuration)."""

    replica_id: int
    cause: str
    """Why, for the event log: e.g. ``scheduled``, ``fragmentation ratio 0.41 < 0.5 for
    600 s``, ``alert: failure at 38 % free``."""


class RestartPolicy:
    """Subclasses set ``interval_s`` and implement :meth:`decide`."""

    interval_s: float = 30.0

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        raise NotImplementedError


def restart_some(
    fleet: FleetView,
    ranked: Sequence[NodeView],
    slots: int,
    in_flight: InFlight,
    cause: Callable[[NodeView], str],
) -> list[RestartDecision]:
    """Restart the first ``slots`` of ``ranked`` (best victim first), noting each in
    ``in_flight``; ``cause(node)`` says why."""
    decisions = [RestartDecision(n.replica_id, cause(n)) for n in ranked[: max(slots, 0)]]
    for decision in decisions:
        in_flight.note(decision.replica_id, fleet.now_s)
    return decisions
