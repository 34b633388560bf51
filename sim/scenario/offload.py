"""The scenario's ``kv_offload`` block: KV tiers below every replica's GPU pool
(``sim.engine.offload`` says what they do), validated here and built into the engine's
frozen :class:`~sim.engine.offload.OffloadSpec`.

::

    kv_offload:
      chunk_tokens: 256                 # the offload chunk (vLLM's offloading block_size)
      store_threshold: 1                # offers of a chunk before it is stored (vLLM's)
      tiers:                            # loaded from in this order
        - kind: host                    # host | nvme | remote, each at most once
          capacity_gib: 64              # or capacity_bytes
          bandwidth_gb_per_s: 25        # 1 GB = 1e9 bytes
          latency_s: 0.00001
          allocator: {kind: best_fit}   # any single-pool policy; default: paged chunks

A tier's allocator places objects that never grow: a contiguous policy's
``initial_extra_tokens`` is 0 unless set, and a paged policy keeps no prefix cache of
its own (the tier's chunk index is its cache). The default allocator is a pool of
fixed chunks (``paged`` with ``block_size_tokens: chunk_tokens``), as vLLM's CPU tier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.config import AllocatorConfig, PagedConfig
from policies.allocators.registry import ALLOCATORS
from sim.engine.offload import OffloadSpec, TierSpec, TierStore
from sim.fields import MAX_BYTES_PER_S, Count, Number
from sim.scenario.allocator_field import allocator_from

GIB = 1 << 30
MAX_TIER_BYTES = 1 << 56
"""A tier's capacity: 64 PiB, above any store."""
KV_MANAGERS: tuple[str, ...] = tuple(k for k, c in ALLOCATORS.items() if c.kv_manager)
"""Allocator kinds a tier cannot use: they split memory by layer kind, a tier holds chunks
(the registered kinds whose config says ``kv_manager``; the tier's check reads the flag
itself, so a kind registered later is refused too)."""


def _is_kv_manager(kind: object) -> bool:
    """Whether ``kind`` names a registered allocator that is a KV manager (its config's
    ``kv_manager``), looked up now (a kind registered after import counts too)."""
    cls = ALLOCATORS.get(kind) if isinstance(kind, str) else None
    return cls is not None and cls.kv_manager


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TierConfig(_Strict):
    """One tier below the GPU."""

    kind: Literal["host", "nvme", "remote"] = Field(
        description="Pinned host memory, local NVMe, or a remote store (kept across restarts)."
    )
    capacity_bytes: Count | None = Field(
        None, ge=1, le=MAX_TIER_BYTES, description="Capacity in bytes (or capacity_gib)."
    )
    capacity_gib: Number | None = Field(
        None, gt=0, le=MAX_TIER_BYTES / GIB, description="Capacity in GiB (2^30 bytes)."
    )
    bandwidth_gb_per_s: Number = Field(
        gt=0, le=MAX_BYTES_PER_S / 1e9, description="Load bandwidth to the GPU, GB/s (1e9 B/s)."
    )
    latency_s: Number = Field(ge=0, le=60, description="Fixed cost of one load, seconds.")
    allocator: SerializeAsAny[AllocatorConfig] | None = Field(
        None, description="The tier's allocator: {kind: ...}; default: paged chunks."
    )
    shared: bool = Field(
        False,
        description="remote only: one store shared by every replica of the fleet "
        "(mode: exact); false: each replica has its own.",
    )

    @field_validator("allocator", mode="before")
    @classmethod
    def _allocator(cls, value: object) -> AllocatorConfig | None:
        if value is None or isinstance(value, AllocatorConfig):
            return value
        if isinstance(value, dict) and _is_kv_manager(value.get("kind")):
            raise ValueError(
                f"{value['kind']} is a KV manager (it splits memory by layer kind); a "
                "tier takes a single-pool policy such as best_fit, buddy or paged"
            )
        config = allocator_from(value)  # a missing kind: its did-you-mean
        asked_caching = isinstance(value, dict) and value.get("prefix_caching") is True
        if isinstance(config, PagedConfig) and asked_caching:
            raise ValueError(
                "prefix_caching: a tier keeps no prefix cache of its own (its chunk index "
                "is its cache); leave prefix_caching out"
            )
        return config

    @model_validator(mode="after")
    def _one_capacity(self) -> TierConfig:
        if (self.capacity_bytes is None) == (self.capacity_gib is None):
            raise ValueError("give exactly one of capacity_bytes and capacity_gib")
        return self

    @model_validator(mode="after")
    def _shared_remote(self) -> TierConfig:
        if self.shared and self.kind != "remote":
            raise ValueError(
                f"shared: a {self.kind} tier is the replica's own memory; only a remote "
                "store is shared by a fleet's replicas"
            )
        return self

    @property
    def bytes(self) -> int:
        if self.capacity_bytes is not None:
            return self.capacity_bytes
        assert self.capacity_gib is not None
        return int(self.capacity_gib * GIB)


