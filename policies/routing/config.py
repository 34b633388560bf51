"""Every router's configuration: the ``{kind: ..., ...}`` mapping a fleet scenario names,
validated with pydantic at the edge (strict types, bounded fields, unknown fields
refused), and ``build`` for a fresh router (a router holds state: build one per run)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policies.routing.affinity import SessionAffinity, WeightedScorer
from policies.routing.base import Router
from policies.routing.fragmentation import FragmentationAware
from policies.routing.load import (
    LeastInFlight,
    LeastKvUsage,
    LeastOutstanding,
    LengthPools,
    PowerOfTwo,
    ShortestQueue,
)
from policies.routing.pd import DecodeChoice, PrefillDecode
from policies.routing.simple import RandomRouter, RoundRobin

MAX_SEED = (1 << 63) - 1
MAX_REPLICAS = 1 << 16


class RouterConfig(BaseModel):
    """A router as a scenario names it: ``{kind: round_robin, ...parameters}``.

    Subclasses fix ``kind`` to a ``Literal`` and give every parameter bounds and a
    docstring; ``build`` makes a fresh router."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    kind: str

    def build(self) -> Router:
        raise NotImplementedError


class RoundRobinConfig(RouterConfig):
    """Cycle through the replicas in order, skipping those that are down."""

    kind: Literal["round_robin"] = "round_robin"

    def build(self) -> Router:
        return RoundRobin()


class RandomConfig(RouterConfig):
    """A uniformly random up replica."""

    kind: Literal["random"] = "random"
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seed of the router's own generator."""

    def build(self) -> Router:
        return RandomRouter(self.seed)


class LeastOutstandingConfig(RouterConfig):
    """The up replica with the fewest waiting plus running requests."""

    kind: Literal["least_outstanding"] = "least_outstanding"

    def build(self) -> Router:
        return LeastOutstanding()


class LeastInFlightConfig(RouterConfig):
    """The up replica with the fewest requests the router itself has in flight there
    (counted at dispatch and completion, current even when ``router_refresh_s`` makes
    scraped signals stale); with ``power_of_two_seed``, of two sampled up replicas."""

    kind: Literal["least_in_flight"] = "least_in_flight"
    power_of_two_seed: int | None = Field(None, ge=0, le=MAX_SEED)
    """Seed of two-choice sampling; null: every up replica is considered."""

    def build(self) -> Router:
        return LeastInFlight(self.power_of_two_seed)


class ShortestQueueConfig(RouterConfig):
    """Join the shortest queue: the fewest waiting (not yet admitted) requests."""

    kind: Literal["shortest_queue"] = "shortest_queue"

    def build(self) -> Router:
        return ShortestQueue()


class PowerOfTwoConfig(RouterConfig):
    """Two up replicas sampled at random; the one with fewer outstanding requests."""

    kind: Literal["power_of_two"] = "power_of_two"
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seed of the router's own generator."""

    def build(self) -> Router:
        return PowerOfTwo(self.seed)


class LeastKvUsageConfig(RouterConfig):
    """The up replica whose KV pool is least used."""

    kind: Literal["least_kv_usage"] = "least_kv_usage"

    def build(self) -> Router:
        return LeastKvUsage()


class WeightedConfig(RouterConfig):
    """A weighted scorer over queue, KV usage and prefix-cache affinity; the defaults are
    llm-d's default profile (queue 2, KV-cache utilisation 2, prefix cache 3)."""

    kind: Literal["weighted"] = "weighted"
    queue_weight: float = Field(2.0, ge=0.0, le=1000.0)
    """Weight of the queue score (fewest waiting requests scores 1)."""
    kv_usage_weight: float = Field(2.0, ge=0.0, le=1000.0)
    """Weight of the KV score, ``1 - kv_usage``."""
    prefix_weight: float = Field(3.0, ge=0.0, le=1000.0)
    """Weight of the prefix score: the share of the request's prefix hashes (leading
    run) the router has sent to that replica recently."""
    lru_blocks: int = Field(31_250, ge=1, le=100_000_000)
    """Prefix hashes remembered per replica (LRU); the inference extension's prefix
    plugin is commonly configured with ``lruCapacityPerServer: 31250``."""
    max_prefix_blocks: int = Field(256, ge=1, le=1_000_000)
    """Leading prefix hashes of a request that are matched and remembered (the prefix
    plugin's ``maxPrefixBlocksToMatch``)."""

    @model_validator(mode="after")
    def _some_weight(self) -> WeightedConfig:
        if not (self.queue_weight or self.kv_usage_weight or self.prefix_weight):
            raise ValueError("at least one weight must be > 0")
        return self

    def build(self) -> Router:
        return WeightedScorer(
            self.queue_weight,
            self.kv_usage_weight,
            self.prefix_weight,
            self.lru_blocks,
            self.max_prefix_blocks,
        )


class SessionAffinityConfig(RouterConfig):
    """A session sticks to its replica on a consistent-hash ring unless that replica is
    overloaded; requests without a session go to the least outstanding."""

    kind: Literal["session_affinity"] = "session_affinity"
    epsilon: float = Field(0.25, ge=0.0, le=100.0)
    """Load bound: a replica with more than ``(1 + epsilon) x`` the mean outstanding
    requests is passed over for the next on the ring."""
    virtual_nodes: int = Field(64, ge=1, le=4096)
    """Points each replica owns on the ring (more: a more even share of sessions)."""

    def build(self) -> Router:
        return SessionAffinity(self.epsilon, self.virtual_nodes)


class LengthPoolsConfig(RouterConfig):
    """Requests longer than a threshold go to a dedicated pool of replicas, the others to
    the rest; least outstanding within a pool."""

    kind: Literal["length_pools"] = "length_pools"
    threshold_tokens: int = Field(8192, ge=1, le=1 << 40)
    """A request with prompt + output tokens above this is long."""
    long_replicas: list[Annotated[int, Field(ge=0, lt=MAX_REPLICAS)]] = Field(
        default_factory=lambda: [0], min_length=1, max_length=MAX_REPLICAS
    )
    """Indices (into the fleet's replica list) of the long pool; the rest serve short."""

    @field_validator("long_replicas")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"long_replicas must be distinct, got {value}")
        return value

    def build(self) -> Router:
        return LengthPools(self.threshold_tokens, self.long_replicas)


class FragmentationAwareConfig(RouterConfig):
    """Best fit by largest free extent among the replicas the request fits in one piece;
    least outstanding when none fits."""

    kind: Literal["fragmentation_aware"] = "fragmentation_aware"

    def build(self) -> Router:
        return FragmentationAware()


class PrefillDecodeConfig(RouterConfig):
    """A disaggregated fleet's router: least outstanding among the prefill replicas at
    arrival; at the hand-off, a decode replica that fits the request's KV (docs/disagg.md)."""

    kind: Literal["pd"] = "pd"
    decode: DecodeChoice = "least_outstanding"
    """Among the decode replicas that fit: ``least_outstanding`` or ``best_fit`` (the
    smallest free extent left after the KV)."""

    def build(self) -> Router:
        return PrefillDecode(self.decode)
