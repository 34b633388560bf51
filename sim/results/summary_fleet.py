"""A fleet run's summary section (``summary.json``'s ``fleet``): its pools, alert
settings, replica counts, bill and, for a disaggregated fleet, the KV link, transfers
and each role's memory. Part of :class:`sim.results.summary_model.Summary`; checked as
its module docstring says.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from sim.fields import MAX_COUNT
from sim.results.summary_sections import (
    MAX_INTERVAL_S,
    MAX_WINDOW_SCRAPES,
    MIN_SCRAPE_INTERVAL_S,
    Amount,
    BytesPerToken,
    Count,
    LatencyReport,
    RatioStats,
    Replica,
    Seconds,
    Section,
    Share,
    Tokens,
    fits_in_bytes,
)


class Pool(Section):
    name: str
    """The pool's name."""
    count: Count
    """Its initial replicas."""
    replicas: list[Replica] | None = None
    """Its replicas' ids: the initial ones and those scaled up into it."""
    allocator: str | None = None
    """Its allocator kind."""
    kv_capacity_tokens: Tokens | None = None
    """KV capacity of one of its replicas."""
    kv_bytes_per_token: BytesPerToken | None = None
    """KV bytes per token of one of its replicas (all its GPUs)."""
    latency: LatencyReport | None = None
    """Its latency model and out-of-range steps."""
    kv_layout: list[str] | None = None
    """A KV manager's pool only: how it laid the memory out (groups, padding, pools)."""
    role: str | None = None
    """A disaggregated fleet's pool only: ``prefill`` or ``decode``."""

    @model_validator(mode="after")
    def _bytes_fit(self) -> Pool:
        fits_in_bytes(self.kv_capacity_tokens, self.kv_bytes_per_token)
        return self


class FleetAlerts(Section):
    scrape_interval_s: (
        Annotated[float, Field(ge=MIN_SCRAPE_INTERVAL_S, le=MAX_INTERVAL_S, allow_inf_nan=False)]
        | None
    ) = None
    """The scrape interval ``alerts.parquet`` was evaluated at."""
    trend_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Its trend window (at least one scrape)."""
    thresholds: dict[str, Share] | None = None
    """The alert thresholds, by ``AlertThresholds`` field."""
    for_s: dict[str, Seconds] | None = None
    """Each rule's ``for:``, by alert."""
    failure_window_s: Seconds | None = None
    """The failure rule's window."""

    @model_validator(mode="after")
    def _window_spans_scrapes(self) -> FleetAlerts:
        scrape, window = self.scrape_interval_s, self.trend_window_s
        if scrape is None or window is None:
            return self
        if window < scrape:
            raise ValueError(
                f"trend_window_s {window:g} is shorter than scrape_interval_s {scrape:g}"
            )
        if window / scrape > MAX_WINDOW_SCRAPES:
            raise ValueError(
                f"trend_window_s {window:g} spans more than {MAX_WINDOW_SCRAPES:,} scrapes"
            )
        return self


class FleetReplicas(Section):
    initial: Count
    """Replicas at the start."""
    peak: Count
    """The most at one sample."""
    final: Count
    """At the last sample."""
    mean: Annotated[float, Field(ge=0, le=MAX_COUNT, allow_inf_nan=False)]
    """Billed replica-seconds over the run's end."""


class KVLink(Section):
    bandwidth_gbps: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None
    """Link bandwidth, gigabits per second; null: no bandwidth limit."""
    latency_s: Seconds
    """Fixed time per transfer."""
    on_refusal: str
    """The fate of a refused hand-off: ``retry``, ``recompute`` or ``fail``."""


class Transfers(Section):
    started: Count
    """KV transfers started: a decode replica reserved the KV's blocks (a request refused
    and retried may start more than one)."""
    landed: Count
    """Transfers whose request joined its decode replica's batch once the KV had landed
    (the rest: in flight or waiting for room at the run's end, or their decode replica
    went down)."""
    kv_bytes: Count
    """KV bytes sent, every transfer together."""
    mean_s: Seconds | None
    """Mean transfer time; null with no transfer."""
    p99_s: Seconds | None
    """99th-percentile transfer time; null as ``mean_s``."""


class RoleMemory(Section):
    replicas: list[Replica]
    """The role's replicas' ids."""
    mean_used_share: Share | None
    """Mean share of KV memory used over the periodic samples of its replicas up; null
    with none."""
    largest_contiguous_free_block_ratio: RatioStats
    """Its periodic samples' largest free extent over all free memory (``ratio_alert``:
    the scenario's)."""
    allocation_failures: Count
    """Admission and growth failures on its replicas."""
    preemptions: Count
    """Preemptions on its replicas."""
    alerts_fired: dict[str, Count]
    """Alerts that started firing on its replicas (``alerts.parquet``), by alert."""


class Disagg(Section):
    link: KVLink
    """The KV link, prefill to decode replicas."""
    transfers: Transfers
    """KV transfers."""
    refusals: dict[str, Count]
    """Hand-offs refused, by cause (``fragmentation``, ``capacity``: no decode replica
    fit, or the chosen one could not reserve the KV's blocks; ``no-decode-replica``;
    ``decode-down``: it went down during the transfer)."""
    fates: dict[str, Count]
    """The same refusals by what they did (``retry``, ``recompute``, ``fail``)."""
    prefill: RoleMemory
    """The prefill replicas' memory: short-lived prompt KV."""
    decode: RoleMemory
    """The decode replicas' memory: long-lived KV."""


class Fleet(Section):
    pools: Annotated[list[Pool], Field(min_length=1)]
    """The pools, in the scenario's order."""
    router: str
    """The router (a postmortem's recorded routes: ``recorded``)."""
    restart_policy: str
    """The restart policy."""
    autoscaler: str
    """The autoscaler."""
    replicas: FleetReplicas
    """Replica counts."""
    replica_hours: Amount
    """Billed replica-hours."""
    cost_usd: Amount
    """Their cost."""
    cost_per_million_output_tokens_usd: Amount | None
    """Cost per million generated tokens; null when none were generated."""
    avoidable_replica_hours: Amount
    """Replica-hours of nodes restarted for fragmentation that a policy could avoid."""
    avoidable_cost_usd: Amount
    """Their cost."""
    restarts: dict[str, Count]
    """Restarts by cause."""
    crashes: Count
    """Node crashes."""
    scale_ups: Count
    """Nodes the autoscaler added."""
    scale_downs: Count
    """Nodes it removed."""
    route_refusals: Count
    """Requests no replica would take."""
    alerts: FleetAlerts | None = None
    """What ``alerts.parquet`` was evaluated with (the exports' defaults)."""
    disagg: Disagg | None = None
    """A disaggregated fleet only: its KV transfers and each role's memory."""
