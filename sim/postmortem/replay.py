"""``fragsim postmortem``: replay a production log on the simulated fleet, say which
recorded failures the replay reproduces, then run counterfactual policies on the same
traffic.

Replica ids. The log numbers its replicas densely in order of first appearance in the
nodes file (:mod:`sim.postmortem.log`); the fleet numbers nodes in creation order.
:func:`build_replica_map` ties them: the rebuilt fleet has one pool per distinct pool
name (in order of the replicas' first appearance), the initial nodes come first, pool
by pool in pool order (log id order within a pool), then one new node per recorded
``scale_up`` (or ``start`` after the log start) of a replica that is not up, in event
order. A replica scaled down and later up again is a new node (a new fleet id), so the
map is per time: :meth:`ReplicaMap.fleet_id_at`.

The replay. The BASE scenario (default ``seed-postmortem``) gives the stack's model
(hardware, allocator, scheduler with its client retries, metrics, seed); its ``fleet``
is replaced by the log's: pools as above (price, hardware and allocator overrides from
the BASE pool of the same name, else from its first pool; ``initial_uptime_s`` per
replica from the log), no restart policy, no autoscaler, no random faults, and
``min_replicas`` .. ``max_replicas`` wide enough for every recorded scale-up. The
recorded events drive it as a script of :class:`~sim.fleet.fleet.NodeAction`: each
restart, crash, scale-up and scale-down at its time. A node's return from a crash is
the fleet's repair (``faults.mttr``, set to the mean recorded crash-to-recovery gap
less the lifecycle's load and warm-up), not scripted. ``duration_s`` is dropped: the
whole log is replayed. :class:`RecordedRouter` sends each request's first attempt to
its recorded replica when that node is up at the arrival (a node draining, down or not
yet added is not: an arrival at the very instant of a scripted action is routed before
the action), else to the least outstanding node (a *fallback*, counted); later
placements (re-routed retries, redirects) go to the least outstanding node.

Matching. :func:`sim.postmortem.matching.match_failures` with ``same_replica=True``, both
sides' replicas as the log's names (the recorded failure's replica is that of its last
attempt; the simulated one the node the request ended on).

Names. Runs keep the engine's integer replica ids; :mod:`sim.postmortem.names`
adds the log's names beside them (``replica_name`` columns, ``replicas.csv``), and the
matching compares names.

Counterfactuals. The modelled baseline (the BASE scenario) and each counterfactual is a
scenario (a built-in name or a file) run on the SAME traffic
from the log's initial fleet, with its own hardware, allocator, scheduler and fleet
policies (router, retries, restart policy, autoscaler, lifecycle). Recorded crashes of
initial nodes are kept (a crash is no policy's decision); recorded restarts and scale
events are dropped (they were the old policies' decisions), and so are crashes of nodes
the log added later (the counterfactual fleet need not have them). ``min_replicas`` is
the log's initial count; ``max_replicas`` keeps the counterfactual's headroom above its
floor. A ``length_pools`` router keeps the ``long_replicas`` indices below the initial
count ([0] where none is left).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import ValidationError

from policies.routing.base import Router, RouteRequest, RouterView, least, outstanding, up_indices
from sim.fields import JsonObject, JsonValue
from sim.fleet.fleet import NodeAction
from sim.postmortem.baseline import Change, agreement, policy_changes
from sim.postmortem.log import PostmortemLog
from sim.postmortem.matching import MatchReport, Rule, match_failures
from sim.postmortem.names import (
    counterfactual_names,
    nodes_in,
    replica_table,
    with_replica_names,
)
from sim.results.io import RunResult
from sim.results.summary_model import Summary
from sim.runner import run
from sim.scenario.fleet import MAX_NODES, FleetConfig, LifecycleConfig
from sim.scenario.schema import Scenario, ScenarioError, format_validation_error


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


# -- scenarios ------------------------------------------------------------------------------
def _pools(template: FleetConfig | None, log: PostmortemLog, rmap: ReplicaMap) -> list[JsonValue]:
    by_name = {p.name: p for p in template.pools} if template is not None else {}
    first = template.pools[0] if template is not None else None
    pools: list[JsonValue] = []
    for name in rmap.pools:
        like = by_name.get(name, first)
        uptimes: list[JsonValue] = [
            float(log.initial_uptime_s[r]) for r in rmap.initial if log.pools[r] == name
        ]
        pool: JsonObject = {"name": name, "count": len(uptimes), "initial_uptime_s": uptimes}
        if like is not None:
            pool |= like.model_dump(include={"hardware", "allocator", "usd_per_gpu_hour"})
        pools.append(pool)
    return pools


def _with_fleet(scenario: Scenario, fleet: JsonObject, name: str) -> Scenario:
    source = f"{scenario.name} (postmortem fleet)"
    try:
        config = FleetConfig.model_validate(fleet)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(source, e, fleet).splitlines()[0]) from None
    update = {"fleet": config, "name": name, "duration_s": None, "restart": None}
    return scenario.model_copy(update=update | {"initial_uptime_s": 0.0})


def _mean_repair_s(log: PostmortemLog, fleet: FleetConfig | None) -> float | None:
    """The log's mean repair time (its recoveries' down time less the model's load and
    warm-up), or None where the log has no recovery."""
    gaps = [s.down_s for s in node_steps(log) if s.kind == "recover"]
    if not gaps:
        return None
    life = fleet.lifecycle if fleet is not None else LifecycleConfig()
    return max(0.0, float(np.mean(gaps)) - life.load.mean_s - life.warmup_s)


def replay_scenario(base: Scenario, log: PostmortemLog, rmap: ReplicaMap) -> Scenario:
    old = base.fleet
    fleet: JsonObject = old.model_dump(exclude={"pools", "faults", "scale_pool"}) if old else {}
    initial = len(rmap.initial)
    faults: JsonObject = {"mtbf_s": None}
    repair_s = _mean_repair_s(log, old)
    if repair_s is not None:
        faults["mttr"] = {"mean_s": repair_s}
    fleet |= {
        "pools": _pools(old, log, rmap),
        "restart": {"kind": "none"},
        "autoscaler": {"kind": "none"},
        "min_replicas": initial,
        "max_replicas": min(MAX_NODES, max(1, len(rmap.log_of_fleet))),
        "faults": faults,
    }
    return _with_fleet(base, fleet, "replay")


def counterfactual_scenario(cf: Scenario, log: PostmortemLog, rmap: ReplicaMap) -> Scenario:
    old = cf.fleet
    fleet: JsonObject = old.model_dump(exclude={"pools", "scale_pool"}) if old else {}
    initial = len(rmap.initial)
    headroom = old.ceiling - old.floor if old else 0
    written = fleet.get("router", {"kind": "least_outstanding"})
    assert isinstance(written, dict)  # FleetConfig dumps its router as a mapping
    router = dict(written)
    if router.get("kind") == "length_pools":
        long = router.get("long_replicas", [0])
        assert isinstance(long, list)  # LengthPoolsConfig.long_replicas: a list of ints
        kept: list[JsonValue] = [i for i in long if isinstance(i, int) and i < initial]
        router["long_replicas"] = kept or [0]
    fleet |= {
        "pools": _pools(old, log, rmap),
        "router": router,
        "min_replicas": initial,
        "max_replicas": min(MAX_NODES, max(1, initial + headroom)),
        "faults": {**_mapping(fleet.get("faults", {})), "mtbf_s": None},
    }
    return _with_fleet(cf, fleet, cf.name)


def _mapping(value: JsonValue) -> JsonObject:
    assert isinstance(value, dict)  # FleetConfig dumps each block as a mapping
    return value


# -- runs --------------------------------------------------------------------------------------
Progress = Callable[[float, float], None]
"""``progress(now_s, end_s)``, called as simulated time passes (``sim.runner.run``'s)."""


def _simulate(
    scenario: Scenario,
    log: PostmortemLog,
    router: Router | None,
    script: list[NodeAction],
    progress: Progress | None = None,
) -> RunResult:
    requests = log.requests.drop(columns=["attempts"])
    return run(scenario, requests, router=router, script=script, progress=progress)


@dataclass(frozen=True)
class Replay:
    result: RunResult
    """The replay run, its frames named (:func:`with_replica_names`)."""
    match: MatchReport
    router: dict[str, int]
    script: dict[str, int]
    """Scripted actions by kind, and ``recoveries`` (left to the fleet's repair)."""
    replicas: pd.DataFrame
    """:func:`replica_table`."""


def simulated_failures(result: RunResult) -> pd.DataFrame:
    """A named replay's requests as :func:`match_failures` reads them."""
    req = result.requests
    return pd.DataFrame(
        {
            "request_id": req["request_id"].to_numpy(),
            "replica": req["replica_name"].to_numpy(),
            "status": req["status"].to_numpy(),
            "arrival_s": req["arrival_s"].to_numpy(),
        }
    )


def replay(
    base: Scenario,
    log: PostmortemLog,
    *,
    rule: Rule = "by_request",
    tolerance_s: float = 30.0,
    progress: Progress | None = None,
) -> Replay:
    """Replay ``log`` on ``base``'s stack with the recorded routes and node events."""
    rmap = build_replica_map(log)
    scenario = replay_scenario(base, log, rmap)
    router = RecordedRouter(recorded_routes(log, rmap))
    script = replay_script(log, rmap)
    result = _simulate(scenario, log, router, script, progress)
    result = with_replica_names(result, rmap.names(log))
    report = match_run(log, result, rule=rule, tolerance_s=tolerance_s)
    counts = {
        k: sum(a.action == k for a in script)
        for k in ("restart", "crash", "scale_up", "scale_down")
    }
    counts["recoveries"] = sum(s.kind == "recover" for s in node_steps(log))
    return Replay(result, report, router.counts(), counts, replica_table(log, rmap))


def match_run(
    log: PostmortemLog, result: RunResult, *, rule: Rule = "by_request", tolerance_s: float = 30.0
) -> MatchReport:
    """The log's recorded failures matched against a named run's (the replay, or the
    modelled baseline: :mod:`sim.postmortem.baseline`)."""
    recorded = log.recorded_failures()
    recorded["replica"] = [log.replica_names[r] for r in recorded["replica"].tolist()]
    return match_failures(recorded, simulated_failures(result), rule=rule, tolerance_s=tolerance_s)


def changes_against(base: Scenario, cf: Scenario, log: PostmortemLog) -> list[Change]:
    """What ``cf`` changes against the modelled baseline of ``base``, both built for
    ``log`` (:func:`sim.postmortem.baseline.policy_changes`)."""
    rmap = build_replica_map(log)
    return policy_changes(
        counterfactual_scenario(base, log, rmap), counterfactual_scenario(cf, log, rmap)
    )


def run_counterfactual(
    cf: Scenario, log: PostmortemLog, progress: Progress | None = None
) -> RunResult:
    """``cf`` on the log's traffic (module docstring), its frames named. The modelled
    baseline is the BASE scenario run so (:mod:`sim.postmortem.baseline`)."""
    rmap = build_replica_map(log)
    scenario = counterfactual_scenario(cf, log, rmap)
    result = _simulate(scenario, log, None, counterfactual_script(log, rmap), progress)
    return with_replica_names(result, counterfactual_names(log, rmap, nodes_in(result)))


def postmortem_record(
    done: Replay,
    log: PostmortemLog,
    counterfactuals: Sequence[str],
    *,
    log_name: str = "",
    scenario: str = "",
    baseline: MatchReport | None = None,
    baseline_summary: Summary | None = None,
    changes: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """``postmortem.json``: the log's folder name and the BASE scenario's name (as the
    caller gives them), the match's counts and scores, the routing and script counts,
    and the log's span, nodes and node events by name (what the report draws); with a
    modelled baseline, its match (``baseline``) and each counterfactual's ``changes``."""
    m = done.match
    events = log.node_events
    details = events["detail"].tolist() if "detail" in events else [""] * len(events)
    node_events = [
        {"time_s": t, "replica": log.replica_names[r], "event": e, "detail": d}
        for t, r, e, d in zip(
            events["time_s"].tolist(),
            events["replica"].tolist(),
            events["event"].tolist(),
            details,
            strict=True,
        )
    ]
    return {
        "log": log_name,
        "scenario": scenario,
        "requests": len(log.requests),
        "replicas": log.replica_names,
        "pools": log.pools,
        "initial_uptime_s": log.initial_uptime_s.tolist(),
        "span_s": [float(log.attempts["arrival_s"].min()), float(log.attempts["arrival_s"].max())],
        "node_events": node_events,
        "rule": m.rule,
        "tolerance_s": m.tolerance_s,
        "recorded_failures": m.recorded_failures,
        "simulated_failures": m.simulated_failures,
        "matched": m.matched,
        "precision": m.precision,
        "recall": m.recall,
        "router": done.router,
        "router_fallbacks": done.router["fallbacks"],
        "script": done.script,
        "counterfactuals": list(counterfactuals),
        "baseline": None
        if baseline is None
        else {
            "simulated_failures": baseline.simulated_failures,
            "matched": baseline.matched,
            "precision": baseline.precision,
            "recall": baseline.recall,
        },
        "agreement": []
        if baseline is None or baseline_summary is None
        else agreement(done.match, done.script, done.result.summary, baseline, baseline_summary),
        "changes": {k: list(v) for k, v in (changes or {}).items()},
    }
