"""One place assembles a run's outputs and its summary (``sim.results.io.RunResult``)
from what the loop simulated (``sim.simulate.driver.Simulated``): a single replica's requests,
timeseries and events; a fleet's as well, with each request's route and diagnosis, the
alert rows, the fleet table and the summary's ``fleet`` section.

A fleet run's outputs, beside a single replica's: ``requests`` gains ``first_replica``
(the router's first placement) and ``route`` (how the replica it ended on was chosen:
``routed``, ``pinned-retry``, ``rerouted-retry``, ``redirected``, ``refused``);
``timeseries`` has one row per replica per sample; ``events`` gains fleet rows
(``restart``, ``crash``, ``scale-up``, ``scale-down``, ``drain-timeout``,
``route-refused``) whose ``cause`` says why; the ``fleet`` table has one row per sample
(replicas by state, queue, bill so far); the summary gains a ``fleet`` section, whose
``alerts`` records the ``scrape_interval_s`` and ``trend_window_s`` the alert rows were
evaluated with (``fragsim export openmetrics`` and ``alerts export --run`` read them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sim.engine.recorder import KV_WASTE_COLUMNS, EventTable
from sim.latency.base import OutOfRange
from sim.results.frames import frame
from sim.results.io import RunResult, undefined_as_null
from sim.results.seed_alerts import ALERTS, THRESHOLD_FIELDS
from sim.results.summary import summarize, with_firings
from sim.results.summary_model import Summary
from sim.scenario import bounds
from sim.scenario.schema import Scenario
from sim.simulate.driver import Simulated
from sim.simulate.parts import Parts
from sim.telemetry.alert_states import DEFAULT_TIMING
from sim.telemetry.alerts import (
    DEFAULT_TREND_WINDOW_S,
    diagnose_failures,
    episode_counts,
    evaluate_alerts,
)

if TYPE_CHECKING:
    from policies.routing.base import Router
    from sim.fleet.fleet import Fleet
    from sim.simulate.driver import SingleReplica


def single_result(
    scenario: Scenario, done: Simulated, part: Parts, beyond_duration: int
) -> RunResult:
    """A single replica's outputs."""
    traffic: SingleReplica = done.traffic
    ts_df, ev_df = done.recorder.frames()
    req_df = done.records.frame()
    pools = [pool_report(scenario, part, traffic.out_of_range)]
    summary = run_summary(
        scenario,
        (req_df, ts_df, ev_df),
        done.end_s,
        beyond_duration,
        pools,
        done.engine_counters(),
    )
    return RunResult(req_df, ts_df, ev_df, typed(summary))


def fleet_result(
    scenario: Scenario,
    done: Simulated,
    parts: list[Parts],
    beyond_duration: int,
    router: Router | None,
) -> RunResult:
    """A fleet's outputs; ``router``: the scenario's router's replacement, if any (a
    postmortem's recorded routes), named in the summary."""
    fleet: Fleet = done.traffic
    config = fleet.config
    end_s = done.end_s
    ts_df, ev_df = done.recorder.frames()
    req_df = done.records.frame()
    req_df = _with_routes(req_df, fleet.columns.ids, fleet)
    thresholds = scenario.metrics.thresholds()
    if end_s / config.alerts.scrape_interval_s > bounds.MAX_SCRAPES:  # a long backlog
        what = "fleet.alerts.scrape_interval_s", bounds.MAX_SCRAPES, "scrapes"
        raise bounds.count_exceeded(*what, end_s)
    scrape_s = float(config.alerts.scrape_interval_s)
    # the trend window spans at least one scrape (evaluate_alerts rounds it up to whole
    # scrapes), recorded so, so that the commands reading the summary accept the pair
    trend_s = max(DEFAULT_TREND_WINDOW_S, scrape_s)
    alerts = evaluate_alerts(
        ts_df,
        ev_df,
        scrape_interval_s=scrape_s,
        thresholds=thresholds,
        trend_window_s=trend_s,
        timing=DEFAULT_TIMING,
    )
    diagnosis = diagnose_failures(req_df, ev_df, thresholds)[["request_id", "diagnosis"]]
    req_df = _with_diagnosis(req_df, diagnosis)
    ev_df = _with_alerts(ev_df, alerts)
    pools = [
        pool_report(scenario, part, counted)
        for part, counted in zip(parts, fleet.out_of_range, strict=True)
    ]
    summary = run_summary(
        scenario, (req_df, ts_df, ev_df), end_s, beyond_duration, pools, done.engine_counters()
    )
    fleet_df = pd.DataFrame(fleet.fleet_rows)
    summary["fleet"] = fleet_summary(fleet, fleet_df, req_df, end_s, pools)
    if router is not None:
        summary["fleet"]["router"] = router.name
    # what alerts.parquet was evaluated with: the exports' defaults (sim.cli.export)
    summary["fleet"]["alerts"] = {
        "scrape_interval_s": scrape_s,
        "trend_window_s": trend_s,
        "thresholds": {name: getattr(thresholds, name) for name in THRESHOLD_FIELDS},
        **DEFAULT_TIMING.recorded(),
    }
    held = {spec.name: DEFAULT_TIMING.hold_s(spec.name) for spec in ALERTS}
    summary["alerts"] = with_firings(summary["alerts"], episode_counts(alerts), thresholds, held)
    return RunResult(req_df, ts_df, ev_df, typed(summary), fleet=fleet_df, alerts=alerts)


