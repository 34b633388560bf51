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
A disaggregated fleet's outputs add its hand-offs (``sim.fleet.disagg_outputs``: the
requests' prefill and decode replicas and transfers, route ``pd-recompute``, the
summary's ``fleet.disagg`` and each pool's ``role``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pandas as pd

from sim.engine.recorder import KV_WASTE_COLUMNS, EventTable
from sim.fleet.disagg_outputs import with_handoff_diagnosis, with_handoffs
from sim.fleet.fleet_summary import disagg_section, fleet_summary
from sim.latency.base import OutOfRange
from sim.results.frames import PREFIX_CACHE_COLUMNS, frame
from sim.results.io import RunResult
from sim.results.offload_summary import offload_summary
from sim.results.seed_alerts import THRESHOLD_FIELDS
from sim.results.summary import PoolReport, summarize, with_firings
from sim.results.summary_fleet import Fleet as FleetSection
from sim.results.summary_fleet import FleetAlerts
from sim.results.summary_model import Offload, Summary
from sim.results.summary_sections import Alert, Engine, LatencyReport
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
    tier_kinds,
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
    req_df = done.records.frame(part.allocator.caches_prefixes())
    pools = [pool_report(scenario, part, traffic.out_of_range)]
    summary = run_summary(
        scenario,
        (req_df, ts_df, ev_df),
        done.end_s,
        beyond_duration,
        pools,
        done.engine_counters(),
    )
    return RunResult(req_df, ts_df, ev_df, summary)


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
    req_df = done.records.frame(any(p.allocator.caches_prefixes() for p in parts))
    req_df = _with_routes(req_df, fleet.columns.ids, fleet)
    if fleet.disagg is not None:
        req_df = with_handoffs(req_df, fleet.disagg)
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
    if fleet.disagg is not None:
        req_df = with_handoff_diagnosis(req_df, fleet.disagg)
    ev_df = _with_alerts(ev_df, alerts)
    pools = [
        pool_report(scenario, part, counted)
        for part, counted in zip(parts, fleet.out_of_range, strict=True)
    ]
    fleet_df = pd.DataFrame(fleet.fleet_rows)
    tiers = tier_kinds(ts_df)
    # what alerts.parquet was evaluated with: the exports' defaults (sim.cli.export)
    timing = DEFAULT_TIMING.recorded(tiers)  # each rule's for: and the failure window
    evaluated = FleetAlerts(
        scrape_interval_s=scrape_s,
        trend_window_s=trend_s,
        thresholds={name: getattr(thresholds, name) for name in THRESHOLD_FIELDS},
        **timing,
    )
    disagg = disagg_section(fleet, (ts_df, ev_df, alerts), thresholds.ratio_alert)
    section = fleet_summary(fleet, fleet_df, req_df, end_s, pools, router, evaluated, disagg)
    summary = run_summary(
        scenario,
        (req_df, ts_df, ev_df),
        end_s,
        beyond_duration,
        pools,
        done.engine_counters(),
        fleet=section,
        firings=(episode_counts(alerts), timing["for_s"]),
    )
    return RunResult(req_df, ts_df, ev_df, summary, fleet=fleet_df, alerts=alerts)


