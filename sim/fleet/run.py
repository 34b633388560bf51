"""``run_fleet(scenario, requests) -> RunResult``: a scenario with a ``fleet:`` block.

Outputs, beside a single replica's: ``requests`` gains ``first_replica`` (the router's
first placement) and ``route`` (how the replica it ended on was chosen: ``routed``,
``pinned-retry``, ``rerouted-retry``, ``redirected``, ``refused``); ``timeseries`` has
one row per replica per sample; ``events`` gains fleet rows (``restart``, ``crash``,
``scale-up``, ``scale-down``, ``drain-timeout``, ``route-refused``) whose ``cause``
says why; the ``fleet`` table has one row per sample (replicas by state, queue, bill so
far); the summary gains a ``fleet`` section (replica-hours, cost, cost per million
output tokens, avoidable replica-hours, restarts by cause, scale events, crashes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import simpy

from policies.allocators.registry import parse_allocator
from policies.routing.base import Router
from sim.engine.recorder import Recorder
from sim.fleet.alerts import diagnose_failures, evaluate_alerts
from sim.fleet.fleet import Fleet, NodeAction
from sim.hardware import HardwareConfig
from sim.results.io import RunResult
from sim.results.summary import with_firings
from sim.scenario import bounds
from sim.scenario.schema import Scenario, ScenarioError


def pool_parts(scenario: Scenario, requests: pd.DataFrame) -> list[Any]:
    """Each pool's built parts (``sim.runner.Parts``): the scenario's hardware and
    allocator with the pool's overrides. Errors name ``fleet.pools[i]``."""
    from sim.runner import build_parts

    fleet = scenario.fleet
    assert fleet is not None
    out = []
    for i, pool in enumerate(fleet.pools):
        update: dict[str, Any] = {}
        where = f"fleet.pools[{i}]"
        try:
            if pool.hardware is not None:
                merged = scenario.hardware.model_dump(exclude_unset=True) | pool.hardware
                update["hardware"] = HardwareConfig.model_validate(merged)
            if pool.allocator is not None:
                update["allocator"] = parse_allocator(pool.allocator)
        except ValueError as e:
            raise ScenarioError(f"field {where}: {e}".splitlines()[0]) from None
        variant = scenario.model_copy(update=update) if update else scenario
        try:
            out.append(build_parts(variant, requests))
        except ScenarioError as e:
            raise ScenarioError(f"{where}: {e}") from None
    return out


def run_fleet(
    scenario: Scenario,
    requests: pd.DataFrame,
    *,
    progress: Callable[[float, float], None] | None = None,
    beyond_duration: int = 0,
    router: Router | None = None,
    script: Sequence[NodeAction] = (),
) -> RunResult:
    """Simulate ``requests`` (canonical frame, sorted by arrival, within ``duration_s``)
    on the scenario's fleet.

    ``router`` replaces the scenario's router (a postmortem replays recorded routes);
    ``script`` lists node actions applied at their times besides the policies' (a
    postmortem's recorded restarts, crashes and scale events)."""
    from sim.runner import group_columns, run_summary, simulate_until_done

    config = scenario.fleet
    assert config is not None
    parts = pool_parts(scenario, requests)
    columns = group_columns(requests, scenario.retention, scenario.seed)
    sessions = _sessions(requests)
    env = simpy.Environment()
    recorder = Recorder()
    sched = scenario.scheduler
    fleet = Fleet(
        env,
        config,
        parts,
        columns,
        sessions,
        recorder,
        seed=scenario.seed,
        exact=scenario.mode == "exact",
        retry_attempts=sched.retry_attempts,
        retry_backoff_s=sched.retry_backoff_s,
        high_free_share=scenario.metrics.high_free_share,
    )
    if router is not None:
        fleet.router = router
    processes = [fleet.arrivals(), fleet.sampler(scenario.metrics.sample_interval_s)]
    if config.restart.get("kind", "none") != "none":
        processes.append(fleet.restart_ticks())
    if config.autoscaler.get("kind", "none") != "none":
        processes.append(fleet.autoscale_ticks())
    if script:
        processes.append(fleet.play(sorted(script, key=lambda a: a.time_s)))
    last_arrival_s = float(columns.arrivals_s[-1]) if len(columns) else 0.0
    simulate_until_done(
        env,
        scenario,
        recorder,
        (len(columns), last_arrival_s),
        processes,
        progress,
        beyond_duration,
    )
    fleet.sample_all("final")
    fleet.records.close()
    _, ts_df, ev_df = recorder.frames()
    req_df = fleet.records.frame()
    req_df = _with_routes(req_df, columns.ids, fleet)
    thresholds = scenario.metrics.thresholds()
    if env.now / config.alerts.scrape_interval_s > bounds.MAX_SCRAPES:  # a long backlog
        what = "fleet.alerts.scrape_interval_s", bounds.MAX_SCRAPES, "scrapes"
        raise bounds.count_exceeded(*what, env.now)
    alerts = evaluate_alerts(
        ts_df, ev_df, scrape_interval_s=config.alerts.scrape_interval_s, thresholds=thresholds
    )
    diagnosis = diagnose_failures(req_df, ev_df, thresholds)[["request_id", "diagnosis"]]
    req_df = _with_diagnosis(req_df, diagnosis)
    ev_df = _with_alerts(ev_df, alerts)
    replicas = [n.replica for n in fleet.nodes if n.replica is not None]
    summary = run_summary(
        scenario,
        (req_df, ts_df, ev_df),
        env.now,
        beyond_duration,
        (scenario.allocator.kind, parts[0].kv_capacity_tokens, parts[0].latency),
        (sum(r.steps_total for r in replicas), sum(r.wakeups_total for r in replicas)),
    )
    fleet_df = pd.DataFrame(fleet.fleet_rows)
    summary["fleet"] = fleet_summary(fleet, fleet_df, req_df, env.now)
    if router is not None:  # a replacement (a postmortem's recorded routes)
        summary["fleet"]["router"] = router.name
    firing = alerts.loc[alerts["state"] == "firing", "alert"].value_counts()
    counts = {str(k): int(v) for k, v in firing.items()}
    summary["alerts"] = with_firings(summary["alerts"], counts, thresholds)
    for replica in replicas:
        replica.close()
    recorder.on_count = None
    env._queue.clear()
    return RunResult(req_df, ts_df, ev_df, summary, fleet=fleet_df, alerts=alerts)


