"""Paged KV cache (vLLM-style): fixed blocks, prefix caching, LRU eviction, CoW forks.

The pool is ``capacity_tokens // block_size_tokens`` blocks (a remainder smaller than one
block is not part of the pool: ``stats().capacity_tokens`` is the whole-block capacity).
A request owns a block table; any free block serves any request, so all free memory is
one usable extent (``largest_free_extent_tokens == free_tokens``, ``free_extent_count``
is 1 when anything is free, else 0) and a refusal is always a *capacity* failure.

Prefix caching (vLLM semantics). Blocks are keyed from the request's chained
``prefix_hashes`` (``policies.allocators.paged_keys``: equal keys, equal content). Full
prompt blocks are cached; with ``cache_partial_block`` the partly filled last prompt
block too (Mooncake's accounting; the first decode write drops or copies it); with
``cache_generated_blocks`` (vLLM v1) full blocks of generated tokens too, when the
request is freed. A request's hits are its leading cached blocks up to the first miss.
A block whose reference count falls to zero stays cached and reusable (counted in
``free_tokens`` and ``cached_free_tokens``) until it is evicted.

Free-block queue (``policies.allocators.paged_pool``, with the prefix cache's maps): one
queue of free blocks, cached or not, in the order they were freed, taken from its head
(least recently freed first, evicting a cached block's key), never-used blocks first. A
request's blocks are freed tail first, so its prefix blocks are evicted last (with
``reuse_uncached_first``, as vLLM 0.33, freed uncached blocks go to the head instead).

Block identity. Only blocks that need it have an id: prefix-cached blocks and blocks
shared by a fork. A request's table is ``named_blocks`` (ids, always the leading part)
followed by ``anon_blocks`` private blocks counted but not individually tracked.

Growth reservoir (engine seam for bulk growth). ``reserve_pool_blocks(n)`` draws ``n``
blocks from the queue head exactly as ``extend`` would and keeps them owned but unused
(in ``reserved_unused_tokens``); ``extend_reserved`` then grows a sequence whose growth
is pooled (``growth_is_pooled``: its last block is not a shared or cached partly filled
one) from them, as private anonymous blocks. Between two other operations, growth of
pooled sequences only ever draws from the queue head, so drawing the blocks in bulk
before the next operation leaves the same state as drawing them one ``extend`` at a
time. ``free`` never touches the reservoir.

Invariants (checked by the property tests; owned blocks include the reservoir)::

    owned_blocks + free_blocks == num_blocks
    used_tokens + reserved_unused_tokens + free_tokens == capacity_tokens
    every refcount >= 1 for owned named blocks; queued cached blocks have none
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.allocators.base import (
    Allocation,
    AllocStats,
    Failure,
    PoolSpec,
    blocks_for,
    classify,
)
from policies.allocators.paged_keys import key_fill_tokens, leading_hits
from policies.allocators.paged_pool import PagedBlockPool
from policies.allocators.pooled import PooledAllocator


class _Seq:
    """One live request's block table: ``named`` ids first, then ``anon`` private blocks."""

    __slots__ = ("anon", "blocks", "gen_hashes", "hashes", "held", "named", "owner", "prompt")

    def __init__(self, held: int, blocks: int, anon: int, named: list[int] | None) -> None:
        self.held = held
        self.blocks = blocks
        self.anon = anon
        self.named = named
        # A prompt placed in part (allocate_chunk): its hashes and length, so later
        # chunks' blocks are cached; None once placed (decode stays on the fast path).
        self.hashes: Sequence[int] | None = None
        self.prompt = 0
        # cache_generated_blocks: the owning request (-1: none), its blocks cached at free.
        self.owner = -1
        self.gen_hashes: Sequence[int] = ()


