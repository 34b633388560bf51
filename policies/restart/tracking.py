"""What fleet policies remember between checks, shared by restart policies and autoscalers.

* :class:`InFlight`: the restarts a policy itself asked for that have not come back yet.
  A node decided at ``t`` is *in flight* while it is draining, down, loading or warming,
  and while it is still ``active`` with ``uptime_s > now - t`` (the fleet has not acted
  on the decision yet). It is dropped once it is active with ``uptime_s <= now - t``
  (its process restarted after the decision) or once it is gone. This is how "never
  more than ``max_concurrent`` nodes not active because of this policy" is counted: a
  crash or a scale-down drain is not this policy's doing.
* :class:`CounterDeltas`: the failure counters' increase since the previous check, per
  replica id. A replica seen for the first time counts from 0 (counters start at 0 when
  a node is bought); a replica no longer in the view is forgotten (whatever it failed
  between the last check and leaving is not seen); a counter that went down (it should
  not) counts its current value as the increase.
* :func:`start_s`: when a serving node's process (re)started, ``now - uptime_s``; a
  change of it between checks is a restart, whoever caused it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.fleet_view import FleetView, NodeView

RESTARTING: frozenset[str] = frozenset({"draining", "down", "loading", "warming"})
"""States of a node that is not active because it is being restarted (or drained)."""

EPS_S = 1e-6
"""Tolerance when comparing times derived from ``now_s - uptime_s``."""


def start_s(fleet: FleetView, node: NodeView) -> float:
    """When the node's process (re)started serving (meaningful only while serving)."""
    return fleet.now_s - node.uptime_s


def by_id(nodes: Sequence[NodeView]) -> dict[int, NodeView]:
    """The nodes keyed by replica id."""
    return {n.replica_id: n for n in nodes}


class InFlight:
    """Restarts this policy decided that have not completed (see the module docstring)."""

    def __init__(self) -> None:
        self._decided_s: dict[int, float] = {}

    def note(self, replica_id: int, now_s: float) -> None:
        """Remember that this policy asked to restart ``replica_id`` at ``now_s``."""
        self._decided_s[replica_id] = now_s

    def update(self, fleet: FleetView) -> frozenset[int]:
        """Drop the restarts that completed (or whose node is gone); the ids still in
        flight."""
        nodes = by_id(fleet.nodes)
        for replica_id, decided_s in list(self._decided_s.items()):
            node = nodes.get(replica_id)
            gone = node is None or node.state in ("gone", "provisioning")
            restarted = (
                node is not None
                and node.state == "active"
                and node.uptime_s <= fleet.now_s - decided_s + EPS_S
            )
            if gone or restarted:
                del self._decided_s[replica_id]
        return frozenset(self._decided_s)


@dataclass(frozen=True, slots=True)
class NodeDeltas:
    """One node's failure-counter increases since the previous check."""

    failures: int = 0
    fragmentation_failures: int = 0
    high_free_failures: int = 0


@dataclass(frozen=True, slots=True)
class FleetDeltas:
    """The fleet's failure-counter increases since the previous check."""

    per_node: dict[int, NodeDeltas]

    @property
    def failures(self) -> int:
        return sum(d.failures for d in self.per_node.values())

    @property
    def fragmentation_failures(self) -> int:
        return sum(d.fragmentation_failures for d in self.per_node.values())

    @property
    def capacity_failures(self) -> int:
        """Failures where total free memory did not cover the need."""
        return self.failures - self.fragmentation_failures


def _increase(now: int, before: int) -> int:
    return now - before if now >= before else now


class CounterDeltas:
    """Differences the cumulative failure counters between checks, per replica id."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int, int, int]] = {}

    def update(self, nodes: Sequence[NodeView]) -> FleetDeltas:
        """The increases since the previous call; remembers the counters for the next."""
        per_node: dict[int, NodeDeltas] = {}
        seen: dict[int, tuple[int, int, int]] = {}
        for node in nodes:
            now = (
                node.failures_total,
                node.fragmentation_failures_total,
                node.high_free_failures_total,
            )
            before = self._seen.get(node.replica_id, (0, 0, 0))
            per_node[node.replica_id] = NodeDeltas(
                *(_increase(a, b) for a, b in zip(now, before, strict=True))
            )
            seen[node.replica_id] = now
        self._seen = seen
        return FleetDeltas(per_node)