class OffloadConfig(_Strict):
    """KV offload tiers below each replica's GPU pool (``sim.engine.offload``)."""

    chunk_tokens: Count = Field(
        256, ge=1, le=1 << 20, description="Offload chunk, tokens (LMCache's default 256)."
    )
    tiers: tuple[TierConfig, ...] = Field(description="The tiers, loaded from in this order.")
    store_threshold: Count = Field(
        1, ge=1, le=1_000_000, description="Offers of a chunk before it is stored (vLLM's)."
    )
    max_tracker_size: Count = Field(
        64_000, ge=1, le=100_000_000, description="Keys the offer counts remember."
    )

    @model_validator(mode="after")
    def _distinct_kinds(self) -> OffloadConfig:
        if not self.tiers:
            raise ValueError("tiers: give at least one tier")
        kinds = [t.kind for t in self.tiers]
        for kind in kinds:
            if kinds.count(kind) > 1:
                raise ValueError(
                    f"tier kind {kind!r} is given {kinds.count(kind)} times; at most once"
                )
        return self

    def build(
        self,
        kv_bytes_per_token: int,
        max_seq_tokens: int,
        hash_block_tokens: int,
        shared: dict[str, tuple[int, TierStore]] | None = None,
    ) -> OffloadSpec:
        """The engine's spec for a replica of ``kv_bytes_per_token``. ``shared``: the
        run's shared stores by tier kind, with the KV bytes per token they were built
        for (one dict per run, filled at its first pool; None: no sharing). Raises
        ValueError naming the field of a tier that cannot hold one chunk, whose
        allocator cannot be built, or that is shared by pools of other KV sizes."""
        tiers = []
        for i, tier in enumerate(self.tiers):
            capacity_tokens = tier.bytes // kv_bytes_per_token
            where = f"kv_offload.tiers.{i}"
            unit = "capacity_bytes" if tier.capacity_bytes is not None else "capacity_gib"
            if capacity_tokens < self.chunk_tokens:
                raise ValueError(
                    f"field {where}.{unit}: {tier.bytes:,} bytes hold {capacity_tokens:,} "
                    f"tokens of KV ({kv_bytes_per_token:,} bytes each), less than one chunk "
                    f"of {self.chunk_tokens} tokens (kv_offload.chunk_tokens)"
                )
            config = _tier_allocator(tier.allocator, self.chunk_tokens)
            spec = PoolSpec(
                capacity_tokens=capacity_tokens,
                kv_bytes_per_token=kv_bytes_per_token,
                max_seq_tokens=max(max_seq_tokens, self.chunk_tokens),
            )
            try:
                config.build(spec)
            except ValueError as e:
                raise ValueError(f"field {where}.allocator: {e}") from None
            store = None
            if tier.shared and shared is not None:
                make = _factory(config, spec)
                bpt, store = shared.setdefault(
                    tier.kind, (kv_bytes_per_token, TierStore(make, self.chunk_tokens))
                )
                if bpt != kv_bytes_per_token:
                    raise ValueError(
                        f"field {where}.shared: one store holds one model's KV; this pool's "
                        f"replicas have {kv_bytes_per_token:,} KV bytes per token, another "
                        f"pool's {bpt:,}"
                    )
            tiers.append(
                TierSpec(
                    kind=tier.kind,
                    capacity_tokens=capacity_tokens,
                    bandwidth_bytes_per_s=tier.bandwidth_gb_per_s * 1e9,
                    latency_s=tier.latency_s,
                    make_allocator=_factory(config, spec),
                    persists_across_restart=tier.kind == "remote",
                    shared_store=store,
                )
            )
        return OffloadSpec(
            tuple(tiers),
            self.chunk_tokens,
            hash_block_tokens,
            kv_bytes_per_token,
            self.store_threshold,
            self.max_tracker_size,
        )


def _tier_allocator(config: AllocatorConfig | None, chunk_tokens: int) -> AllocatorConfig:
    """The tier's policy with the settings objects that never grow need (module doc)."""
    if config is None:
        return PagedConfig(block_size_tokens=chunk_tokens, prefix_caching=False)
    update: dict[str, object] = {}
    if "initial_extra_tokens" in type(config).model_fields and (
        "initial_extra_tokens" not in config.model_fields_set
    ):
        update["initial_extra_tokens"] = 0
    if isinstance(config, PagedConfig):
        update["prefix_caching"] = False
    return config.model_copy(update=update) if update else config


def _factory(config: AllocatorConfig, spec: PoolSpec) -> Callable[[], Allocator]:
    return lambda: config.build(spec)
