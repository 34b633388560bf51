"""Restart policies that read a node's age only: never, on a schedule, rolling recycling.

``scheduled`` restarts an active node once its uptime reaches ``every_s`` plus a jitter
drawn per node and per uptime cycle (uniform in ``[0, jitter_s)``, from a generator
seeded by ``(seed, replica_id)``, so a node's jitters do not depend on the other nodes
or on the order of checks). At most ``max_concurrent`` of its own restarts are in
flight (see :class:`~policies.restart.tracking.InFlight`); the longest-running due
nodes go first, ties by replica id.

``rolling`` recycles nodes whose uptime exceeds ``max_uptime_s`` while keeping at most
``max_down`` nodes not active: it counts *every* node draining, down, loading or warming
(whatever the cause: a crash, another policy) plus its own decisions the fleet has not
acted on yet, since its bound is the fleet's availability.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from policies.fleet_view import FleetView, NodeView
from policies.restart.base import RestartDecision, RestartPolicy, restart_some
from policies.restart.tracking import EPS_S, RESTARTING, InFlight, start_s


class NoRestart(RestartPolicy):
    """Never restarts a node."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        return []


class ScheduledRestart(RestartPolicy):
    """Restart each node after ``every_s`` (+ jitter) of uptime, staggered."""

    def __init__(
        self, interval_s: float, every_s: float, jitter_s: float, seed: int, max_concurrent: int
    ) -> None:
        self.interval_s = interval_s
        self.every_s = every_s
        self.jitter_s = jitter_s
        self.seed = seed
        self.max_concurrent = max_concurrent
        self._rngs: dict[int, np.random.Generator] = {}
        self._cycle: dict[int, tuple[float, float]] = {}
        """replica id -> (start of the current uptime cycle, its jitter)."""
        self._in_flight = InFlight()

    def _jitter(self, fleet: FleetView, node: NodeView) -> float:
        """The jitter of the node's current uptime cycle (a new draw after a restart)."""
        started = start_s(fleet, node)
        cycle = self._cycle.get(node.replica_id)
        if cycle is None or started > cycle[0] + EPS_S:
            rng = self._rngs.get(node.replica_id)
            if rng is None:
                rng = np.random.default_rng([self.seed, node.replica_id])
                self._rngs[node.replica_id] = rng
            jitter = float(rng.uniform(0.0, self.jitter_s)) if self.jitter_s > 0 else 0.0
            cycle = (started, jitter)
            self._cycle[node.replica_id] = cycle
        return cycle[1]

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        pending = self._in_flight.update(fleet)
        due: list[tuple[NodeView, float]] = []
        for node in fleet.nodes:
            if node.state != "active" or node.replica_id in pending:
                continue
            jitter = self._jitter(fleet, node)
            if node.uptime_s >= self.every_s + jitter:
                due.append((node, jitter))
        due.sort(key=lambda nj: (-nj[0].uptime_s, nj[0].replica_id))
        jitters = {n.replica_id: j for n, j in due}
        return restart_some(
            fleet,
            [n for n, _ in due],
            self.max_concurrent - len(pending),
            self._in_flight,
            lambda n: (
                f"scheduled: uptime {n.uptime_s:.0f} s >= {self.every_s:.0f} s"
                f" + jitter {jitters[n.replica_id]:.0f} s"
            ),
        )


def _ratio_or_one(node: NodeView) -> float:
    ratio = node.largest_contiguous_free_block_ratio
    return 1.0 if ratio is None else ratio


class RollingRestart(RestartPolicy):
    """Recycle nodes older than ``max_uptime_s``, at most ``max_down`` not active."""

    def __init__(
        self,
        interval_s: float,
        max_uptime_s: float,
        max_down: int,
        by: Literal["fragmentation", "age"],
    ) -> None:
        self.interval_s = interval_s
        self.max_uptime_s = max_uptime_s
        self.max_down = max_down
        self.by = by
        self._in_flight = InFlight()

    def _order(self, node: NodeView) -> tuple[float, float, int]:
        """Victim order: lowest ratio first (no free memory reads as 1: not fragmented),
        then longest uptime; or longest uptime first; ties by replica id."""
        if self.by == "fragmentation":
            return (_ratio_or_one(node), -node.uptime_s, node.replica_id)
        return (-node.uptime_s, 0.0, node.replica_id)

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        pending = self._in_flight.update(fleet)
        not_active = {n.replica_id for n in fleet.nodes if n.state in RESTARTING} | pending
        old = [
            n
            for n in fleet.nodes
            if n.state == "active"
            and n.replica_id not in pending
            and n.uptime_s > self.max_uptime_s
        ]
        old.sort(key=self._order)

        def cause(n: NodeView) -> str:
            ratio = n.largest_contiguous_free_block_ratio
            shown = "n/a" if ratio is None else f"{ratio:.2f}"
            return (
                f"rolling: uptime {n.uptime_s:.0f} s > {self.max_uptime_s:.0f} s"
                f" (ratio {shown}, by {self.by}, {len(not_active)}/{self.max_down} not active)"
            )

        return restart_some(fleet, old, self.max_down - len(not_active), self._in_flight, cause)