def typed(summary: dict[str, Any]) -> Summary:
    """The summary assembled here as the typed model (an undefined statistic, NaN or an
    infinity, as null): what the run's ``summary.json`` holds, checked as any reader
    checks it, so a run never writes what no reader accepts."""
    return Summary.from_json_dict(undefined_as_null(summary))


def run_summary(
    scenario: Scenario,
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    end_s: float,
    beyond_duration: int,
    pools: list[dict[str, Any]],
    engine: tuple[int, int],
) -> dict[str, Any]:
    """The summary of a run's (requests, timeseries, events) ending at ``end_s``, with
    the scenario's identity, its pools (:func:`pool_report`, one per pool: one for a
    single replica) and ``engine`` = (steps, wake-ups) counters.

    ``allocator``, ``kv_capacity_tokens``, ``kv_bytes_per_token`` and ``latency``
    describe the replicas: the pool's values when every pool has the same; otherwise the
    allocator kinds joined by `` + `` in pool order, a null capacity (and bytes per
    token where they differ), and the latency model's kind with the out-of-range steps
    of every pool (each pool's own are in ``fleet.pools``)."""
    req_df, ts_df, ev_df = frames
    summary = summarize(req_df, ts_df, ev_df, end_s=end_s, thresholds=scenario.metrics.thresholds())
    if scenario.duration_s is not None:
        summary["requests"]["beyond_duration"] = beyond_duration
    kv = kv_manager_waste(ts_df)
    if kv is not None:
        summary["memory"]["kv_manager_waste"] = kv
    layouts = [p["kv_layout"] for p in pools if "kv_layout" in p]
    if len(pools) == 1 and layouts:
        summary["kv_layout"] = layouts[0]
    summary["scenario"] = scenario.name
    summary["seed"] = scenario.seed
    kinds = list(dict.fromkeys(p["allocator"] for p in pools))
    capacities = {p["kv_capacity_tokens"] for p in pools}
    summary["allocator"] = " + ".join(kinds)
    summary["kv_capacity_tokens"] = capacities.pop() if len(capacities) == 1 else None
    per_token = {p["kv_bytes_per_token"] for p in pools}
    summary["kv_bytes_per_token"] = per_token.pop() if len(per_token) == 1 else None
    summary["latency"] = _combined_latency([p["latency"] for p in pools])
    summary["engine"] = {
        "mode": scenario.mode,
        "steps": engine[0],
        "wakeups": engine[1],
        "end_s": end_s,
    }
    return summary


def kv_manager_waste(ts_df: pd.DataFrame) -> dict[str, float] | None:
    """A KV manager's run: its waste by cause, the mean share of capacity over the
    periodic samples of live replicas (as ``memory.waste_breakdown``); None for a run
    of single-pool policies (its timeseries has no such columns)."""
    if "share_padding" not in ts_df.columns:
        return None
    periodic = ts_df[(ts_df["trigger"] == "periodic") & ts_df["up"]]
    return {
        name.removeprefix("share_"): float(periodic[name].mean())
        for name in KV_WASTE_COLUMNS
        if not periodic[name].isna().all()
    }