def _with_alerts(events: pd.DataFrame, alerts: pd.DataFrame) -> pd.DataFrame:
    """The event log with a row per alert that started firing (``kind`` ``alert``,
    ``cause`` the alert, ``detail`` its severity and the seed's response), in time
    order (stable: at one instant, the run's own events first)."""
    firing = alerts[alerts["state"] == "firing"]
    if not len(firing):
        return events
    rows = pd.DataFrame(
        {
            "time_s": firing["time_s"].to_numpy(dtype=float),
            "replica": firing["replica"].to_numpy(dtype=np.int64),
            "kind": "alert",
            "request_id": -1,
            "need_tokens": 0,
            "free_tokens": 0,
            "largest_free_extent_tokens": 0,
            "free_share": math.nan,
            "cause": firing["alert"].astype(str).to_numpy(),
            "uptime_s": math.nan,
            "detail": (
                firing["severity"].astype(str) + ": " + firing["response"].astype(str)
            ).to_numpy(),
        }
    )
    out = pd.concat([events, rows.astype(events.dtypes.to_dict())], ignore_index=True)
    return out.sort_values("time_s", kind="stable").reset_index(drop=True)


def _sessions(requests: pd.DataFrame) -> dict[int, int] | None:
    column = requests.get("session_id")
    if column is None:
        return None
    has = column.notna().to_numpy()
    if not has.any():
        return None
    ids = requests["request_id"].to_numpy(dtype=np.int64)[has].tolist()
    values = column[has].astype("int64").tolist()
    return dict(zip(ids, values, strict=True))


def _with_routes(req: pd.DataFrame, ids: np.ndarray, fleet: Fleet) -> pd.DataFrame:
    """``first_replica`` and ``route`` columns, aligned with the frame's request-id order,
    added to ``req`` itself (returned)."""
    order = np.argsort(ids, kind="stable")
    first = fleet.first_replica[order]
    kinds = fleet.route_kind
    route = [
        kinds.get(int(i), "routed" if f >= 0 else "refused")
        for i, f in zip(ids[order].tolist(), first.tolist(), strict=True)
    ]
    # ``req`` is the recorder's fresh frame, owned here: the columns go in place (a
    # copy would hold a second requests table at the run's memory peak).
    req["first_replica"] = first
    req["route"] = pd.Series(route, dtype=object)
    return req


def _with_diagnosis(req: pd.DataFrame, diagnosis: pd.DataFrame) -> pd.DataFrame:
    """``req`` with the ``diagnosis`` of each failed request (missing for the others),
    added in place: ``req.merge(diagnosis, on="request_id", how="left")`` without a
    second copy of the requests table. ``diagnosis``'s request ids are unique."""
    by_id = pd.Series(diagnosis["diagnosis"].to_numpy(), index=diagnosis["request_id"].to_numpy())
    req["diagnosis"] = req["request_id"].map(by_id).astype(diagnosis["diagnosis"].dtype)
    return req


def fleet_summary(
    fleet: Fleet, fleet_df: pd.DataFrame, req: pd.DataFrame, end_s: float
) -> dict[str, Any]:
    config = fleet.config
    nodes = fleet.nodes
    hours = sum(n.billed_s(end_s) for n in nodes) / 3600.0
    cost = sum(n.cost_usd(end_s) for n in nodes)
    avoidable = [n for n in nodes if n.avoidable]
    output_tokens = float(req["generated_tokens"].sum()) if len(req) else 0.0
    replicas = fleet_df["replicas"] if len(fleet_df) else pd.Series([0])
    return {
        "pools": [
            {
                "name": p.name,
                "count": p.count,
                "replicas": [n.replica_id for n in nodes if n.pool_index == i],
            }
            for i, p in enumerate(config.pools)
        ],
        "router": config.router["kind"],
        "restart_policy": config.restart.get("kind", "none"),
        "autoscaler": config.autoscaler.get("kind", "none"),
        "replicas": {
            "initial": config.initial_replicas,
            "peak": int(replicas.max()),
            "final": int(replicas.iloc[-1]),
            "mean": float(hours * 3600.0 / end_s) if end_s > 0 else float(config.initial_replicas),
        },
        "replica_hours": hours,
        "cost_usd": cost,
        "cost_per_million_output_tokens_usd": cost / output_tokens * 1e6
        if output_tokens
        else math.nan,
        "avoidable_replica_hours": sum(n.billed_s(end_s) for n in avoidable) / 3600.0,
        "avoidable_cost_usd": sum(n.cost_usd(end_s) for n in avoidable),
        "restarts": dict(sorted(fleet.restarts_by_cause.items())),
        "crashes": sum(n.crashes_total for n in nodes),
        "scale_ups": fleet.scale_ups,
        "scale_downs": fleet.scale_downs,
        "route_refusals": fleet.route_refusals,
    }
