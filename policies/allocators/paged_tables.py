"""The paged allocator's block tables: what each live request holds, and the mechanics
that move blocks between requests, the prefix cache and the free queue.

:class:`PagedBlockTables` holds the state of a paged pool (the requests' tables, the
reference counts of named blocks, the token and block totals) and the steps
:class:`policies.allocators.paged.PagedAllocator`'s operations are made of: drawing and
releasing blocks, naming private blocks, caching full blocks, placing a prompt over its
prefix-cache hits, extending a table whose last block is shared or cached. It is not an
allocator on its own (the operations, readings and engine seams are ``PagedAllocator``'s);
it calls nothing its subclass defines.

Block identity. Only blocks that need it have an id: prefix-cached blocks and blocks
shared by a fork. A request's table is ``named_blocks`` (ids, always the leading part)
followed by ``anon_blocks`` private blocks counted but not individually tracked.

Free-block queue (``policies.allocators.paged_pool``, with the prefix cache's maps): one
queue of free blocks, cached or not, in the order they were freed, taken from its head
(least recently freed first, evicting a cached block's key), never-used blocks first. A
request's blocks are freed tail first, so its prefix blocks are evicted last (with
``reuse_uncached_first``, as vLLM 0.33, freed uncached blocks go to the head instead).
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.allocators.base import (
    Allocation,
    Failure,
    PoolSpec,
    blocks_for,
    classify,
)
from policies.allocators.paged_keys import key_fill_tokens, leading_hits
from policies.allocators.paged_pool import PagedBlockPool
from policies.allocators.pooled import PooledAllocator


class BlockTable:
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


class PagedBlockTables(PooledAllocator):
    """A paged pool's request tables and block mechanics (see the module docstring)."""

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
        self._seqs: dict[int, BlockTable] = {}
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

    def _release_uncached(self, n: int) -> None:
        """``n`` freed blocks nothing can hit: reused last (the queue tail) or, with
        ``reuse_uncached_first`` (vLLM 0.33), first (the head), so cached blocks stay."""
        self._free_blocks += n
        if self._reuse_uncached_first:
            self._pool.head_free_blocks += n
        else:
            self._pool.push_run(n)

    def last_failure(self) -> Failure | None:
        if self._refusal is None:
            return None
        need, free = self._refusal
        return Failure(need, free, free, classify(need, free, free))

    def _refuse(self, need_tokens: int) -> None:
        """Record the refusal cheaply (the pool may refuse on most calls when full)."""
        self._refusal = (need_tokens, self._free_blocks * self._bt)

    def _seq(self, request_id: int) -> BlockTable:
        try:
            return self._seqs[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None

    def _extend_need(self, s: BlockTable, tokens: int) -> tuple[int, int]:
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

    def _extend_slow(self, s: BlockTable, tokens: int) -> bool:
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

    def _draw_free_blocks(self, n: int) -> None:
        """Take ``n`` blocks (caller checked ``n <= free``) from the pool's queue head into
        the owned ones (see :meth:`PagedBlockPool.draw`)."""
        self._free_blocks -= n
        self._owned_blocks += n
        self._pool.draw(n)

    def _name_anon_blocks(self, s: BlockTable) -> list[int]:
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

    def _cache_full_blocks(
        self, s: BlockTable, tokens: int, hashes: Sequence[int], owner: int
    ) -> None:
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
        self._seqs[request_id] = BlockTable(tokens, need, need - len(named), named)
        return Allocation(request_id, need * bt, cached_tokens=cached_tokens)