def pool_report(scenario: Scenario, part: Parts, out_of_range: OutOfRange | None) -> dict[str, Any]:
    """One pool's replicas as the summary describes them: allocator kind (a KV manager's
    layout too, ``kv_layout``), KV capacity
    per replica, KV bytes per token of a replica (all its tensor-parallel GPUs
    together: a replica's free memory in bytes is its free tokens times this), the
    latency model used, and for a model with a validity range the
    steps the run simulated outside it (``out_of_range_calls``: steps, not calls) and
    the first such ``(prefill_tokens, decode_seqs, kv_tokens)``."""
    latency: dict[str, Any] = {"kind": scenario.latency.kind}
    if out_of_range is not None:
        first = out_of_range.first
        latency["out_of_range_calls"] = int(out_of_range.steps)
        latency["first_out_of_range"] = None if first is None else [int(v) for v in first]
    report: dict[str, Any] = {
        "allocator": part.allocator.kind,
        "kv_capacity_tokens": part.kv_capacity_tokens,
        "kv_bytes_per_token": part.spec.kv_bytes_per_token,
        "latency": latency,
    }
    notes = part.allocator.build(part.spec).layout_notes()
    if notes:  # a KV manager: how it laid the memory out
        report["kv_layout"] = list(notes)
    return report


def _combined_latency(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The pools' latency reports as one: the same when there is one pool; else the
    kind, the out-of-range steps summed and the first pool's first (in pool order)."""
    if len(reports) == 1:
        return reports[0]
    out = dict(reports[0])
    counted = [r for r in reports if "out_of_range_calls" in r]
    if counted:
        out["out_of_range_calls"] = sum(r["out_of_range_calls"] for r in counted)
        firsts = [r["first_out_of_range"] for r in counted if r["first_out_of_range"]]
        out["first_out_of_range"] = firsts[0] if firsts else None
    return out


def _with_alerts(events: pd.DataFrame, alerts: pd.DataFrame) -> pd.DataFrame:
    """The event log with a row per alert that started firing (``kind`` ``alert``,
    ``cause`` the alert, ``detail`` its severity and the seed's response), in time
    order (stable: at one instant, the run's own events first)."""
    firing = alerts[alerts["state"] == "firing"]
    if not len(firing):
        return events
    table = EventTable()
    for time_s, replica, alert, severity, response in zip(
        firing["time_s"].to_numpy(dtype=float).tolist(),
        firing["replica"].to_numpy(dtype=np.int64).tolist(),
        firing["alert"].astype(str).tolist(),
        firing["severity"].astype(str).tolist(),
        firing["response"].astype(str).tolist(),
        strict=True,
    ):
        table.add(
            time_s=time_s,
            replica=replica,
            kind="alert",
            cause=alert,
            detail=f"{severity}: {response}",
        )
    rows = frame(table)
    out = pd.concat([events, rows.astype(events.dtypes.to_dict())], ignore_index=True)
    return out.sort_values("time_s", kind="stable").reset_index(drop=True)


def _with_routes(req: pd.DataFrame, ids: np.ndarray, fleet: Fleet) -> pd.DataFrame:
    """``first_replica`` and ``route`` columns, aligned with the frame's request-id order,
    added to ``req`` itself (returned)."""
    order = np.argsort(ids, kind="stable")
    first = fleet.first_replica[order]
    # "routed" or "refused" by the first placement, then the few placed otherwise (by
    # id: the sorted ids' positions), with no Python object per request.
    route = np.array(["refused", "routed"], dtype=object)[(first >= 0).astype(np.intp)]
    kinds = fleet.route_kind
    if kinds:
        keys = np.fromiter(kinds.keys(), dtype=np.int64, count=len(kinds))
        route[np.searchsorted(ids[order], keys)] = list(kinds.values())
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
    fleet: Fleet,
    fleet_df: pd.DataFrame,
    req: pd.DataFrame,
    end_s: float,
    pools: list[dict[str, Any]],
) -> dict[str, Any]:
    """The summary's ``fleet`` section; ``pools`` are the pools' reports
    (:func:`pool_report`: allocator, KV capacity, KV bytes per token, latency model), in
    pool order; each pool lists its ``replicas``: the initial ones and those the
    autoscaler (or a postmortem's node events) added to it, by the pool each node was
    made in."""
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
            | report
            for i, (p, report) in enumerate(zip(config.pools, pools, strict=True))
        ],
        "router": config.router.kind,
        "restart_policy": config.restart.kind,
        "autoscaler": config.autoscaler.kind,
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
