"""The machinery the KV managers share: block tables per KV cache *group*, drawn from
one or more block *pools*, with their books kept in bytes.

A hybrid model's layers do not all keep the same KV: a full-attention layer keeps every
token, a sliding-window layer only the last ``window_tokens``, a Mamba layer one fixed
state per request. A KV manager (``hybrid_kv``: vLLM v1; ``split_pools``: SGLang;
``window_pools``: TensorRT-LLM) lays the layers out as groups and pools
(:class:`KvLayout`, built by each manager's module); this class runs the layout.

* A :class:`KvGroup` is one block table per request. Its blocks come from one pool;
  every block of a pool is interchangeable (no block ids are kept: these managers do no
  prefix caching here, so a pool is a count of free blocks).
* A group's blocks at sequence length ``L`` (its *steady* need), with ``B`` its tokens
  per block and ``W`` its window::

      full attention:   ceil(L / B)
      sliding window:   ceil(L / B) - max(0, L - W) // B    (blocks wholly out of the
                                                             window are freed)
      state (Mamba):    state_blocks, whatever L
      reserve ahead:    the need at max(L, the request's expected final length), a
                        window capped at ceil(W / B) + 1 blocks (TensorRT-LLM reserves
                        at admission and reuses a window's blocks cyclically)

  At admission a sliding group of a manager with a prefill cap (vLLM) holds the whole
  prompt's blocks up to ``prefill_cap_blocks`` (vLLM's admission reserve for the
  window); the first growth after it frees what left the window.
* Growth decides per pool: every pool must cover its net draw, or nothing changes and
  the refusal is recorded.

Units. The contract counts *token slots*; here a slot is ``PoolSpec.kv_bytes_per_token``
bytes (one token in every attention layer: what the single-pool policies hold per
token), so ``capacity_tokens`` is the managed bytes over that, and ``used_tokens`` is
the bytes holding live KV (tokens inside each layer's span, and Mamba state) over that:
with sliding layers it is less than the tokens the requests hold, which is the point.
``reserved_unused_tokens`` is what is owned and holds nothing (padding layers, partial
blocks, the window reserve, blocks reserved ahead), ``free_tokens`` what no request
owns. ``held_tokens`` and ``headroom_tokens`` are sequence tokens, as for every policy;
``reserved_tokens`` is ``held + headroom``: the length the request reaches on what it
owns.

Multi-pool meaning of the seed's metric. A request draws from every pool at once, so
free memory in one pool is of no use once another is exhausted. ``largest_free_extent``
is the free memory usable *at the pools' own split*: the total capacity times the free
share of the *bottleneck* pool (the one with the smallest free share); the rest of the
free memory is *stranded* in the other pools. So ``largest_contiguous_free_block_ratio``
is 1 for one pool (vLLM's hybrid manager) and falls as one pool runs out before the
others; a refusal while the total free memory covers the need is a *fragmentation*
failure (memory stranded in another pool), otherwise *capacity*.

Invariants (checked by the property tests)::

    used_tokens + reserved_unused_tokens + free_tokens == capacity_tokens
    every pool: 0 <= free_blocks <= num_blocks; owned blocks == sum of the tables
    largest_free_extent_tokens <= free_tokens
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.allocators.base import (
    Allocation,
    Allocator,
    AllocStats,
    Failure,
    FailureCause,
    KvWaste,
    LayerKindSpec,
    PoolSpec,
    blocks_for,
)

NO_LIMIT_TOKENS = 1 << 40
"""Headroom of a request no block boundary limits."""


@dataclass(frozen=True, slots=True)
class KvPool:
    """A pool of interchangeable blocks of ``block_bytes`` each."""

    name: str
    block_bytes: int
    num_blocks: int

    @property
    def capacity_bytes(self) -> int:
        return self.block_bytes * self.num_blocks


@dataclass(frozen=True, slots=True)
class KvGroup:
    """One block table per request (see the module docstring for its need)."""

    name: str
    pool: int
    """Index of the pool its blocks come from."""
    block_tokens: int = 0
    """Tokens per block; 0 for a state group."""
    window_tokens: int = 0
    """0: full attention (or a state group)."""
    real_bytes_per_token: int = 0
    """Bytes one token inside the span takes in the group's real (not padding) layers."""
    padding_bytes_per_block: int = 0
    """Bytes of each block that belong to padding layers or a padded state page."""
    state_blocks: int = 0
    """Blocks per request of a state group (> 0 makes it one)."""
    state_bytes: int = 0
    """Real state bytes per request of a state group."""
    prefill_cap_blocks: int = 0
    """Sliding groups (vLLM, SGLang): the most blocks held at admission, the window and
    one prefill chunk (0: the whole prompt)."""
    reserve_ahead: bool = False
    """Reserve at admission for the expected final length (TensorRT-LLM's
    GUARANTEED_NO_EVICT); a window is then capped at ceil(W / B) + 1 blocks."""

    def steady_blocks(self, tokens: int) -> int:
        """Blocks the group needs at sequence length ``tokens`` (no reserve ahead)."""
        if self.state_blocks:
            return self.state_blocks
        bt = self.block_tokens
        blocks = blocks_for(tokens, bt)
        w = self.window_tokens
        if w:
            if self.reserve_ahead:
                return min(blocks, blocks_for(w, bt) + 1)
            if tokens > w:
                blocks -= (tokens - w) // bt
        return blocks

    def span_tokens(self, tokens: int) -> int:
        """Tokens of a ``tokens``-long sequence whose KV this group keeps."""
        w = self.window_tokens
        return tokens if not w or tokens < w else w


