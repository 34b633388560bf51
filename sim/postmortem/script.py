"""The log as the replay's script: its replicas tied to the rebuilt fleet's nodes, its
node events as fleet actions, its routes as a router (:mod:`sim.postmortem.replay` runs
them).

Replica ids. The log numbers its replicas densely in order of first appearance in the
nodes file (:mod:`sim.postmortem.log`); the fleet numbers nodes in creation order.
:func:`build_replica_map` ties them: the rebuilt fleet has one pool per distinct pool
name (in order of the replicas' first appearance), the initial nodes come first, pool
by pool in pool order (log id order within a pool), then one new node per recorded
``scale_up`` (or ``start`` after the log start) of a replica that is not up, in event
order. A replica scaled down and later up again is a new node (a new fleet id), so the
map is per time: :meth:`ReplicaMap.fleet_id_at`.

:class:`RecordedRouter` sends each request's first attempt to its recorded replica when
that node is up at the arrival, else to the least outstanding node (a *fallback*,
counted); later placements go to the least outstanding node.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from policies.routing.base import Router, RouteRequest, RouterView, least, outstanding, up_indices
from sim.fleet.fleet import NodeAction
from sim.postmortem.log import PostmortemLog


@dataclass(frozen=True)
class NodeStep:
    """One recorded node event as the fleet sees it: ``add`` (a node not up comes up:
    a new fleet node), ``restart`` (of an up node), ``crash``, ``recover`` (a crashed
    node back, after ``down_s``) or ``remove`` (scale down)."""

    time_s: float
    replica: int
    kind: str
    down_s: float = 0.0


def node_steps(log: PostmortemLog) -> Iterator[NodeStep]:
    """The log's node events in time order, classified (the loader checked the order)."""
    crashed_at: dict[int, float] = {}
    for t, r, ev in zip(
        log.node_events["time_s"].tolist(),
        log.node_events["replica"].tolist(),
        log.node_events["event"].tolist(),
        strict=True,
    ):
        if r in crashed_at and ev != "scale_down":
            yield NodeStep(t, r, "recover", t - crashed_at.pop(r))
        elif ev in ("start", "scale_up"):
            yield NodeStep(t, r, "add")
        elif ev == "crash":
            crashed_at[r] = t
            yield NodeStep(t, r, "crash")
        elif ev == "scale_down":
            crashed_at.pop(r, None)
            yield NodeStep(t, r, "remove")
        else:
            yield NodeStep(t, r, "restart")


@dataclass(frozen=True)
class ReplicaMap:
    """Log replica ids <-> fleet replica ids (module docstring)."""

    pools: tuple[str, ...]
    """The rebuilt fleet's pool names, in pool order."""
    initial: tuple[int, ...]
    """Log ids of the initial nodes, in fleet-id order (fleet id = position)."""
    log_of_fleet: tuple[int, ...]
    """Fleet id -> log id, for every node the replay creates."""
    since: Mapping[int, tuple[tuple[float, int], ...]]
    """Log id -> ((from time_s, fleet id), ...), in time order (-inf: the initial node)."""

    def fleet_id_at(self, log_id: int, time_s: float) -> int | None:
        """The fleet node of log replica ``log_id`` at ``time_s`` (the latest added by
        then; None if none was)."""
        spans = self.since.get(log_id, ())
        k = bisect.bisect_right([s for s, _ in spans], time_s)
        return spans[k - 1][1] if k else None

    def pool_index(self, log: PostmortemLog, log_id: int) -> int:
        return self.pools.index(log.pools[log_id])

    def names(self, log: PostmortemLog) -> list[str]:
        """The log's name of every replay node, by fleet id."""
        return [log.replica_names[r] for r in self.log_of_fleet]


def build_replica_map(log: PostmortemLog) -> ReplicaMap:
    pools = tuple(dict.fromkeys(log.pools))
    n = len(log.replica_names)
    initial = [r for p in pools for r in range(n) if log.up_at_start[r] and log.pools[r] == p]
    order = list(initial)
    since: dict[int, list[tuple[float, int]]] = {r: [(-math.inf, i)] for i, r in enumerate(order)}
    for step in node_steps(log):
        if step.kind == "add":
            since.setdefault(step.replica, []).append((step.time_s, len(order)))
            order.append(step.replica)
    return ReplicaMap(pools, tuple(initial), tuple(order), {r: tuple(s) for r, s in since.items()})


def replay_script(log: PostmortemLog, rmap: ReplicaMap) -> list[NodeAction]:
    """Every recorded restart, crash, scale-up and scale-down as a fleet action."""
    actions = []
    for s in node_steps(log):
        if s.kind == "recover":
            continue
        if s.kind == "add":
            actions.append(
                NodeAction(s.time_s, "scale_up", pool_index=rmap.pool_index(log, s.replica))
            )
            continue
        fid = rmap.fleet_id_at(s.replica, s.time_s)
        assert fid is not None, "a recorded event of a node never added"
        kind = {"restart": "restart", "crash": "crash", "remove": "scale_down"}[s.kind]
        actions.append(NodeAction(s.time_s, kind, replica_id=fid))  # type: ignore[arg-type]
    return actions


def counterfactual_script(log: PostmortemLog, rmap: ReplicaMap) -> list[NodeAction]:
    """The recorded crashes of initial nodes, on their initial fleet ids."""
    first = {r: i for i, r in enumerate(rmap.initial)}
    return [
        NodeAction(s.time_s, "crash", replica_id=first[s.replica])
        for s in node_steps(log)
        if s.kind == "crash" and rmap.fleet_id_at(s.replica, s.time_s) == first.get(s.replica)
    ]


@dataclass
class RecordedRouter(Router):
    """A request's first placement goes to its recorded node (``routes``: request id ->
    fleet id) when that view is up; otherwise, and for every later placement, to the
    least outstanding up view. Counts what it did."""

    name: ClassVar[str] = "recorded"
    routes: Mapping[int, int]
    recorded: int = 0
    fallbacks: int = 0
    later: int = 0
    _placed: set[int] = field(default_factory=set)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        rid = request.request_id
        if rid in self._placed:
            self.later += 1
        else:
            self._placed.add(rid)
            target = self.routes.get(rid, -1)
            if 0 <= target < len(views) and views[target].up:
                self.recorded += 1
                return target
            self.fallbacks += 1
        return least(views, up_indices(views), outstanding)

    def counts(self) -> dict[str, int]:
        return {"recorded": self.recorded, "fallbacks": self.fallbacks, "later": self.later}


def recorded_routes(log: PostmortemLog, rmap: ReplicaMap) -> dict[int, int]:
    """Request id -> fleet id of its first attempt's recorded node (-1: none then)."""
    out = {}
    for rid, r, t in zip(
        log.requests["request_id"].tolist(),
        log.routes.tolist(),
        log.requests["arrival_s"].tolist(),
        strict=True,
    ):
        fid = rmap.fleet_id_at(r, t)
        out[rid] = -1 if fid is None else fid
    return out
