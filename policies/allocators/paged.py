"""Paged KV cache (vLLM-style): fixed blocks, prefix caching, LRU eviction, CoW forks.

The pool is ``capacity_tokens // block_size_tokens`` blocks (a remainder smaller than one
block is not part of the pool: ``stats().capacity_tokens`` is the whole-block capacity).
A request owns a block table; any free block serves any request, so all free memory is
one usable extent (``largest_free_extent_tokens == free_tokens``, ``free_extent_count``
is 1 when anything is free, else 0) and a refusal is always a *capacity* failure.
A request's table and the steps the operations are made of (block identity, the
free-block queue, placing a prompt over its prefix hits) are
:mod:`policies.allocators.paged_tables`.

Prefix caching (vLLM semantics). Blocks are keyed from the request's chained
``prefix_hashes`` (``policies.allocators.paged_keys``: equal keys, equal content). Full
prompt blocks are cached; with ``cache_partial_block`` the partly filled last prompt
block too (Mooncake's accounting; the first decode write drops or copies it); with
``cache_generated_blocks`` (vLLM v1) full blocks of generated tokens too, when the
request is freed. A request's hits are its leading cached blocks up to the first miss.
A block whose reference count falls to zero stays cached and reusable (counted in
``free_tokens`` and ``cached_free_tokens``) until it is evicted.

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

from policies.allocators.base import Allocation, AllocStats, blocks_for
from policies.allocators.paged_keys import key_fill_tokens
from policies.allocators.paged_tables import BlockTable, PagedBlockTables


class PagedAllocator(PagedBlockTables):
    """Fixed-size blocks with prefix caching and copy-on-write forks (see module doc)."""

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
        self._seqs[request_id] = BlockTable(tokens, need, need, None)
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
        self._seqs[child_id] = BlockTable(p.held, p.blocks, 0, list(named))
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

    # -- internals --------------------------------------------------------------------
    def _extend_caching(self, request_id: int, s: BlockTable, tokens: int) -> bool:
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