class PagedAllocator(PooledAllocator):
    """Fixed-size blocks with prefix caching and copy-on-write forks (see module doc)."""

    def __init__(
        self,
        spec: PoolSpec,
        *,
        block_size_tokens: int = 16,
        prefix_caching: bool = True,
        hash_block_tokens: int | None = None,
        cache_partial_block: bool = False,
        cache_generated_blocks: bool = False,
        reuse_uncached_first: bool = False,
    ) -> None:
        super().__init__(spec, block_size_tokens)
        if block_size_tokens <= 0:
            raise ValueError(f"block_size_tokens must be > 0, got {block_size_tokens}")
        self.num_blocks = spec.capacity_tokens // block_size_tokens
        if self.num_blocks == 0:
            raise ValueError(
                f"pool of {spec.capacity_tokens} tokens is smaller than one "
                f"{block_size_tokens}-token block"
            )
        self._bt = block_size_tokens
        self._prefix_caching = prefix_caching
        self._cache_generated = cache_generated_blocks
        self._reuse_uncached_first = reuse_uncached_first
        self._seqs: dict[int, _Seq] = {}
        self._pool = PagedBlockPool(
            self.num_blocks,
            block_tokens=block_size_tokens,
            hash_block_tokens=hash_block_tokens or block_size_tokens,
            cache_partial_block=cache_partial_block,
            cache_generated_blocks=cache_generated_blocks,
        )
        self._free_blocks = self.num_blocks  # the pool's head + queued (runs + cached)
        self._refusal: tuple[int, int] | None = None  # (need, free) tokens, built lazily
        self._next_block_id = 0
        self._ref: dict[int, int] = {}  # owned named block -> refcount (>= 1)
        self._key_of = self._pool.key_of  # cached block -> its key (the pool's map)
        self._owned_blocks = 0  # live requests' blocks + the growth reservoir
        self._used_tokens = 0
        self._shared_blocks = 0
        self._copied_tokens = 0

    # -- the operations -------------------------------------------------------------
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        """Admit a prompt of ``tokens``; ``cached_tokens`` counts prompt tokens found in
        the prefix cache (the engine still computes at least one token)."""
        self._check_new(request_id, self._seqs, tokens)
        if prefix_hashes and self._prefix_caching:
            return self._allocate_with_prefix(request_id, tokens, prefix_hashes)
        need = blocks_for(tokens, self._bt)
        if not self._take_blocks(need):
            return None
        self._seqs[request_id] = _Seq(tokens, need, need, None)
        self._used_tokens += tokens
        return Allocation(request_id, need * self._bt)

    def extend(self, request_id: int, tokens: int) -> bool:
        try:
            s = self._seqs[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None
        if s.hashes is not None:
            return self._extend_caching(request_id, s, tokens)
        if not s.anon or tokens < 0:  # the last block may be shared or cached
            return self._extend_slow(s, tokens)
        # hot path: the last block is private, growth draws plain blocks
        over = tokens - (s.blocks * self._bt - s.held)
        if over > 0:
            need = blocks_for(over, self._bt)
            if not self._take_blocks(need):
                return False
            s.anon += need
            s.blocks += need
        s.held += tokens
        self._used_tokens += tokens
        return True

    def fork(self, parent_id: int, child_id: int) -> bool:
        """Share every block of the parent (refcount + 1); never draws a block. The
        first write of either into a shared, partly filled last block copies it."""
        self._check_new(child_id, self._seqs)
        p = self._seq(parent_id)
        named = self._name_anon_blocks(p)
        ref = self._ref
        for b in named:
            r = ref[b]
            ref[b] = r + 1
            if r == 1:
                self._shared_blocks += 1
        self._seqs[child_id] = _Seq(p.held, p.blocks, 0, list(named))
        return True

    def free(self, request_id: int) -> None:
        try:
            s = self._seqs.pop(request_id)
        except KeyError:
            raise KeyError(f"request {request_id} is not live (double free?)") from None
        if s.owner >= 0:  # vLLM caches every full block as it fills; here, at the end
            self._cache_full_blocks(s, s.held, s.gen_hashes, s.owner)
        bt = self._bt
        named = s.named or []
        if s.anon:
            self._used_tokens -= s.held - len(named) * bt
            self._owned_blocks -= s.anon
            self._release_uncached(s.anon)
        ref = self._ref
        last_fill = s.held - (len(named) - 1) * bt  # fill of the last named block
        for i in range(len(named) - 1, -1, -1):  # tail first: prefix blocks evicted last
            b = named[i]
            r = ref[b] - 1
            if r > 0:
                ref[b] = r
                if r == 1:
                    self._shared_blocks -= 1
                continue
            assert r == 0, f"negative refcount on block {b}"
            del ref[b]
            self._owned_blocks -= 1
            self._used_tokens -= last_fill if (i == len(named) - 1 and not s.anon) else bt
            if b in self._key_of:
                self._pool.push_cached(b)
                self._free_blocks += 1
            else:
                self._release_uncached(1)

    def _release_uncached(self, n: int) -> None:
        """``n`` freed blocks nothing can hit: reused last (the queue tail) or, with
        ``reuse_uncached_first`` (vLLM 0.33), first (the head), so cached blocks stay."""
        self._free_blocks += n
        if self._reuse_uncached_first:
            self._pool.head_free_blocks += n
        else:
            self._pool.push_run(n)

    # -- reading ----------------------------------------------------------------------
    def stats(self) -> AllocStats:
        bt = self._bt
        free = self._free_blocks * bt
        return AllocStats(
            capacity_tokens=self.num_blocks * bt,
            used_tokens=self._used_tokens,
            reserved_unused_tokens=self._owned_blocks * bt - self._used_tokens,
            shared_tokens=self._shared_blocks * bt,
            free_tokens=free,
            largest_free_extent_tokens=free,
            free_extent_count=1 if free else 0,
            cached_free_tokens=self._pool.cached_free_blocks * bt,
            copied_tokens_total=self._copied_tokens,
        )

    def copied_tokens_total(self) -> int:
        return self._copied_tokens

    def free_and_largest_tokens(self) -> tuple[int, int]:
        free = self._free_blocks * self._bt
        return free, free

    def held_tokens(self, request_id: int) -> int:
        return self._seq(request_id).held

    def reserved_tokens(self, request_id: int) -> int:
        return self._seq(request_id).blocks * self._bt

    def free_extent_sizes(self) -> list[int]:
        free = self._free_blocks * self._bt
        return [free] if free else []

    def named_block_ids(self, request_id: int) -> tuple[int, ...]:
        """Ids of the request's leading blocks that have an identity (prefix-cached or
        fork-shared); the rest of its table are private blocks counted, not tracked."""
        return tuple(self._seq(request_id).named or ())

    def refcount(self, block_id: int) -> int:
        """Live requests referencing ``block_id`` (0 for a free or unknown block)."""
        return self._ref.get(block_id, 0)

    def caches_prefixes(self) -> bool:
        return self._prefix_caching

    def prefix_hit_tokens(
        self, tokens: int, prefix_hashes: Sequence[int] = (), owner: int = -1
    ) -> int:
        if not (prefix_hashes and self._prefix_caching):
            return 0
        return sum(
            key_fill_tokens(k, self._bt) for k, _ in self._pool.hits(tokens, prefix_hashes, owner)
        )

    def allocate_chunk(
        self,
        request_id: int,
        tokens: int,
        prompt_tokens: int,
        prefix_hashes: Sequence[int] = (),
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> Allocation | None:
        """As vLLM caches a prompt placed chunk by chunk: the full blocks each later
        ``extend`` fills, up to ``prompt_tokens``, enter the cache then (and with
        ``cache_generated_blocks`` every full block of ``owner`` when it is freed)."""
        if not (prefix_hashes and self._prefix_caching):
            return self.allocate(request_id, tokens)
        self._check_new(request_id, self._seqs, tokens)
        got = self._allocate_with_prefix(request_id, tokens, prefix_hashes, owner, max_hit_tokens)
        if got is None:
            return None
        s = self._seqs[request_id]
        if tokens < prompt_tokens:
            s.hashes = prefix_hashes
            s.prompt = prompt_tokens
        if owner >= 0 and self._cache_generated:
            s.owner = owner
            s.gen_hashes = prefix_hashes
        return got

    def admission_fits(
        self,
        tokens: int,
        prefix_hashes: Sequence[int] = (),
        keep_free_tokens: int = 0,
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> bool:
        """As ``allocate`` counts: new blocks for the tokens past the hits, plus the hit
        blocks that are free now (reviving them takes them from the free queue)."""
        need = -(-tokens // self._bt)
        if prefix_hashes and self._prefix_caching:
            ref = self._ref
            for _, b in self._pool.hits(tokens, prefix_hashes, owner, max_hit_tokens):
                need -= b in ref  # a hit in use takes nothing from the free queue
        need_tokens = need * self._bt + keep_free_tokens
        if need_tokens <= self._free_blocks * self._bt:
            return True
        self._refuse(need_tokens)
        return False

    # -- engine seams -----------------------------------------------------------------
    def headroom_tokens(self, request_id: int) -> int:
        s = self._seq(request_id)
        room = s.blocks * self._bt - s.held
        if room and not s.anon and s.named:
            last = s.named[-1]
            if self._ref[last] > 1 or last in self._key_of:
                return 0
        return room

    def blocks_to_extend(self, request_id: int, tokens: int) -> int:
        return self._extend_need(self._seq(request_id), tokens)[0]

    def growth_is_pooled(self, request_id: int) -> bool:
        """True unless the last block is shared (refcount > 1) or cached and partly
        filled, i.e. ``_extend_need(s, t)[1] == 0`` for every t (see the base class)."""
        s = self._seq(request_id)
        room = s.blocks * self._bt - s.held
        if not 0 <= room < self._bt:  # holds more than ceil(held / block) blocks
            return False
        if room and not s.anon and s.named:
            last = s.named[-1]
            return self._ref[last] == 1 and last not in self._key_of
        return True

    def _pooled_need(self, request_id: int, tokens: int) -> int:
        if not self.growth_is_pooled(request_id):
            raise ValueError(
                f"request {request_id}: growth is not pooled (shared or cached partly "
                f"filled last block); use extend"
            )
        s = self._seqs[request_id]
        bt = self._bt
        return max(0, blocks_for(tokens - (s.blocks * bt - s.held), bt))

    def _grow_from_reservoir(self, request_id: int, blocks: int, tokens: int) -> None:
        s = self._seqs[request_id]
        s.anon += blocks
        s.blocks += blocks
        s.held += tokens
        self._used_tokens += tokens

    def last_failure(self) -> Failure | None:
        if self._refusal is None:
            return None
        need, free = self._refusal
        return Failure(need, free, free, classify(need, free, free))

    # -- internals --------------------------------------------------------------------
    def _refuse(self, need_tokens: int) -> None:
        """Record the refusal cheaply (the pool may refuse on most calls when full)."""
        self._refusal = (need_tokens, self._free_blocks * self._bt)

    def _seq(self, request_id: int) -> _Seq:
        try:
            return self._seqs[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None

    def _extend_need(self, s: _Seq, tokens: int) -> tuple[int, int]:
        """(blocks to draw, CoW/uncache action on the last block: 0 none, 1 copy it,
        2 drop its cache entry)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        bt = self._bt
        room = s.blocks * bt - s.held
        if tokens == 0:
            return 0, 0
        if room and not s.anon and s.named:
            last = s.named[-1]
            if self._ref[last] > 1:
                return blocks_for(bt - room + tokens, bt), 1
            if last in self._key_of:
                return max(0, blocks_for(tokens - room, bt)), 2
        return max(0, blocks_for(tokens - room, bt)), 0

    def _extend_slow(self, s: _Seq, tokens: int) -> bool:
        need, action = self._extend_need(s, tokens)
        # the action below touches no free block, so drawing first is drawing after it
        if not self._take_blocks(need):
            return False
        if action == 1:  # copy-on-write of the shared, partly filled last block
            assert s.named is not None
            last = s.named.pop()
            fill = self._bt - (s.blocks * self._bt - s.held)
            self._ref[last] -= 1
            if self._ref[last] == 1:
                self._shared_blocks -= 1
            s.blocks -= 1
            self._copied_tokens += fill
            self._used_tokens += fill
        elif action == 2:  # sole owner writes into its cached partial block
            assert s.named is not None
            self._pool.uncache(s.named[-1])
        s.anon += need
        s.blocks += need
        s.held += tokens
        self._used_tokens += tokens
        return True

    def _extend_caching(self, request_id: int, s: _Seq, tokens: int) -> bool:
        """Extend a prompt allocated in part; its newly full prompt blocks enter the
        cache (unless a block of equal content is cached already)."""
        hashes = s.hashes
        assert hashes is not None
        s.hashes = None
        if not self.extend(request_id, tokens):
            s.hashes = hashes
            return False
        self._cache_full_blocks(s, min(s.held, s.prompt), hashes, -1)
        if s.held < s.prompt:
            s.hashes = hashes
        return True

    def _draw_free_blocks(self, n: int) -> None:
        """Take ``n`` blocks (caller checked ``n <= free``) from the pool's queue head into
        the owned ones (see :meth:`PagedBlockPool.draw`)."""
        self._free_blocks -= n
        self._owned_blocks += n
        self._pool.draw(n)

    def _name_anon_blocks(self, s: _Seq) -> list[int]:
        """Give the request's private blocks ids (refcount 1) so they can be shared."""
        named = s.named if s.named is not None else []
        if s.anon:
            first = self._next_block_id
            self._next_block_id += s.anon
            ids = range(first, first + s.anon)
            named.extend(ids)
            self._ref.update(dict.fromkeys(ids, 1))
            s.anon = 0
        s.named = named
        return named

    def _cache_full_blocks(self, s: _Seq, tokens: int, hashes: Sequence[int], owner: int) -> None:
        """Name the request's blocks and cache its full ones among its first ``tokens``
        (unless a block of equal content is cached already)."""
        pool = self._pool
        keys = pool.block_keys(tokens, hashes, owner)
        named = self._name_anon_blocks(s)
        for key, b in zip(keys, named, strict=False):
            pool.enter(key, b)

    def _allocate_with_prefix(
        self,
        request_id: int,
        tokens: int,
        hashes: Sequence[int],
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> Allocation | None:
        bt = self._bt
        need = blocks_for(tokens, bt)
        pool = self._pool
        keys = pool.block_keys(tokens, hashes, owner)
        ref = self._ref
        hits = [b for _, b in leading_hits(keys, pool.cache, bt, max_hit_tokens)]
        revive = sum(b not in ref for b in hits)
        new = need - len(hits)
        if new + revive > self._free_blocks:  # revived hits leave the free pool too
            self._refuse((new + revive) * bt)
            return None
        cached_tokens = 0
        for key, b in zip(keys, hits, strict=False):
            fill = key_fill_tokens(key, bt)
            cached_tokens += fill
            r = ref.get(b, 0)
            if r == 0:  # revive a cached free block
                pool.revive(b)
                self._free_blocks -= 1
                self._owned_blocks += 1
                self._used_tokens += fill
            elif r == 1:
                self._shared_blocks += 1
            ref[b] = r + 1
        self._draw_free_blocks(new)
        self._used_tokens += tokens - cached_tokens
        named = hits
        for key in keys[len(hits) :]:  # newly computed prompt blocks enter the cache
            b = self._next_block_id
            self._next_block_id += 1
            ref[b] = 1
            named.append(b)
            pool.enter(key, b)
        self._seqs[request_id] = _Seq(tokens, need, need - len(named), named)
        return Allocation(request_id, need * bt, cached_tokens=cached_tokens)
