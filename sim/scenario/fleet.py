"""A scenario's ``fleet:`` block: node pools, the router, client retries, the restart
policy, the autoscaler, node lifecycle times and faults (validated at the edge, frozen
past it). A scenario without it simulates one replica, as before.

Defaults and where they come from (docs/fleet.md, "Nodes and their lifecycle"):

* Node to serving, 240 +/- 30 s: provisioning (a GPU node joining the cluster and the
  serving pod scheduled: 180 +/- 30 s) then the model load (60 +/- 10 s for 8B-class
  weights from local disk). Cold starts of several minutes are what Kubernetes GPU
  autoscaling reports commonly show; set your own.
* Warm-up, 60 s: after the load, before the readiness probe passes (CUDA graph capture,
  compilation). The replica takes no traffic meanwhile (fragsim models warm-up as time
  not routable, not as slower steps).
* Router signals refreshed every 50 ms (``router_refresh_s``), as gateways scrape their
  endpoints' metrics; 0 reads every replica fresh at every decision.
* $/GPU-hour: the pool's GPU preset's price (``sim.models.hardware.GPUS``, the table
  ``fragsim hardware`` prints: on-demand list prices, mid-2025), times the GPUs per
  replica (``tensor_parallel``); an inline GPU's own ``usd_per_hour``. Set your
  contract's price per pool (``usd_per_gpu_hour``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import parse_allocator
from policies.autoscale.config import AutoscalerConfig, NoAutoscalerConfig
from policies.autoscale.registry import parse_autoscaler
from policies.restart.config import NoRestartConfig, RestartConfig
from policies.restart.registry import parse_restart
from policies.routing.config import LeastOutstandingConfig, LengthPoolsConfig, RouterConfig
from policies.routing.registry import parse_router
from sim.fields import MAX_SECONDS, Count, Flag, JsonObject, Number

MAX_NODES = 4096
"""Nodes in a fleet, all pools together, at any time (also the autoscaler's ceiling)."""


def _mapping(value: object) -> JsonObject:
    """A policy block must be a ``{kind: ...}`` mapping."""
    if not isinstance(value, dict):
        raise ValueError("expected a mapping with a 'kind'")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Duration(_Strict):
    """A random duration: normal with ``mean_s`` and ``sd_s``, truncated at 0 (seeded by
    the scenario's seed, one stream per node)."""

    mean_s: Number = Field(ge=0, le=MAX_SECONDS, description="Mean, seconds.")
    sd_s: Number = Field(0.0, ge=0, le=MAX_SECONDS, description="Standard deviation, seconds.")


Role = Literal["colocated", "prefill", "decode"]
"""What a pool's replicas do: both phases of a request (``colocated``), or one phase of a
disaggregated fleet's (Splitwise / DistServe / llm-d P/D; ``sim.fleet.disagg``)."""


class KVTransferConfig(BaseModel):
    """The link a disaggregated fleet moves a prompt's KV over, prefill replica to decode
    replica: a transfer of ``b`` bytes takes ``latency_s + 8 b / (bandwidth_gbps 1e9)``
    seconds (``sim.fleet.disagg``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    bandwidth_gbps: Number | None = Field(
        gt=0,
        le=1e6,
        description="Link bandwidth, gigabits per second (NVLink ~3600, 400 GbE RDMA "
        "~400); null: an ideal link, no bandwidth limit.",
    )
    latency_s: Number = Field(
        0.0, ge=0, le=3600, description="Fixed time per transfer (setup, handshake), seconds."
    )
    on_refusal: Literal["retry", "recompute", "fail"] = Field(
        "retry",
        description="A decode replica cannot place the KV: retry the hand-off after "
        "retry_delay_s, recompute (prefill again), or fail the request.",
    )
    retry_delay_s: Number = Field(
        0.05, ge=0, le=3600, description="Delay before a refused hand-off is tried again."
    )
    max_refusals: Count = Field(
        8,
        ge=0,
        le=1000,
        description="Refusals of one request after which it fails (any fate).",
    )

    def transfer_s(self, kv_bytes: int) -> float:
        """Seconds to move ``kv_bytes`` over the link."""
        if self.bandwidth_gbps is None:
            return float(self.latency_s)
        return float(self.latency_s) + 8.0 * kv_bytes / (float(self.bandwidth_gbps) * 1e9)


class PoolConfig(_Strict):
    """One node pool: ``count`` identical replicas at t = 0 (the autoscaler adds to and
    removes from the first pool unless ``scale_pool`` names another)."""

    name: str = Field("default", min_length=1, max_length=64, description="Pool label.")
    count: Count = Field(1, ge=0, le=MAX_NODES, description="Replicas at t = 0.")
    hardware: JsonObject | None = Field(
        None,
        description="Overrides of the scenario's hardware block for this pool "
        "(model, gpu, tensor_parallel, ...).",
    )
    allocator: SerializeAsAny[AllocatorConfig] | None = Field(
        None, description="This pool's allocator ({kind: ...}); default: the scenario's."
    )
    usd_per_gpu_hour: Number | None = Field(
        None,
        ge=0,
        le=1e6,
        description="Price of one GPU-hour; default: the pool's GPU's (sim.models.hardware.GPUS, "
        "as fragsim hardware lists it).",
    )
    initial_uptime_s: Number | list[Number] = Field(
        0.0,
        description="Uptime of each replica at t = 0: one number for all, or one per "
        "replica (nodes restarted at different times).",
    )
    role: Role = Field(
        "colocated",
        description="colocated: prefill and decode on the same replica; prefill / decode: "
        "a disaggregated fleet's pools (docs/disagg.md; needs fleet.kv_transfer).",
    )

    @field_validator("allocator", mode="before")
    @classmethod
    def _allocator(cls, value: object) -> AllocatorConfig | None:
        if value is None or isinstance(value, AllocatorConfig):
            return value
        return parse_allocator(_mapping(value))

    @model_validator(mode="after")
    def _uptimes(self) -> PoolConfig:
        u = self.initial_uptime_s
        values = u if isinstance(u, list) else [u]
        if isinstance(u, list) and len(u) != self.count:
            raise ValueError(
                f"initial_uptime_s lists {len(u)} values for {self.count} replicas (count)"
            )
        for v in values:
            if not 0 <= v <= MAX_SECONDS:
                raise ValueError(f"initial_uptime_s: got {v:g}; expected 0..{MAX_SECONDS:g} s")
        return self

    def price_usd_per_gpu_hour(self, gpu_usd_per_hour: float) -> float:
        """This pool's price of one GPU-hour: its own, else ``gpu_usd_per_hour`` (its GPU's
        price in ``sim.models.hardware``'s table, pool hardware overrides applied)."""
        return gpu_usd_per_hour if self.usd_per_gpu_hour is None else float(self.usd_per_gpu_hour)

    def uptime_of(self, index: int) -> float:
        u = self.initial_uptime_s
        return float(u[index]) if isinstance(u, list) else float(u)


class LifecycleConfig(_Strict):
    """How long a node takes from purchase to serving, and to come back from a restart."""

    provision: Duration = Duration(mean_s=180.0, sd_s=30.0)
    load: Duration = Duration(mean_s=60.0, sd_s=10.0)
    warmup_s: Number = Field(60.0, ge=0, le=MAX_SECONDS, description="Loaded, not yet ready.")


class FaultConfig(_Strict):
    """Node crashes: exponential times between failures of a serving node (MTBF), a
    repair time (MTTR) before the model loads again. A crash loses the node's requests:
    their clients retry (``scheduler.retry_attempts``) or they end ``failed-lost``."""

    mtbf_s: Number | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Mean serving time between crashes; none: no crashes (at most "
        "1,000,000 crash-clock draws per run, all nodes: nodes x span / mtbf_s).",
    )
    mttr: Duration = Duration(mean_s=600.0, sd_s=120.0)


class RetryConfig(_Strict):
    """Where a client's retry of a refused request goes (attempts and backoff are the
    scenario's ``scheduler.retry_attempts`` / ``retry_backoff_s``)."""

    reroute: Flag = Field(
        False,
        description="true: the router places the retry again; false: it lands on the "
        "replica that refused it (the seed's case) while that replica serves.",
    )


MIN_SCRAPE_INTERVAL_S = 1.0
"""The shortest alert scrape interval: Prometheus scrapes every 15-60 s, rarely below 1 s;
below it the alert evaluation's trend window (an hour of scrapes, per replica) would cost
more than the run (``sim.scenario.bounds.MAX_SCRAPES`` bounds the scrapes of a run)."""


class AlertOptions(_Strict):
    scrape_interval_s: Number = Field(
        30.0,
        ge=MIN_SCRAPE_INTERVAL_S,
        le=86400,
        description="Prometheus scrape interval the alerts see (at least 1 s; at most "
        "1,000,000 scrapes per run).",
    )


class FleetConfig(_Strict):
    """The fleet: pools, router, retries, restart policy, autoscaler, lifecycle, faults."""

    pools: list[PoolConfig] = Field(min_length=1, max_length=64)
    router: SerializeAsAny[RouterConfig] = Field(
        default_factory=LeastOutstandingConfig,
        description="Routing policy: {kind: ..., ...} (policies.routing).",
    )
    router_refresh_s: Number = Field(
        0.05,
        ge=0,
        le=3600,
        description="Router signals' refresh interval; 0: fresh reads (taken lazily at "
        "routing decisions: its cost does not depend on the interval).",
    )
    retry: RetryConfig = RetryConfig()
    restart: SerializeAsAny[RestartConfig] = Field(
        default_factory=NoRestartConfig,
        description="Restart policy: {kind: ..., ...} (policies.restart).",
    )
    autoscaler: SerializeAsAny[AutoscalerConfig] = Field(
        default_factory=NoAutoscalerConfig,
        description="Autoscaler: {kind: ..., ...} (policies.autoscale).",
    )
    min_replicas: Count | None = Field(
        None, ge=0, le=MAX_NODES, description="Autoscaler floor; default: the initial count."
    )
    max_replicas: Count | None = Field(
        None, ge=1, le=MAX_NODES, description="Autoscaler ceiling; default: 4x the initial count."
    )
    scale_pool: str | None = Field(None, description="The pool scale-ups add to.")
    lifecycle: LifecycleConfig = LifecycleConfig()
    faults: FaultConfig = FaultConfig()
    alerts: AlertOptions = AlertOptions()
    kv_transfer: KVTransferConfig | None = Field(
        None,
        description="A disaggregated fleet's KV link, prefill to decode pools "
        "(docs/disagg.md); needed when a pool has role prefill or decode.",
    )

    # Each policy block is parsed here, once, into its registered config class (kept:
    # the fleet builds its policies from it); errors name the kind and the field.
    @field_validator("router", mode="before")
    @classmethod
    def _router(cls, value: object) -> RouterConfig:
        return value if isinstance(value, RouterConfig) else parse_router(_mapping(value))

    @field_validator("restart", mode="before")
    @classmethod
    def _restart(cls, value: object) -> RestartConfig:
        return value if isinstance(value, RestartConfig) else parse_restart(_mapping(value))

    @field_validator("autoscaler", mode="before")
    @classmethod
    def _autoscaler(cls, value: object) -> AutoscalerConfig:
        if isinstance(value, AutoscalerConfig):
            return value
        return parse_autoscaler(_mapping(value))

    @model_validator(mode="after")
    def _sizes(self) -> FleetConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be distinct, got {names}")
        if self.scale_pool is not None and self.scale_pool not in names:
            raise ValueError(f"scale_pool {self.scale_pool!r} is not a pool: {names}")
        total = self.initial_replicas
        if total > MAX_NODES:
            raise ValueError(f"{total} replicas in all pools; at most {MAX_NODES}")
        if total == 0:
            raise ValueError("the pools hold no replica at t = 0 (every count is 0)")
        router = self.router
        if isinstance(router, LengthPoolsConfig):
            beyond = [i for i in router.long_replicas if i >= total]
            if beyond:
                raise ValueError(
                    f"router.long_replicas {beyond}: the fleet starts with {total} replicas "
                    f"(ids 0..{total - 1})"
                )
        if self.max_replicas is not None and self.max_replicas < self.floor:
            raise ValueError(f"max_replicas {self.max_replicas} is below min_replicas {self.floor}")
        self._check_disaggregated()
        return self

    def _check_disaggregated(self) -> None:
        """A P/D fleet: prefill and decode pools with replicas at t = 0, no colocated
        pool, a KV link, the P/D router, no autoscaler."""
        roles = {p.role for p in self.pools}
        is_pd = self.router.kind == "pd"
        if roles == {"colocated"}:  # (router pd: least outstanding)
            if self.kv_transfer is not None:
                raise ValueError(
                    "kv_transfer is a disaggregated fleet's: no pool has role prefill or decode"
                )
            return
        if "colocated" in roles:
            names = [p.name for p in self.pools if p.role == "colocated"]
            raise ValueError(
                f"pools {names} are colocated in a disaggregated fleet: give every pool "
                "role prefill or decode"
            )
        for role in ("prefill", "decode"):
            if sum(p.count for p in self.pools if p.role == role) == 0:
                raise ValueError(
                    f"a disaggregated fleet needs {role} replicas at t = 0: pools with "
                    f"role {role} and count >= 1 (roles given: "
                    f"{[p.role for p in self.pools]})"
                )
        if self.kv_transfer is None:
            raise ValueError(
                "a disaggregated fleet needs kv_transfer: {bandwidth_gbps: ..., latency_s: ...}"
            )
        if not is_pd:
            raise ValueError(
                f"router kind {self.router.kind!r} routes colocated fleets: a disaggregated "
                "fleet's router is kind pd"
            )
        if self.autoscaler.kind != "none":
            raise ValueError("a disaggregated fleet does not autoscale yet: autoscaler kind none")

    @property
    def disaggregated(self) -> bool:
        """Whether the pools are prefill and decode pools (``sim.fleet.disagg``)."""
        return self.kv_transfer is not None

    @property
    def initial_replicas(self) -> int:
        return sum(p.count for p in self.pools)

    @property
    def floor(self) -> int:
        return self.initial_replicas if self.min_replicas is None else self.min_replicas

    @property
    def ceiling(self) -> int:
        if self.max_replicas is not None:
            return self.max_replicas
        return min(MAX_NODES, max(4 * self.initial_replicas, self.floor))

    @property
    def scale_pool_index(self) -> int:
        if self.scale_pool is None:
            return 0
        return [p.name for p in self.pools].index(self.scale_pool)


Drain = Literal["wait", "kill", "redirect"]
