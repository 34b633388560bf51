"""A fleet run's summary section (``summary.json``'s ``fleet``, the typed
:class:`~sim.results.summary_fleet.Fleet`), built from the fleet the loop simulated:
its pools (each pool's report, ``sim.outputs.pool_report``, with its replicas and, in a
disaggregated fleet, its role), router, policies, replica counts, bill, the settings
``alerts.parquet`` was evaluated with and a disaggregated fleet's ``disagg``
(:mod:`sim.fleet.disagg_outputs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from sim.fleet.disagg_outputs import disagg_summary
from sim.results.summary import PoolReport
from sim.results.summary_fleet import Disagg, FleetAlerts, FleetReplicas, Pool
from sim.results.summary_fleet import Fleet as FleetSection
from sim.results.summary_sections import finite

if TYPE_CHECKING:
    from policies.routing.base import Router
    from sim.fleet.fleet import Fleet
    from sim.scenario.fleet import PoolConfig


def fleet_summary(
    fleet: Fleet,
    fleet_df: pd.DataFrame,
    req: pd.DataFrame,
    end_s: float,
    pools: list[PoolReport],
    router: Router | None,
    alerts: FleetAlerts,
    disagg: Disagg | None,
) -> FleetSection:
    """The summary's ``fleet`` section; ``pools`` are the pools' reports
    (``sim.outputs.pool_report``: allocator, KV capacity, KV bytes per token, latency model), in
    pool order; each pool lists its ``replicas``: the initial ones and those the
    autoscaler (or a postmortem's node events) added to it, by the pool each node was
    made in, and a disaggregated fleet's pool its ``role``. ``router``: the scenario's
    router's replacement, if any (a postmortem's recorded routes), named instead;
    ``alerts``: what ``alerts.parquet`` was evaluated with; ``disagg``: a disaggregated
    fleet's section (:func:`disagg_section`)."""
    config = fleet.config
    nodes = fleet.nodes
    hours = sum(n.billed_s(end_s) for n in nodes) / 3600.0
    cost = sum(n.cost_usd(end_s) for n in nodes)
    avoidable = [n for n in nodes if n.avoidable]
    output_tokens = float(req["generated_tokens"].sum()) if len(req) else 0.0
    replicas = fleet_df["replicas"] if len(fleet_df) else pd.Series([0])
    optional = {} if disagg is None else {"disagg": disagg}
    return FleetSection(
        pools=[
            _pool(p, [n.replica_id for n in nodes if n.pool_index == i], report, disagg)
            for i, (p, report) in enumerate(zip(config.pools, pools, strict=True))
        ],
        router=config.router.kind if router is None else router.name,
        restart_policy=config.restart.kind,
        autoscaler=config.autoscaler.kind,
        replicas=FleetReplicas(
            initial=config.initial_replicas,
            peak=int(replicas.max()),
            final=int(replicas.iloc[-1]),
            mean=float(hours * 3600.0 / end_s) if end_s > 0 else float(config.initial_replicas),
        ),
        replica_hours=hours,
        cost_usd=cost,
        cost_per_million_output_tokens_usd=finite(cost / output_tokens * 1e6)
        if output_tokens
        else None,
        avoidable_replica_hours=sum(n.billed_s(end_s) for n in avoidable) / 3600.0,
        avoidable_cost_usd=sum(n.cost_usd(end_s) for n in avoidable),
        restarts=dict(sorted(fleet.restarts_by_cause.items())),
        crashes=sum(n.crashes_total for n in nodes),
        scale_ups=fleet.scale_ups,
        scale_downs=fleet.scale_downs,
        route_refusals=fleet.route_refusals,
        alerts=alerts,
        **optional,
    )


def _pool(
    config: PoolConfig, replicas: list[int], report: PoolReport, disagg: Disagg | None
) -> Pool:
    """One pool's entry of the ``fleet`` section: its name, initial count and
    ``replicas``, its ``report`` (:func:`pool_report`) and, in a disaggregated fleet
    (``disagg`` given), its role."""
    optional = _PoolOptional()
    if report.kv_layout is not None:
        optional["kv_layout"] = report.kv_layout
    if disagg is not None:
        optional["role"] = config.role
    return Pool(
        name=config.name,
        count=config.count,
        replicas=replicas,
        allocator=report.allocator,
        kv_capacity_tokens=report.kv_capacity_tokens,
        kv_bytes_per_token=report.kv_bytes_per_token,
        latency=report.latency,
        **optional,
    )


def disagg_section(
    fleet: Fleet, frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], ratio_alert: float
) -> Disagg | None:
    """A disaggregated fleet's ``fleet.disagg`` of the run's (timeseries, events, alerts)
    (``sim.fleet.disagg_outputs``); None for a fleet that is not one."""
    if fleet.disagg is None:
        return None
    roles = [p.role for p in fleet.config.pools]
    by_replica = {n.replica_id: roles[n.pool_index] for n in fleet.nodes}
    return disagg_summary(fleet.disagg, by_replica, frames, ratio_alert)


class _PoolOptional(TypedDict, total=False):
    """A pool's fields a run writes only when it has them (unset otherwise)."""

    kv_layout: list[str]
    role: str