@dataclass(frozen=True, slots=True)
class KvLayout:
    """A manager's groups and pools, as its module lays them out."""

    pools: tuple[KvPool, ...]
    groups: tuple[KvGroup, ...]
    notes: tuple[str, ...] = ()
    """One line each on how it was laid out (group size, padding, block size)."""


def layer_kinds_of(spec: PoolSpec) -> tuple[LayerKindSpec, ...]:
    """The spec's layer kinds; a spec without them is one full-attention kind of one
    "layer" holding a whole token (``kv_bytes_per_token``): a uniform model, whose
    layers all share one block table anyway."""
    if spec.layer_kinds:
        return spec.layer_kinds
    return (LayerKindSpec("full_attention", 1, spec.kv_bytes_per_token),)


class _Req:
    __slots__ = ("blocks", "held", "used_bytes")

    def __init__(self, held: int, blocks: list[int], used_bytes: int) -> None:
        self.held = held
        self.blocks = blocks
        self.used_bytes = used_bytes


class KvGroupManager(Allocator):
    """A KV manager over a :class:`KvLayout` (see the module docstring)."""

    def __init__(self, spec: PoolSpec, layout: KvLayout) -> None:
        super().__init__(spec)
        if not layout.pools or not layout.groups:
            raise ValueError("a KV layout needs at least one pool and one group")
        for p in layout.pools:
            if p.num_blocks <= 0:
                raise ValueError(
                    f"pool {p.name!r}: {spec.capacity_tokens:,} tokens of KV memory hold no "
                    f"block of {p.block_bytes:,} bytes"
                )
        self.layout = layout
        self._pools = layout.pools
        self._groups = layout.groups
        self._slot_bytes = spec.kv_bytes_per_token
        self._capacity_bytes = sum(p.capacity_bytes for p in layout.pools)
        self._free_blocks = [p.num_blocks for p in layout.pools]
        self._reqs: dict[int, _Req] = {}
        self._used_bytes = 0

    # -- the operations -------------------------------------------------------------
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        """Admit a prompt of ``tokens``; ``reserve_tokens`` is read by reserve-ahead
        groups only; ``prefix_hashes`` are ignored (no prefix cache)."""
        self._check_new(request_id, self._reqs, tokens)
        final = max(tokens, reserve_tokens or 0)
        blocks = [self._admission_blocks(g, tokens, final) for g in self._groups]
        if not self._take(blocks, None):
            return None
        used = self._used_of(tokens)
        self._reqs[request_id] = _Req(tokens, blocks, used)
        self._used_bytes += used
        return Allocation(request_id, tokens + self._headroom(tokens, blocks))

    def extend(self, request_id: int, tokens: int) -> bool:
        r = self._req(request_id)
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        length = r.held + tokens
        blocks = [
            max(n, g.steady_blocks(length)) if g.reserve_ahead else g.steady_blocks(length)
            for g, n in zip(self._groups, r.blocks, strict=True)
        ]
        if not self._take(blocks, r.blocks):
            return False
        used = self._used_of(length)
        self._used_bytes += used - r.used_bytes
        r.held, r.blocks, r.used_bytes = length, blocks, used
        return True

    def fork(self, parent_id: int, child_id: int) -> bool:
        """Blocks of its own for the child, as many as the parent holds (no sharing: n >
        1 sampling on these managers overstates the memory a prefix-sharing stack uses)."""
        self._check_new(child_id, self._reqs)
        p = self._req(parent_id)
        if not self._take(list(p.blocks), None):
            return False
        self._reqs[child_id] = _Req(p.held, list(p.blocks), p.used_bytes)
        self._used_bytes += p.used_bytes
        return True

    def free(self, request_id: int) -> None:
        try:
            r = self._reqs.pop(request_id)
        except KeyError:
            raise KeyError(f"request {request_id} is not live (double free?)") from None
        free = self._free_blocks
        for g, n in zip(self._groups, r.blocks, strict=True):
            free[g.pool] += n
        self._used_bytes -= r.used_bytes

    # -- reading ----------------------------------------------------------------------
    def stats(self) -> AllocStats:
        slot = self._slot_bytes
        capacity = self._capacity_bytes // slot
        used = self._used_bytes // slot
        free_bytes = self._free_bytes()
        free = free_bytes // slot
        largest = min(free, self._usable_free_bytes() // slot)
        return AllocStats(
            capacity_tokens=capacity,
            used_tokens=used,
            reserved_unused_tokens=capacity - used - free,
            shared_tokens=0,
            free_tokens=free,
            largest_free_extent_tokens=largest,
            free_extent_count=(1 if largest else 0) + (1 if free > largest else 0),
        )

    def held_tokens(self, request_id: int) -> int:
        return self._req(request_id).held

    def reserved_tokens(self, request_id: int) -> int:
        r = self._req(request_id)
        return r.held + self._headroom(r.held, r.blocks)

    def headroom_tokens(self, request_id: int) -> int:
        r = self._req(request_id)
        return self._headroom(r.held, r.blocks)

    def free_extent_sizes(self) -> list[int]:
        s = self.stats()
        sizes = [s.largest_free_extent_tokens] if s.largest_free_extent_tokens else []
        if s.free_tokens > s.largest_free_extent_tokens:
            sizes.append(s.free_tokens - s.largest_free_extent_tokens)
        return sizes

    def copied_tokens_total(self) -> int:
        return 0  # no KV is copied: a fork gets blocks of its own, charged no copy time

    def table_blocks(self, request_id: int) -> tuple[int, ...]:
        """The request's blocks in each group (``layout.groups``' order)."""
        return tuple(self._req(request_id).blocks)

    def pool_free_blocks_by_name(self) -> dict[str, int]:
        """Each pool's free blocks, by pool name."""
        return {p.name: f for p, f in zip(self._pools, self._free_blocks, strict=True)}

    def layout_notes(self) -> tuple[str, ...]:
        return self.layout.notes

    def kv_waste(self) -> KvWaste:
        """Where the memory is now, by cause (O(live requests))."""
        padding = window = ahead = 0
        for r in self._reqs.values():
            for g, n in zip(self._groups, r.blocks, strict=True):
                block = self._pools[g.pool].block_bytes
                padding += n * g.padding_bytes_per_block
                if g.state_blocks:
                    continue
                steady = g.steady_blocks(r.held)
                if n > steady:  # the real part of those blocks (padding is counted)
                    extra = (n - steady) * (block - g.padding_bytes_per_block)
                    if g.reserve_ahead:
                        ahead += extra
                    else:
                        window += extra
        slot = self._slot_bytes
        s = self.stats()
        parts = [
            s.used_tokens,
            padding // slot,
            window // slot,
            ahead // slot,
            0,
            s.free_tokens - s.largest_free_extent_tokens,
            s.largest_free_extent_tokens,
        ]
        parts[4] = s.capacity_tokens - sum(parts)
        return KvWaste(*parts)

    # -- internals --------------------------------------------------------------------
    def _req(self, request_id: int) -> _Req:
        try:
            return self._reqs[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None

    def _admission_blocks(self, g: KvGroup, tokens: int, final: int) -> int:
        if g.reserve_ahead:
            return g.steady_blocks(final)
        if g.window_tokens and not g.state_blocks:
            whole = blocks_for(tokens, g.block_tokens)
            cap = g.prefill_cap_blocks
            return min(whole, cap) if cap else whole
        return g.steady_blocks(tokens)

    def _used_of(self, tokens: int) -> int:
        used = 0
        for g in self._groups:
            if g.state_blocks:
                used += g.state_bytes
            else:
                used += g.span_tokens(tokens) * g.real_bytes_per_token
        return used

    def _headroom(self, held: int, blocks: list[int]) -> int:
        """Tokens the request can add with no group's block count changing (no limit:
        ``NO_LIMIT_TOKENS``, a layout of state groups only)."""
        room = NO_LIMIT_TOKENS
        for g, n in zip(self._groups, blocks, strict=True):
            if g.state_blocks:
                continue
            bt, w = g.block_tokens, g.window_tokens
            if g.reserve_ahead:
                if w and n == blocks_for(w, bt) + 1:
                    continue  # a capped window reuses its blocks: never grows
                r = n * bt - held
            elif n != g.steady_blocks(held):
                return 0  # holds a prefill reserve the next growth gives back
            elif w:
                # blocks cover [skipped * bt, (skipped + n) * bt); the first leaves once
                # held - w reaches the next block boundary
                skipped = max(0, held - w) // bt
                r = min((skipped + n) * bt - held, (skipped + 1) * bt + w - held - 1)
            else:
                r = n * bt - held
            room = min(room, r)
        return max(room, 0)

    def _take(self, blocks: list[int], current: list[int] | None) -> bool:
        """Move the tables from ``current`` (None: nothing) to ``blocks`` if every pool
        covers its net draw; else record the refusal and change nothing."""
        delta = [0] * len(self._pools)
        for i, g in enumerate(self._groups):
            delta[g.pool] += blocks[i] - (current[i] if current is not None else 0)
        free = self._free_blocks
        short = [p for p, d in enumerate(delta) if d > free[p]]
        if short:
            need = sum(max(d, 0) * self._pools[p].block_bytes for p, d in enumerate(delta))
            self._refuse_bytes(need)
            return False
        for p, d in enumerate(delta):
            free[p] -= d
        return True

    def _free_bytes(self) -> int:
        return sum(p.block_bytes * f for p, f in zip(self._pools, self._free_blocks, strict=True))

    def _usable_free_bytes(self) -> int:
        """Capacity x the bottleneck pool's free share (see the module docstring)."""
        best = -1
        best_p = 0
        for p, f in enumerate(self._free_blocks):
            # smallest free share f / num_blocks: compare f * n_best < f_best * n
            n = self._pools[p].num_blocks
            if best < 0 or f * self._pools[best_p].num_blocks < best * n:
                best, best_p = f, p
        if len(self._pools) == 1:
            return self._free_bytes()
        return self._capacity_bytes * best // self._pools[best_p].num_blocks

    def _refuse_bytes(self, need_bytes: int) -> None:
        slot = self._slot_bytes
        s = self.stats()
        need = blocks_for(need_bytes, slot)
        cause: FailureCause = "fragmentation" if s.free_tokens >= need else "capacity"
        self._last_failure = Failure(
            need_tokens=need,
            free_tokens=s.free_tokens,
            largest_free_extent_tokens=min(s.largest_free_extent_tokens, need - 1)
            if cause == "fragmentation"
            else s.largest_free_extent_tokens,
            cause=cause,
        )
