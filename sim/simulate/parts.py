"""One place builds a run's parts: the hardware budget, the scheduler, the latency model
and the allocator of each pool (one pool for a single replica), so a scenario's errors
surface before anything is simulated. The GPU replay builds its one replica's here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from policies.allocators.base import LayerKindSpec, PoolSpec
from policies.allocators.config import AllocatorConfig, PagedConfig
from sim.engine.offload import TierStore
from sim.engine.scheduler import SchedulerConfig
from sim.latency.calibrated import MAX_STEP_S
from sim.latency.models import LatencyModel
from sim.models.hf_config import HfModel
from sim.scenario import bounds
from sim.scenario.hardware import HardwareConfig, merge_hardware
from sim.scenario.schema import Scenario, ScenarioError


@dataclass(frozen=True)
class Parts:
    """What a scenario builds into before simulating (so its errors surface early)."""

    spec: PoolSpec
    scheduler: SchedulerConfig
    latency: LatencyModel
    allocator: AllocatorConfig
    kv_capacity_tokens: int
    gpu_usd_per_hour: float = 0.0
    """The GPU's price (``sim.models.hardware``'s table, or an inline GPU's)."""


def build_parts(
    scenario: Scenario,
    requests: pd.DataFrame | None = None,
    shared_stores: dict[str, tuple[int, TierStore]] | None = None,
) -> Parts:
    """Resolve the hardware budget, the scheduler, the latency model and the allocator
    (one is built to check it fits the pool). ``requests`` lets the allocator adopt the
    trace's prefix-hash block size; ``shared_stores``: the run's shared offload stores
    (``kv_offload.tiers[].shared``), one dict for all its pools. Raises ScenarioError
    naming the field (a calibration file's errors name ``latency.path`` and the file)."""
    hw = scenario.hardware
    allocator = scenario.allocator
    if requests is not None:
        allocator = _adopt_hash_block(allocator, requests)
    paged_block = allocator.block_size_tokens if isinstance(allocator, PagedConfig) else None
    try:
        budget = hw.resolve(paged_block)
    except ValueError as e:  # num_gpu_blocks / gpu_kv_cache_tokens against the allocator
        raise ScenarioError(str(e)) from None
    model, gpu = hw.model_spec, hw.gpu_spec
    spec = PoolSpec(
        capacity_tokens=budget.kv_capacity_tokens,
        kv_bytes_per_token=budget.replica_kv_bytes_per_token,
        max_seq_tokens=model.max_seq_tokens,
        num_layers=model.num_layers,
        tensor_parallel=hw.tensor_parallel,
        layer_kinds=layer_kinds(hw.hf_model, budget.replica_kv_bytes_per_token),
    )
    paged_pool = None
    if paged_block is not None:
        paged_pool = (budget.kv_capacity_tokens // paged_block, paged_block)
    why = allocator.why_not_per_chunk()
    if scenario.scheduler.allocate_per_chunk and why is not None:
        raise ScenarioError(f"field scheduler.allocate_per_chunk: {why}")
    offload = None
    if scenario.kv_offload is not None:
        hash_block = offload_hash_block(allocator, requests, scenario.kv_offload.chunk_tokens)
        try:
            offload = scenario.kv_offload.build(
                budget.replica_kv_bytes_per_token,
                model.max_seq_tokens,
                hash_block,
                {} if shared_stores is None else shared_stores,
            )
        except ValueError as e:
            raise ScenarioError(str(e)) from None
    sched_config = scenario.scheduler.build(
        model.max_seq_tokens,
        budget.replica_kv_bytes_per_token,
        gpu.hbm_bytes_per_s,
        paged_pool,
        offload,
    )
    try:
        latency = scenario.latency.build(model, gpu, hw.tensor_parallel)
    except ValueError as e:  # a calibration file that cannot be used
        field = "latency.path" if scenario.latency.kind == "calibrated" else "latency"
        raise ScenarioError(f"field {field}: {e}") from None
    check_step_times(scenario.latency.kind, latency, sched_config, budget.kv_capacity_tokens)
    try:
        allocator.build(spec)
    except ValueError as e:
        raise ScenarioError(f"field allocator: {e}") from None
    return Parts(
        spec, sched_config, latency, allocator, budget.kv_capacity_tokens, gpu.usd_per_hour
    )


def layer_kinds(hf: HfModel | None, kv_bytes_per_token: int) -> tuple[LayerKindSpec, ...]:
    """The model's layers by kind for the KV managers, in the pool's bytes: each
    attention layer's share of ``kv_bytes_per_token`` (the replica's, all attention
    layers as full), each Mamba layer's share of the state. Empty for a model that is
    not read from a config.json (every layer full attention)."""
    if hf is None:
        return ()
    attention = [k for k in hf.layer_kinds if k.kind != "mamba"]
    per_layer = kv_bytes_per_token // sum(k.layers for k in attention)
    out = []
    for k in hf.layer_kinds:
        if k.kind == "mamba":
            state = hf.mamba_state_bytes_per_request // k.layers
            out.append(LayerKindSpec("mamba", k.layers, state_bytes_per_layer=state))
        else:
            kind = "sliding_attention" if k.kind == "sliding_attention" else "full_attention"
            out.append(LayerKindSpec(kind, k.layers, per_layer, k.window_tokens))
    return tuple(out)


def check_step_times(
    kind: str, latency: LatencyModel, config: SchedulerConfig, capacity_tokens: int
) -> None:
    """Refuse a latency model whose steps at the scenario's extremes -- a full prefill
    budget (``max_num_batched_tokens``), and ``max_num_seqs`` sequences decoding at
    ``max_seq_tokens`` each, both reading as much KV as the pool can hold -- are not
    finite or take more than ``MAX_STEP_S`` (a GPU step takes milliseconds: a minute
    means a setting is off by orders of magnitude, and the run's clock would run far
    past its bounds). A probe, not a run: nothing is counted."""
    kv = min(capacity_tokens, config.max_num_seqs * config.max_seq_tokens)
    steps = (
        (
            f"{config.max_num_batched_tokens:,} prefill tokens (scheduler.max_num_batched_tokens)",
            latency.step_time_s(config.max_num_batched_tokens, 0, kv),
        ),
        (
            f"{config.max_num_seqs:,} sequences decoding (scheduler.max_num_seqs)",
            latency.step_time_s(0, config.max_num_seqs, kv),
        ),
    )
    for what, step_s in steps:
        if not step_s <= MAX_STEP_S:  # also inf and NaN
            raise ScenarioError(
                f"field latency: the {kind} model takes {bounds.quantity(step_s)} s for a "
                f"step of {what} reading {kv:,} KV tokens; a step takes at most "
                f"{MAX_STEP_S:g} s: check the latency block's fields and the GPU's "
                "bandwidth and FLOP/s"
            )


def _adopt_hash_block(allocator: AllocatorConfig, requests: pd.DataFrame) -> AllocatorConfig:
    """A prefix-caching policy reads each hash as covering ``hash_block_tokens``; take it
    from the trace's ``prefix_block_tokens`` unless the scenario sets it (and refuse a
    mismatch: hits would be silently wrong)."""
    column = requests.get("prefix_block_tokens")
    if column is None or not isinstance(allocator, PagedConfig):
        return allocator  # only the paged pool has a prefix cache
    sizes = sorted({int(v) for v in column.to_numpy() if v > 0})
    if not sizes:
        return allocator
    if len(sizes) > 1:
        raise ScenarioError(
            f"workload: the trace mixes prefix block sizes {sizes}; the prefix cache needs one"
        )
    configured = allocator.hash_block_tokens
    if configured is None:
        return allocator.model_copy(update={"hash_block_tokens": sizes[0]})
    if configured != sizes[0]:
        raise ScenarioError(
            f"field allocator.hash_block_tokens: got {configured}, but the "
            f"trace's prefix hashes cover {sizes[0]}-token blocks"
        )
    return allocator


def offload_hash_block(
    allocator: AllocatorConfig, requests: pd.DataFrame | None, chunk_tokens: int
) -> int:
    """Tokens one prefix hash covers, for the offload tiers' chunk keys: the trace's
    ``prefix_block_tokens`` (one size, as :func:`_adopt_hash_block` checks for a paged
    pool), else the paged pool's hash block, else ``chunk_tokens`` (no hashes: no hits)."""
    column = None if requests is None else requests.get("prefix_block_tokens")
    if column is not None:
        sizes = sorted({int(v) for v in column.to_numpy() if v > 0})
        if len(sizes) > 1:
            raise ScenarioError(
                f"workload: the trace mixes prefix block sizes {sizes}; kv_offload needs one"
            )
        if sizes:
            return sizes[0]
    if isinstance(allocator, PagedConfig):
        return allocator.hash_block_tokens or allocator.block_size_tokens
    return chunk_tokens


def run_parts(scenario: Scenario, requests: pd.DataFrame | None = None) -> list[Parts]:
    """What a run builds before simulating, one :class:`Parts` per pool: for one replica
    (no ``fleet`` block) the scenario's own; for a fleet, each pool's: the scenario's
    hardware and allocator with the pool's overrides (errors name ``fleet.pools[i]``).
    ``requests``: as for :func:`build_parts`. A shared offload store
    (``kv_offload.tiers[].shared``) is built here, once for all pools, and holds the
    run's objects: these parts serve one run (a shared store needs ``mode: exact``)."""
    fleet = scenario.fleet
    if fleet is None:
        return [build_parts(scenario, requests)]
    shared: dict[str, tuple[int, TierStore]] = {}  # one shared offload store per run
    if scenario.mode == "fast" and scenario.kv_offload is not None:
        # the schema refuses this; a mode set past it (model_copy) is refused here
        for i, tier in enumerate(scenario.kv_offload.tiers):
            if tier.shared:
                raise ScenarioError(
                    f"field kv_offload.tiers.{i}.shared: a shared store needs mode: exact "
                    "(fast mode runs replicas ahead of each other)"
                )
    out = []
    for i, pool in enumerate(fleet.pools):
        update: dict[str, Any] = {}
        where = f"fleet.pools[{i}]"
        try:
            if pool.hardware is not None:
                merged = merge_hardware(
                    scenario.hardware.model_dump(exclude_unset=True), pool.hardware
                )
                update["hardware"] = HardwareConfig.model_validate(merged)
            if pool.allocator is not None:
                update["allocator"] = pool.allocator
        except ValueError as e:
            raise ScenarioError(f"field {where}: {e}".splitlines()[0]) from None
        variant = scenario.model_copy(update=update) if update else scenario
        try:
            out.append(build_parts(variant, requests, shared))
        except ScenarioError as e:
            raise ScenarioError(f"{where}: {e}") from None
    return out