def run_summary(
    scenario: Scenario,
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    end_s: float,
    beyond_duration: int,
    pools: list[PoolReport],
    engine: tuple[int, int],
    *,
    fleet: FleetSection | None = None,
    firings: tuple[dict[str, tuple[int, int]], dict[str, float]] | None = None,
) -> Summary:
    """The summary of a run's (requests, timeseries, events) ending at ``end_s``, with
    the scenario's identity, its pools (:func:`pool_report`, one per pool: one for a
    single replica) and ``engine`` = (steps, wake-ups) counters; a fleet's ``fleet``
    section and its alerts' ``firings`` (the alert log's episodes by alert, and each
    rule's ``for:``: :func:`sim.results.summary.with_firings`) where it has them. Built
    as the typed model, section by section: what ``summary.json`` holds, checked as any
    reader checks it (an undefined statistic is null), so a run never writes what no
    reader accepts.

    ``allocator``, ``kv_capacity_tokens``, ``kv_bytes_per_token`` and ``latency``
    describe the replicas: the pool's values when every pool has the same; otherwise the
    allocator kinds joined by `` + `` in pool order, a null capacity (and bytes per
    token where they differ), and the latency model's kind with the out-of-range steps
    of every pool (each pool's own are in ``fleet.pools``)."""
    req_df, ts_df, ev_df = frames
    thresholds = scenario.metrics.thresholds()
    stats = summarize(
        req_df,
        ts_df,
        ev_df,
        end_s=end_s,
        thresholds=thresholds,
        beyond_duration=beyond_duration if scenario.duration_s is not None else None,
        kv_manager_waste=kv_manager_waste(ts_df),
        prefix_counts=prefix_cache_counts(req_df),
    )
    alerts: list[Alert] = stats.alerts
    if firings is not None:
        alerts = with_firings(alerts, firings[0], thresholds, firings[1])
    optional = _Optional()  # sections a run writes only when it has them
    if fleet is not None:
        optional["fleet"] = fleet
    layouts = [p.kv_layout for p in pools if p.kv_layout is not None]
    if len(pools) == 1 and layouts:
        optional["kv_layout"] = layouts[0]
    offload = scenario.kv_offload
    if offload is not None:
        tiers = [(t.kind, (t.allocator.kind if t.allocator else "paged")) for t in offload.tiers]
        section = offload_summary(ts_df, tiers, offload.chunk_tokens, thresholds.ratio_alert)
        if section is not None:
            optional["offload"] = section
    kinds = list(dict.fromkeys(p.allocator for p in pools))
    capacities = {p.kv_capacity_tokens for p in pools}
    per_token = {p.kv_bytes_per_token for p in pools}
    return Summary(
        requests=stats.requests,
        span_s=stats.span_s,
        throughput=stats.throughput,
        latency_s=stats.latency_s,
        failures=stats.failures,
        memory=stats.memory,
        prefix_cache=stats.prefix_cache,
        alerts=alerts,
        scenario=scenario.name,
        seed=scenario.seed,
        allocator=" + ".join(kinds),
        kv_capacity_tokens=capacities.pop() if len(capacities) == 1 else None,
        kv_bytes_per_token=per_token.pop() if len(per_token) == 1 else None,
        latency=_combined_latency([p.latency for p in pools]),
        engine=Engine(mode=scenario.mode, steps=engine[0], wakeups=engine[1], end_s=end_s),
        **optional,
    )


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


class _Optional(TypedDict, total=False):
    """The summary's sections a run writes only when it has them (unset otherwise)."""

    fleet: FleetSection
    kv_layout: list[str]
    offload: Offload


def prefix_cache_counts(req_df: pd.DataFrame) -> dict[str, int]:
    """vLLM's prefix-cache counters over the run (``PrefixCacheStats``, summed): each
    of the requests table's :data:`~sim.results.frames.PREFIX_CACHE_COLUMNS` summed,
    named without its ``prefix_`` (``queried_tokens``, ``hit_tokens``,
    ``preempted_queried_tokens``, ``preempted_hit_tokens``); empty for a run with no
    prefix cache (no such columns)."""
    if PREFIX_CACHE_COLUMNS[0] not in req_df.columns:
        return {}
    return {name.removeprefix("prefix_"): int(req_df[name].sum()) for name in PREFIX_CACHE_COLUMNS}


def pool_report(scenario: Scenario, part: Parts, out_of_range: OutOfRange | None) -> PoolReport:
    """One pool's replicas as the summary describes them: allocator kind (a KV manager's
    layout too, ``kv_layout``), KV capacity
    per replica, KV bytes per token of a replica (all its tensor-parallel GPUs
    together: a replica's free memory in bytes is its free tokens times this), the
    latency model used, and for a model with a validity range the
    steps the run simulated outside it (``out_of_range_calls``: steps, not calls) and
    the first such ``(prefill_tokens, decode_seqs, kv_tokens)``."""
    if out_of_range is None:
        latency = LatencyReport(kind=scenario.latency.kind)
    else:
        first = out_of_range.first
        latency = LatencyReport(
            kind=scenario.latency.kind,
            out_of_range_calls=int(out_of_range.steps),
            first_out_of_range=None if first is None else [int(v) for v in first],
        )
    notes = part.allocator.build(part.spec).layout_notes()
    return PoolReport(
        allocator=part.allocator.kind,
        kv_capacity_tokens=part.kv_capacity_tokens,
        kv_bytes_per_token=part.spec.kv_bytes_per_token,
        latency=latency,
        kv_layout=list(notes) if notes else None,  # a KV manager: how it laid memory out
    )


def _combined_latency(reports: list[LatencyReport]) -> LatencyReport:
    """The pools' latency reports as one: the same when there is one pool; else the
    kind, the out-of-range steps summed and the first pool's first (in pool order)."""
    if len(reports) == 1:
        return reports[0]
    counted = [r for r in reports if r.out_of_range_calls is not None]
    if not counted:
        return reports[0]
    firsts = [r.first_out_of_range for r in counted if r.first_out_of_range]
    return LatencyReport(
        kind=reports[0].kind,
        out_of_range_calls=sum(r.out_of_range_calls or 0 for r in counted),
        first_out_of_range=firsts[0] if firsts else None,
    )


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
