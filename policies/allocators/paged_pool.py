"""The paged allocator's block pool: the free-block queue and the prefix cache's maps.

Kept apart from :class:`policies.allocators.paged.PagedAllocator` (what a request holds:
block tables, reference counts, token accounting) as vLLM v1 keeps ``BlockPool`` apart
from ``KVCacheManager``. The pool never counts owned blocks or tokens; the allocator
keeps the free-block total (``PooledAllocator._free_blocks``) and calls the pool for the
order in which free blocks are taken and returned.

Free-block queue. Like vLLM's ``FreeKVCacheBlockQueue`` there is one queue of free
blocks, cached or not, in the order they were freed; drawing takes blocks from its head
(least recently freed first), evicting a cached block's key when it takes one. Blocks
never used yet sit before everything else (vLLM's queue starts with all), in
``head_free_blocks`` with the blocks freed while the queue was empty (order among
anonymous blocks is irrelevant). The queue is an ``OrderedDict`` because a prefix hit
must remove a cached block from the middle in O(1) while keeping LRU order (vLLM uses a
doubly linked list for the same reason); its entries are either one cached block (key =
block id >= 0) or a *run* of anonymous free blocks (key < 0, value = block count), so
the hot path without prefix hashes touches O(1) entries per operation instead of one per
block.

Prefix cache. ``cache`` maps a block key (``policies.allocators.paged_keys``) to the
block holding that content and ``key_of`` maps back; a cached block stays in both while
it is free (in the queue, counted in ``cached_free_blocks``) until it is evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from policies.allocators.paged_keys import (
    BlockKey,
    generated_block_keys,
    leading_hits,
    prompt_block_keys,
)


class PagedBlockPool:
    """Free-block order and cached-block identity of one paged pool of ``num_blocks``
    blocks of ``block_tokens``; prefix keys span ``hash_block_tokens``, with the partly
    filled last prompt block (``cache_partial_block``) and a request's generated blocks
    (``cache_generated_blocks``) keyed when the allocator says so."""

    def __init__(
        self,
        num_blocks: int,
        *,
        block_tokens: int,
        hash_block_tokens: int,
        cache_partial_block: bool,
        cache_generated_blocks: bool,
    ) -> None:
        self._bt = block_tokens
        self._hash_bt = hash_block_tokens
        self._cache_partial = cache_partial_block
        self._cache_generated = cache_generated_blocks
        self.head_free_blocks = num_blocks
        self.cached_free_blocks = 0
        self.key_of: dict[int, BlockKey] = {}  # cached block -> its key
        self.cache: dict[BlockKey, int] = {}  # key -> cached block
        self._queue: OrderedDict[int, int] = OrderedDict()
        self._next_run_key = -1

    def draw(self, n: int) -> None:
        """Take ``n`` free blocks (the caller checked there are) from the queue head: the
        anonymous head blocks first, then least recently freed, evicting cached blocks."""
        fresh = self.head_free_blocks
        if fresh:
            if fresh >= n:
                self.head_free_blocks = fresh - n
                return
            self.head_free_blocks = 0
            n -= fresh
        queue = self._queue
        while n:
            key, count = next(iter(queue.items()))
            if key < 0:  # a run of anonymous blocks
                if count > n:
                    queue[key] = count - n
                    return
                del queue[key]
                n -= count
            else:  # a cached block: evict it
                del queue[key]
                del self.cache[self.key_of.pop(key)]
                self.cached_free_blocks -= 1
                n -= 1

    def push_run(self, n: int) -> None:
        """Append ``n`` anonymous free blocks to the queue tail (merging with a tail run)."""
        queue = self._queue
        if not queue:
            self.head_free_blocks += n
            return
        tail = next(reversed(queue))
        if tail < 0:
            queue[tail] += n
            return
        queue[self._next_run_key] = n
        self._next_run_key -= 1

    def push_cached(self, block_id: int) -> None:
        """Append the freed cached block ``block_id`` to the queue tail (still hittable)."""
        self._queue[block_id] = 0
        self.cached_free_blocks += 1

    def revive(self, block_id: int) -> None:
        """Take the free cached block ``block_id`` out of the middle of the queue (a hit)."""
        del self._queue[block_id]
        self.cached_free_blocks -= 1

    def uncache(self, block_id: int) -> None:
        """Forget the owned block ``block_id``'s content (its owner writes into it)."""
        del self.cache[self.key_of.pop(block_id)]

    def enter(self, key: BlockKey, block_id: int) -> None:
        """Cache ``block_id`` under ``key`` unless that content or that block is cached."""
        if key not in self.cache and block_id not in self.key_of:
            self.cache[key] = block_id
            self.key_of[block_id] = key

    def block_keys(self, tokens: int, hashes: Sequence[int], owner: int = -1) -> list[BlockKey]:
        """The keys of a request's first ``tokens`` blocks from its chained ``hashes``,
        with its own generated blocks' keys when ``owner >= 0`` and those are cached."""
        bt = self._bt
        keys = prompt_block_keys(tokens, hashes, bt, self._hash_bt, self._cache_partial)
        if owner >= 0 and self._cache_generated and len(keys) == len(hashes):
            keys += generated_block_keys(owner, len(keys), tokens // bt)  # its own blocks
        return keys

    def hits(
        self, tokens: int, hashes: Sequence[int], owner: int = -1, max_hit_tokens: int = -1
    ) -> list[tuple[BlockKey, int]]:
        """The request's leading cached blocks (key, block id), up to the first miss and
        ``max_hit_tokens`` (-1: no limit)."""
        keys = self.block_keys(tokens, hashes, owner)
        return leading_hits(keys, self.cache, self._bt, max_hit_tokens)
