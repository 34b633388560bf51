"""``fragsim postmortem``: replay a production log on the simulated fleet, say which
recorded failures the replay reproduces, then run counterfactual policies on the same
traffic.

The replay. The BASE scenario (default ``seed-postmortem``) gives the stack's model
(hardware, allocator, scheduler with its client retries, metrics, seed); its ``fleet``
is replaced by the log's: pools as :func:`sim.postmortem.script.build_replica_map` orders them (price, hardware and allocator overrides from
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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import ValidationError

from policies.routing.base import Router
from sim.fields import JsonObject, JsonValue
from sim.fleet.fleet import NodeAction
from sim.postmortem.baseline import Change, policy_changes
from sim.postmortem.log import PostmortemLog
from sim.postmortem.matching import MatchReport, Rule, match_failures
from sim.postmortem.names import (
    counterfactual_names,
    nodes_in,
    replica_table,
    with_replica_names,
)
from sim.postmortem.script import (
    RecordedRouter,
    ReplicaMap,
    build_replica_map,
    counterfactual_script,
    node_steps,
    recorded_routes,
    replay_script,
)
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.fleet import MAX_NODES, FleetConfig, LifecycleConfig
from sim.scenario.schema import Scenario, ScenarioError, format_validation_error


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
