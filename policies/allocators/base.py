"""The allocator contract: one replica's KV pool, in token slots.

The scheduler asks, the allocator answers. Nothing outside ``policies/allocators``
reads a free list. "Does not fit" is a return value (``None`` / ``False``); a broken
invariant (double free, unknown request, negative refcount) raises.

Units are token slots of one replica's pool; bytes come from ``PoolSpec.kv_bytes_per_token``.

Vocabulary used in every policy:

* *held* tokens: slots holding a prompt or generated token of a live request.
* *reserved* slots: slots a live request owns (held + reserved-but-unused). A paged
  sequence's partly filled last block and a static max-length reservation are reserved.
* *free* slots: owned by no live request. Prefix-cache blocks whose refcount fell to
  zero are free (and counted again in ``cached_free_tokens``): they can be evicted.
* *extent*: a run of free slots one request can use as a whole. For paged policies any
  free block serves any request, so all free memory is one usable extent.

Invariant every policy keeps, checked by the property tests after every operation::

    used_tokens + reserved_unused_tokens + free_tokens == capacity_tokens
    largest_free_extent_tokens <= free_tokens

Engine seam (fast mode): between allocator decisions the engine grows sequences in
closed form. ``headroom_tokens`` says how far a sequence can grow touching only its own
reservation; a *pooled* policy (``policies.allocators.pooled.PooledAllocator``) draws
further growth as interchangeable blocks from a shared pool, so the engine can also
precompute how many steps the pool covers and draw them in bulk. Growth that stays
inside these bounds gives the same state whatever order the ``extend`` calls come in.

A new policy is one module (a subclass of :class:`Allocator`, or of ``PooledAllocator``
for block-pooled growth), its pydantic config in ``config.py`` and one registry line.
Diagnostics that only read the contract live in ``diagnostics.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal

from mypy_extensions import mypyc_attr

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


@mypyc_attr(allow_interpreted_subclasses=True)
class Allocator:
    """Base of every KV-cache allocation policy. See the module docstring.

    Not an ``abc.ABC``: the compiled build's classes would share one ABC instance-check
    cache (``isinstance`` answers wrong across sibling subclasses). The abstract methods
    below raise NotImplementedError; mypy still refuses to instantiate a subclass that
    leaves one out."""

    #: True when a decision (allocate / extend past the headroom) depends on how many
    #: tokens *other* live requests hold (compaction moves only held tokens). The engine
    #: defers growth inside a request's headroom and applies it before such decisions.
    decisions_read_held: bool = False

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self._last_failure: Failure | None = None

    # -- the operations -------------------------------------------------------------
    @abstractmethod
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        """Admit ``request_id`` holding ``tokens`` tokens (its prompt).

        ``reserve_tokens`` is the total length (prompt + output) the caller expects the
        request to reach, where it knows it; policies that reserve ahead use it (static
        oracle / power-of-two) and others ignore it. ``prefix_hashes`` are chained
        prefix-block hashes for prefix caching; policies without a cache ignore them.
        Returns None when the request does not fit; the state is then unchanged and
        ``last_failure()`` says why. Raises if ``request_id`` is already live.
        """
        raise NotImplementedError

    @abstractmethod
    def extend(self, request_id: int, tokens: int) -> bool:
        """Grow a live request by ``tokens`` held tokens (decoding). False when the
        growth cannot be placed; the state is then unchanged."""
        raise NotImplementedError

    @abstractmethod
    def fork(self, parent_id: int, child_id: int) -> bool:
        """Make ``child_id`` a copy of live ``parent_id`` (parallel sampling, beam
        search). Sharing policies share slots (copy-on-write); others copy. False when
        it cannot be placed."""
        raise NotImplementedError

    @abstractmethod
    def free(self, request_id: int) -> None:
        """Release everything ``request_id`` owns. Raises if it is not live."""
        raise NotImplementedError

    @abstractmethod
    def stats(self) -> AllocStats:
        """A snapshot; cheap enough to call after every operation."""
        raise NotImplementedError

    @abstractmethod
    def held_tokens(self, request_id: int) -> int:
        """Tokens the live request holds."""
        raise NotImplementedError

    @abstractmethod
    def reserved_tokens(self, request_id: int) -> int:
        """Slots the live request owns (held + reserved-but-unused; shared slots count
        for every owner)."""
        raise NotImplementedError

    @abstractmethod
    def free_extent_sizes(self) -> list[int]:
        """Sizes of the free extents, in tokens (for histograms; may be O(n))."""
        raise NotImplementedError

    # -- engine seams -----------------------------------------------------------------
    def headroom_tokens(self, request_id: int) -> int:
        """Tokens the request can still add inside what it already owns, with no
        decision by the allocator (and so in any order with other requests)."""
        return self.reserved_tokens(request_id) - self.held_tokens(request_id)

    def caches_prefixes(self) -> bool:
        """Does an admission look the prompt up in a prefix cache (vLLM then counts the
        lookup, ``sim.engine.admission``)? Default: no."""
        return False

    def prefix_hit_tokens(
        self, tokens: int, prefix_hashes: Sequence[int] = (), owner: int = -1
    ) -> int:
        """Leading tokens of a request's first ``tokens`` that ``allocate_chunk`` would
        find in the prefix cache now (read-only); ``owner``: the request's id, for
        blocks of its own generated tokens. Default: none (no prefix cache)."""
        return 0

    def allocate_chunk(
        self,
        request_id: int,
        tokens: int,
        prompt_tokens: int,
        prefix_hashes: Sequence[int] = (),
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> Allocation | None:
        """``allocate`` the first ``tokens`` of a ``prompt_tokens`` prompt placed chunk
        by chunk (later chunks ``extend`` it), taking at most ``max_hit_tokens`` (-1:
        any) from the prefix cache. Default: ``allocate``; a prefix cache also caches
        the blocks later chunks fill."""
        return self.allocate(request_id, tokens, prefix_hashes=prefix_hashes)

    def admission_fits(
        self,
        tokens: int,
        prefix_hashes: Sequence[int] = (),
        keep_free_tokens: int = 0,
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> bool:
        """Would ``allocate(tokens, prefix_hashes=...)`` fit now and still leave
        ``keep_free_tokens`` free (vLLM's watermark, its whole-prompt admission gate)?
        Read-only; False records the refusal (``last_failure``). Default: free memory
        covers ``tokens + keep_free_tokens`` (a policy that knows its placement says
        more precisely). ``owner`` and ``max_hit_tokens`` as for ``allocate_chunk``."""
        need = tokens + keep_free_tokens
        if need <= self.free_and_largest_tokens()[0]:
            return True
        self._refuse(need)
        return False

    def layout_notes(self) -> tuple[str, ...]:
        """How a KV manager laid the memory out (groups, padding, pools), one line each;
        empty for a single-pool policy."""
        return ()

    def kv_waste(self) -> KvWaste | None:
        """A KV manager's memory by cause (``policies.allocators.kv_groups``); None for
        a single-pool policy, whose waste the four-way breakdown already says."""
        return None

    def free_and_largest_tokens(self) -> tuple[int, int]:
        """``(stats().free_tokens, stats().largest_free_extent_tokens)``: what decides
        whether a refused request may fit now (policies override it to skip a snapshot)."""
        s = self.stats()
        return s.free_tokens, s.largest_free_extent_tokens

    def copied_tokens_total(self) -> int:
        """``stats().copied_tokens_total + stats().moved_tokens_total`` (the engine reads
        it around every step to charge copy time; policies override it to skip building
        a whole snapshot)."""
        s = self.stats()
        return s.copied_tokens_total + s.moved_tokens_total

    # -- argument checks shared by the policies ------------------------------------------
    @staticmethod
    def _check_new(request_id: int, live: Container[int], tokens: int = 0) -> None:
        """Raise unless ``request_id`` is new and ``tokens`` is not negative."""
        if request_id in live:
            raise ValueError(f"request {request_id} is already live")
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")

    # -- diagnosis --------------------------------------------------------------------
    def last_failure(self) -> Failure | None:
        """Why the most recent refused operation was refused (None if none was)."""
        return self._last_failure

    def _refuse(self, need_tokens: int) -> None:
        """Record a refusal of a ``need_tokens`` placement; policies call this before
        returning None/False."""
        s = self.stats()
        self._last_failure = Failure(
            need_tokens=need_tokens,
            free_tokens=s.free_tokens,
            largest_free_extent_tokens=s.largest_free_extent_tokens,
            cause=classify(need_tokens, s.free_tokens, s.largest_free_extent_tokens),
        )
