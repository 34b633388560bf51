"""Paged allocator stories: block accounting, vLLM prefix caching and LRU eviction,
copy-on-write forks, the engine seam, config validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.allocators.base import PoolSpec
from policies.allocators.config import PagedConfig
from policies.allocators.diagnostics import classify_failure
from policies.allocators.paged import PagedAllocator
from policies.allocators.registry import ALLOCATORS, parse_allocator


def _pool(blocks: int, **kw: object) -> PagedAllocator:
    return PagedAllocator(PoolSpec(blocks * 16), block_size_tokens=16, **kw)  # type: ignore[arg-type]


def test_blocks_hold_tokens_and_the_last_block_is_internal_fragmentation() -> None:
    a = _pool(10)
    alloc = a.allocate(1, 40)
    assert alloc is not None and alloc.reserved_tokens == 48 and alloc.cached_tokens == 0
    s = a.stats()
    assert (s.used_tokens, s.reserved_unused_tokens, s.free_tokens) == (40, 8, 112)
    assert s.largest_free_extent_tokens == s.free_tokens and s.free_extent_count == 1
    assert s.largest_contiguous_free_block_ratio == 1.0
    assert a.headroom_tokens(1) == 8
    assert a.blocks_to_extend(1, 8) == 0 and a.blocks_to_extend(1, 9) == 1
    assert a.extend(1, 9)
    assert a.reserved_tokens(1) == 64 and a.held_tokens(1) == 49
    a.free(1)
    assert a.stats().free_tokens == 160
    with pytest.raises(KeyError):
        a.free(1)


def test_capacity_is_whole_blocks_and_a_refusal_is_capacity() -> None:
    a = PagedAllocator(PoolSpec(100), block_size_tokens=16)
    assert a.stats().capacity_tokens == 96
    assert a.allocate(1, 90) is not None
    before = a.stats()
    assert a.allocate(2, 10) is None
    assert a.stats() == before
    failure = a.last_failure()
    assert failure is not None and failure.cause == "capacity" and failure.need_tokens == 16
    assert classify_failure(a, 10_000) == "capacity"
    with pytest.raises(ValueError, match="already live"):
        a.allocate(1, 5)


def test_a_freed_prefix_stays_cached_and_is_hit() -> None:
    a = _pool(10)
    assert a.allocate(1, 40, prefix_hashes=[11, 12, 13]) is not None
    a.free(1)
    s = a.stats()
    assert s.cached_free_tokens == 32 and s.free_tokens == 160  # 2 full blocks cached
    alloc = a.allocate(2, 50, prefix_hashes=[11, 12, 99, 100])
    assert alloc is not None and alloc.cached_tokens == 32
    assert a.stats().cached_free_tokens == 0
    assert a.stats().used_tokens == 50


def test_shared_prefix_counts_once_in_used_and_for_every_owner() -> None:
    a = _pool(10)
    assert a.allocate(1, 32, prefix_hashes=[1, 2]) is not None
    alloc = a.allocate(2, 40, prefix_hashes=[1, 2, 3])
    assert alloc is not None and alloc.cached_tokens == 32
    s = a.stats()
    assert s.shared_tokens == 32 and s.used_tokens == 40
    assert a.reserved_tokens(1) == 32 and a.reserved_tokens(2) == 48
    a.free(1)
    assert a.stats().shared_tokens == 0 and a.stats().used_tokens == 40


def test_eviction_takes_the_least_recently_freed_block_tail_first() -> None:
    a = _pool(4)
    assert a.allocate(1, 32, prefix_hashes=[1, 2]) is not None
    assert a.allocate(2, 32, prefix_hashes=[7, 8]) is not None
    a.free(1)  # queue: 2, 1 (tail first)
    a.free(2)  # queue: 2, 1, 8, 7
    assert a.allocate(3, 16) is not None  # evicts request 1's second block (hash 2)
    # hits hash 1 (taken out of the middle of the queue); its new block evicts hash 8
    assert a.allocate(4, 32, prefix_hashes=[1, 2]).cached_tokens == 16  # type: ignore[union-attr]
    a.free(4)
    a.free(3)
    assert a.allocate(5, 32, prefix_hashes=[7, 8]).cached_tokens == 16  # type: ignore[union-attr]


def test_hit_blocks_in_the_free_queue_count_against_free_memory() -> None:
    a = _pool(3)
    assert a.allocate(1, 48, prefix_hashes=[1, 2, 3]) is not None
    a.free(1)
    assert a.allocate(2, 64, prefix_hashes=[1, 2, 3, 4]) is None  # 4 blocks > 3
    assert a.stats().cached_free_tokens == 48  # unchanged by the refusal
    alloc = a.allocate(3, 40, prefix_hashes=[1, 2, 9])
    assert alloc is not None and alloc.cached_tokens == 32


def test_hash_blocks_larger_than_pool_blocks_map_to_sub_blocks() -> None:
    a = PagedAllocator(PoolSpec(10_000), block_size_tokens=16, hash_block_tokens=64)
    assert a.allocate(1, 100, prefix_hashes=[5, 6]) is not None
    a.free(1)
    # same first 64-token hash block, different second: 4 sub-blocks hit
    alloc = a.allocate(2, 100, prefix_hashes=[5, 7])
    assert alloc is not None and alloc.cached_tokens == 64
    a.free(2)
    # identical hashes: all 6 full pool blocks of the 100-token prompt hit
    assert a.allocate(3, 100, prefix_hashes=[5, 6]).cached_tokens == 96  # type: ignore[union-attr]


def test_prefix_caching_off_ignores_hashes() -> None:
    a = _pool(10, prefix_caching=False)
    assert a.allocate(1, 32, prefix_hashes=[1, 2]) is not None
    a.free(1)
    assert a.stats().cached_free_tokens == 0
    assert a.allocate(2, 32, prefix_hashes=[1, 2]).cached_tokens == 0  # type: ignore[union-attr]


def test_fork_shares_then_copies_the_partial_last_block_on_write() -> None:
    a = _pool(10)
    assert a.allocate(1, 40) is not None
    assert a.fork(1, 2)
    s = a.stats()
    assert s.shared_tokens == 48 and s.used_tokens == 40
    assert a.headroom_tokens(2) == 0  # a write would copy
    assert a.blocks_to_extend(2, 1) == 1
    assert a.blocks_to_extend(2, 16) == 2  # the copy holds 8 tokens: CoW shows here
    assert a.extend(2, 1)
    s = a.stats()
    assert s.copied_tokens_total == 8 and s.shared_tokens == 32
    assert s.used_tokens == 40 + 8 + 1
    assert a.headroom_tokens(1) == 8  # the parent now owns its last block alone
    assert a.extend(1, 8)
    assert a.stats().copied_tokens_total == 8
    a.free(1)
    a.free(2)
    assert a.stats().free_tokens == 160


def test_partial_block_caching_drops_or_copies_on_write() -> None:
    a = _pool(10, cache_partial_block=True)
    assert a.allocate(1, 40, prefix_hashes=[1, 2, 3]).cached_tokens == 0  # type: ignore[union-attr]
    alloc = a.allocate(2, 40, prefix_hashes=[1, 2, 3])
    assert alloc is not None and alloc.cached_tokens == 40  # the partial block too
    assert a.headroom_tokens(2) == 0
    assert a.extend(2, 1)  # shared partial block: copy
    assert a.stats().copied_tokens_total == 8
    assert a.headroom_tokens(1) == 0
    assert a.extend(1, 1)  # sole owner: the block leaves the cache, no copy
    assert a.stats().copied_tokens_total == 8
    a.free(1)
    a.free(2)
    assert a.allocate(3, 40, prefix_hashes=[1, 2, 3]).cached_tokens == 32  # type: ignore[union-attr]


def test_config_validates_and_is_registered() -> None:
    assert ALLOCATORS["paged"] is PagedConfig
    config = parse_allocator({"kind": "paged", "block_size_tokens": 32})
    assert isinstance(config, PagedConfig)
    alloc = config.build(PoolSpec(1_000))
    assert alloc.pool_block_tokens == 32 and alloc.stats().capacity_tokens == 992
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "paged", "block_size_tokens": 0})
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "paged", "blocksize": 16})
    with pytest.raises(ValueError, match="smaller than one"):
        PagedConfig(block_size_tokens=64).build(PoolSpec(10))
