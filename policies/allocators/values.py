"""The allocator contract's values: what a pool is (:class:`PoolSpec`, with its layer
kinds), what an allocation, the pool's stats, a KV manager's waste and a refusal are
(:class:`Allocation`, :class:`AllocStats`, :class:`KvWaste`, :class:`Failure`), the
seed's failure diagnosis (:func:`classify`) and the one block count (:func:`blocks_for`).
:mod:`policies.allocators.base` (the :class:`~policies.allocators.base.Allocator`
interface) re-exports each; units and vocabulary are its module docstring's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FailureCause = Literal["capacity", "fragmentation"]


@dataclass(frozen=True, slots=True)
class LayerKindSpec:
    """Layers of one kind as a KV manager sees them (replica-wide bytes, all GPUs).

    The single-pool policies ignore these: they hold every attention layer's KV for
    every token (``PoolSpec.kv_bytes_per_token``). The KV managers (``hybrid_kv``,
    ``split_pools``, ``window_pools``) lay their groups and pools out from them."""

    kind: str
    """``full_attention``, ``sliding_attention`` or ``mamba`` (MLA counts as full)."""
    layers: int
    kv_bytes_per_token_per_layer: int = 0
    """K and V (or the MLA latent) of one token in one layer; 0 for ``mamba``."""
    window_tokens: int = 0
    """The sliding window (``sliding_attention`` only)."""
    state_bytes_per_layer: int = 0
    """One request's conv + SSM state in one layer (``mamba`` only)."""

    def __post_init__(self) -> None:
        if self.kind not in ("full_attention", "sliding_attention", "mamba"):
            raise ValueError(f"unknown layer kind {self.kind!r}")
        if self.layers <= 0:
            raise ValueError(f"{self.kind}: layers must be > 0, got {self.layers}")
        if self.kind == "mamba":
            if self.state_bytes_per_layer <= 0:
                raise ValueError("mamba: state_bytes_per_layer must be > 0")
        elif self.kv_bytes_per_token_per_layer <= 0:
            raise ValueError(f"{self.kind}: kv_bytes_per_token_per_layer must be > 0")
        if (self.kind == "sliding_attention") != (self.window_tokens > 0):
            raise ValueError(f"{self.kind}: window_tokens {self.window_tokens} (> 0 iff sliding)")


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What a policy is built for: the pool size and the model facts it may need."""

    capacity_tokens: int
    """KV slots in this replica's pool."""
    kv_bytes_per_token: int = 1
    """Bytes one token's K and V take over all layers (page and segment sizes convert
    through this)."""
    max_seq_tokens: int = 4096
    """The serving stack's maximum sequence length (prompt + output)."""
    num_layers: int = 32
    """Transformer layers: each holds a K and a V buffer per token (vAttention maps
    2 x num_layers buffers; a page of one buffer holds page_bytes / its per-token bytes)."""
    tensor_parallel: int = 1
    """GPUs per replica. ``kv_bytes_per_token`` is the replica's (all GPUs); each GPU
    holds ``kv_bytes_per_token // tensor_parallel`` bytes of every token, and byte-sized
    things (pages, segments, rounding) live on one GPU."""
    layer_kinds: tuple[LayerKindSpec, ...] = ()
    """The model's layers by kind (a model read from its config.json); empty: every
    layer is full attention. Only the KV managers read it; the pool's bytes are
    ``capacity_tokens x kv_bytes_per_token`` whatever the kinds."""

    def __post_init__(self) -> None:
        if self.capacity_tokens <= 0:
            raise ValueError(f"capacity_tokens must be > 0, got {self.capacity_tokens}")
        if self.kv_bytes_per_token <= 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {self.kv_bytes_per_token}")
        if self.max_seq_tokens <= 0:
            raise ValueError(f"max_seq_tokens must be > 0, got {self.max_seq_tokens}")
        if self.num_layers <= 0 or self.tensor_parallel <= 0:
            raise ValueError(
                f"num_layers and tensor_parallel must be > 0, got "
                f"{self.num_layers} and {self.tensor_parallel}"
            )

    @property
    def gpu_kv_bytes_per_token(self) -> int:
        """Bytes of one token's K and V (all layers) on one GPU of the replica."""
        return max(1, self.kv_bytes_per_token // self.tensor_parallel)


@dataclass(slots=True)
class Allocation:
    """The answer to a successful ``allocate``."""

    request_id: int
    reserved_tokens: int
    """Slots the request now owns (held + reserved-but-unused)."""
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache: their KV need not be computed."""
    moved_tokens: int = 0
    """Tokens of other requests moved (compaction) to make room; the engine stalls."""

    # Written out (the dataclass keeps it): a generated __init__ stays interpreted in the
    # compiled build. Not frozen for the same reason (a frozen one must set fields through
    # object.__setattr__); treat instances as immutable snapshots.
    def __init__(
        self,
        request_id: int,
        reserved_tokens: int,
        cached_tokens: int = 0,
        moved_tokens: int = 0,
    ) -> None:
        self.request_id = request_id
        self.reserved_tokens = reserved_tokens
        self.cached_tokens = cached_tokens
        self.moved_tokens = moved_tokens


@dataclass(slots=True)
class AllocStats:
    """A snapshot of the pool; every field O(1) or O(log n) to read."""

    capacity_tokens: int
    used_tokens: int
    """Slots holding tokens (a slot shared by several requests counts once)."""
    reserved_unused_tokens: int
    """Owned by live requests, holding no token (internal fragmentation + reservation)."""
    shared_tokens: int
    """Slots referenced by more than one live request (prefix sharing, forks)."""
    free_tokens: int
    """Owned by no live request (includes ``cached_free_tokens``)."""
    largest_free_extent_tokens: int
    free_extent_count: int
    cached_free_tokens: int = 0
    """Free slots still holding reusable prefix-cache content (evictable)."""
    copied_tokens_total: int = 0
    """Tokens copied by growth-by-reallocation and copy-on-write since construction."""
    moved_tokens_total: int = 0
    """Tokens moved by compaction since construction."""

    # Written out (the dataclass keeps it): a generated __init__ stays interpreted in the
    # compiled build. Not frozen for the same reason (a frozen one must set fields through
    # object.__setattr__); treat instances as immutable snapshots.
    def __init__(
        self,
        capacity_tokens: int,
        used_tokens: int,
        reserved_unused_tokens: int,
        shared_tokens: int,
        free_tokens: int,
        largest_free_extent_tokens: int,
        free_extent_count: int,
        cached_free_tokens: int = 0,
        copied_tokens_total: int = 0,
        moved_tokens_total: int = 0,
    ) -> None:
        self.capacity_tokens = capacity_tokens
        self.used_tokens = used_tokens
        self.reserved_unused_tokens = reserved_unused_tokens
        self.shared_tokens = shared_tokens
        self.free_tokens = free_tokens
        self.largest_free_extent_tokens = largest_free_extent_tokens
        self.free_extent_count = free_extent_count
        self.cached_free_tokens = cached_free_tokens
        self.copied_tokens_total = copied_tokens_total
        self.moved_tokens_total = moved_tokens_total

    def with_growth_applied(self, tokens: int) -> AllocStats:
        """This snapshot once ``tokens`` of growth the engine has deferred reach the
        allocator: reserved slots become used ones; nothing else changes."""
        return AllocStats(
            self.capacity_tokens,
            self.used_tokens + tokens,
            self.reserved_unused_tokens - tokens,
            self.shared_tokens,
            self.free_tokens,
            self.largest_free_extent_tokens,
            self.free_extent_count,
            self.cached_free_tokens,
            self.copied_tokens_total,
            self.moved_tokens_total,
        )

    @property
    def largest_contiguous_free_block_ratio(self) -> float | None:
        """The seed's metric: largest usable free extent / total free; None when nothing
        is free (undefined, never alerted on)."""
        if self.free_tokens == 0:
            return None
        return self.largest_free_extent_tokens / self.free_tokens


@dataclass(slots=True)
class KvWaste:
    """Where a manager's memory is, in token slots (the same unit as ``AllocStats``):
    the seven add up to ``capacity_tokens`` (rounding goes to ``partial_blocks``)."""

    token_states: int
    """KV of tokens inside their layers' span, and Mamba state."""
    padding: int
    """Padding layers of a group, and state pages padded to the block size."""
    window_reserve: int
    """Sliding-window blocks held beyond the window (the admission reserve)."""
    reserved_ahead: int
    """Blocks reserved at admission for tokens not yet generated (TensorRT-LLM)."""
    partial_blocks: int
    """The unfilled part of owned blocks (a table's last block, a window's first)."""
    stranded: int
    """Free memory in pools that are not the bottleneck (unusable at the split)."""
    free: int
    """Free memory usable at the split."""

    # Written out: a generated __init__ stays interpreted in the compiled build.
    def __init__(
        self,
        token_states: int,
        padding: int,
        window_reserve: int,
        reserved_ahead: int,
        partial_blocks: int,
        stranded: int,
        free: int,
    ) -> None:
        self.token_states = token_states
        self.padding = padding
        self.window_reserve = window_reserve
        self.reserved_ahead = reserved_ahead
        self.partial_blocks = partial_blocks
        self.stranded = stranded
        self.free = free


@dataclass(slots=True)
class Failure:
    """Why the last ``allocate``/``extend``/``fork`` answered no."""

    need_tokens: int
    """The contiguous span (or total, for pooled policies) the policy could not place."""
    free_tokens: int
    largest_free_extent_tokens: int
    cause: FailureCause

    # Written out (the dataclass keeps it): a generated __init__ stays interpreted in the
    # compiled build. Not frozen for the same reason (a frozen one must set fields through
    # object.__setattr__); treat instances as immutable snapshots.
    def __init__(
        self,
        need_tokens: int,
        free_tokens: int,
        largest_free_extent_tokens: int,
        cause: FailureCause,
    ) -> None:
        self.need_tokens = need_tokens
        self.free_tokens = free_tokens
        self.largest_free_extent_tokens = largest_free_extent_tokens
        self.cause = cause


def classify(need_tokens: int, free_tokens: int, largest_free_extent_tokens: int) -> FailureCause:
    """The seed's diagnosis: enough free memory in total but no usable extent large
    enough is *fragmentation*; not enough in total is *capacity*."""
    if free_tokens >= need_tokens and largest_free_extent_tokens < need_tokens:
        return "fragmentation"
    return "capacity"


def blocks_for(size: int, block_size: int) -> int:
    """How many blocks of ``block_size`` cover ``size`` (both in one unit: tokens, bytes):
    ``ceil(size / block_size)``, exactly, for ``block_size > 0``; 0 for ``size <= 0``
    is not promised (a negative size gives a non-positive count)."""
    return -(-size // block_size)
