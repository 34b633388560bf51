"""Restart policies driven by the seed's production signals.

``fragmentation`` restarts a node whose ``largest_contiguous_free_block_ratio`` has been
below ``threshold`` continuously for ``for_s``, as seen at the policy's own checks: the
run starts at the first check that reads below the threshold and breaks at a check that
reads at or above it. A ``None`` reading (no free memory: the ratio is undefined) neither
starts nor breaks a run -- a full pool says nothing about how the free memory is cut --
so a run's time counts through it. A restart (the node's start time changes) or leaving
the serving states ends the run. Among the due nodes the most fragmented (lowest last
ratio) go first, then the longest uptime, then the replica id.

``alert`` is the seed's high-severity alert: a node whose ``high_free_failures_total``
went up since the previous check (an allocation failure at > 25 % free) is restarted.
An alert raised on a node younger than ``min_uptime_s`` is dropped (a fresh process that
fails at high free memory will not be cured by another restart); an alert that cannot be
served now because ``max_concurrent`` restarts are in flight is kept until its node is
restarted (by anyone) or gone. The longest-alerted first, then the most failures.

Both count only their own restarts toward ``max_concurrent``
(:class:`~policies.restart.tracking.InFlight`).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.fleet_view import SERVING, FleetView, NodeView
from policies.restart.base import RestartDecision, RestartPolicy, restart_some
from policies.restart.tracking import EPS_S, CounterDeltas, InFlight, by_id, start_s


@dataclass(slots=True)
class _Run:
    """A node's current run of readings below the threshold."""

    node_start_s: float
    since_s: float
    last_ratio: float


class FragmentationRestart(RestartPolicy):
    """Restart a node whose ratio stayed below ``threshold`` for ``for_s``."""

    def __init__(
        self, interval_s: float, threshold: float, for_s: float, max_concurrent: int
    ) -> None:
        self.interval_s = interval_s
        self.threshold = threshold
        self.for_s = for_s
        self.max_concurrent = max_concurrent
        self._runs: dict[int, _Run] = {}
        self._in_flight = InFlight()

    def _observe(self, fleet: FleetView, node: NodeView) -> None:
        run = self._runs.get(node.replica_id)
        started = start_s(fleet, node)
        if node.state not in SERVING or (run and started > run.node_start_s + EPS_S):
            self._runs.pop(node.replica_id, None)
            run = None
        ratio = node.largest_contiguous_free_block_ratio
        if node.state not in SERVING or ratio is None:
            return
        if ratio >= self.threshold:
            self._runs.pop(node.replica_id, None)
        elif run is None:
            self._runs[node.replica_id] = _Run(started, fleet.now_s, ratio)
        else:
            run.last_ratio = ratio

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        pending = self._in_flight.update(fleet)
        for node in fleet.nodes:
            self._observe(fleet, node)
        present = by_id(fleet.nodes)
        for replica_id in [r for r in self._runs if r not in present]:
            del self._runs[replica_id]
        due = [
            n
            for n in fleet.nodes
            if n.state == "active"
            and n.replica_id not in pending
            and n.replica_id in self._runs
            and fleet.now_s - self._runs[n.replica_id].since_s >= self.for_s - EPS_S
        ]
        due.sort(key=lambda n: (self._runs[n.replica_id].last_ratio, -n.uptime_s, n.replica_id))

        def cause(n: NodeView) -> str:
            run = self._runs.pop(n.replica_id)
            return (
                f"fragmentation: ratio {run.last_ratio:.2f} < {self.threshold:g}"
                f" for {fleet.now_s - run.since_s:.0f} s"
            )

        return restart_some(fleet, due, self.max_concurrent - len(pending), self._in_flight, cause)


@dataclass(slots=True)
class _Alert:
    node_start_s: float
    since_s: float
    failures: int


class AlertRestart(RestartPolicy):
    """Restart a node that failed an allocation at high free memory since the last check."""

    def __init__(self, interval_s: float, min_uptime_s: float, max_concurrent: int) -> None:
        self.interval_s = interval_s
        self.min_uptime_s = min_uptime_s
        self.max_concurrent = max_concurrent
        self._deltas = CounterDeltas()
        self._alerts: dict[int, _Alert] = {}
        self._in_flight = InFlight()
        self.outstanding: frozenset[int] = frozenset()
        """After :meth:`decide`: the nodes alerted and not restarted yet, and this
        policy's restarts still in flight (including the ones just decided)."""
        self.served: dict[int, int] = {}
        """After :meth:`decide`: the nodes it restarts -> their high-free failures."""

    def _raise_alerts(self, fleet: FleetView) -> None:
        deltas = self._deltas.update(fleet.nodes).per_node
        present = by_id(fleet.nodes)
        for replica_id, alert in list(self._alerts.items()):
            node = present.get(replica_id)
            if (
                node is None
                or node.state not in SERVING
                or start_s(fleet, node) > alert.node_start_s + EPS_S
            ):
                del self._alerts[replica_id]
        for node in fleet.nodes:
            new = deltas[node.replica_id].high_free_failures
            if new == 0 or node.state != "active" or node.uptime_s < self.min_uptime_s:
                continue
            known = self._alerts.get(node.replica_id)
            if known is None:
                self._alerts[node.replica_id] = _Alert(start_s(fleet, node), fleet.now_s, new)
            else:
                known.failures += new

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        pending = self._in_flight.update(fleet)
        self._raise_alerts(fleet)
        alerted = [
            n
            for n in fleet.nodes
            if n.replica_id in self._alerts and n.state == "active" and n.replica_id not in pending
        ]
        alerted.sort(
            key=lambda n: (
                self._alerts[n.replica_id].since_s,
                -self._alerts[n.replica_id].failures,
                n.replica_id,
            )
        )

        served: dict[int, int] = {}

        def cause(n: NodeView) -> str:
            alert = self._alerts.pop(n.replica_id)
            served[n.replica_id] = alert.failures
            return (
                f"alert: {alert.failures} allocation failure(s) at high free memory"
                f" (> 25 % free) since {alert.since_s:.0f} s; now {n.free_share:.0%} free"
            )

        decisions = restart_some(
            fleet, alerted, self.max_concurrent - len(pending), self._in_flight, cause
        )
        self.outstanding = frozenset(self._alerts) | pending | {d.replica_id for d in decisions}
        self.served = served
        return decisions
