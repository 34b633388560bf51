"""Buddy allocation: power-of-two blocks, split and merge, and a pool that is not a
power of two."""

from __future__ import annotations

import pytest

from policies.allocators.base import PoolSpec
from policies.allocators.buddy import BuddyBlocks
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.registry import parse_allocator


def test_a_pool_that_is_not_a_power_of_two_is_a_forest_of_maximal_roots() -> None:
    blocks = BuddyBlocks(1_000)  # 512 + 256 + 128 + 64 + 32 + 8
    assert blocks.extents() == [(0, 512), (512, 256), (768, 128), (896, 64), (960, 32), (992, 8)]
    assert blocks.largest_tokens() == 512 and blocks.free_tokens == 1_000


def test_a_small_request_splits_the_lowest_smallest_block_that_fits() -> None:
    blocks = BuddyBlocks(1_000)
    assert blocks.take(5) == 992  # the 8-slot root fits exactly
    assert blocks.take(20) == 960  # the 32-slot root
    assert blocks.take(20) == 896  # splits the 64-slot root, keeps the lower half
    assert blocks.take(100) == 768
    assert blocks.take(60) == 512  # splits the 256-slot root into 64 + 64 + 128
    assert blocks.take(100) == 640  # the 128-slot half left by that split
    assert blocks.extents() == [(0, 512), (576, 64), (928, 32)]


def test_freed_buddies_merge_back_and_non_buddies_do_not() -> None:
    blocks = BuddyBlocks(64)
    a, b, c, d = (blocks.take(16) for _ in range(4))
    assert (a, b, c, d) == (0, 16, 32, 48)
    blocks.give(16, 16)
    blocks.give(32, 16)  # adjacent to 16 but not its buddy
    assert blocks.extents() == [(16, 16), (32, 16)]
    assert blocks.largest_tokens() == 16 and blocks.free_tokens == 32
    blocks.give(0, 16)
    blocks.give(48, 16)
    assert blocks.extents() == [(0, 64)]


def test_freeing_a_bad_block_raises() -> None:
    blocks = BuddyBlocks(64)
    blocks.take(16)
    with pytest.raises(ValueError, match="not a block"):
        blocks.give(8, 16)
    with pytest.raises(ValueError, match="double free"):
        blocks.give(16, 16)


def test_buddy_policy_rounds_up_and_grows_to_the_next_power_of_two() -> None:
    alloc = parse_allocator({"kind": "buddy"}).build(PoolSpec(100_000))
    assert isinstance(alloc, ContiguousAllocator)
    got = alloc.allocate(1, 100)  # 164 slots asked, a 256-slot block given
    assert got is not None and got.reserved_tokens == 256
    assert alloc.stats().reserved_unused_tokens == 156
    assert alloc.extend(1, 157)
    assert alloc.reserved_tokens(1) == 512 and alloc.stats().copied_tokens_total == 100


def test_a_fragmented_buddy_pool_reports_fragmentation() -> None:
    alloc = parse_allocator({"kind": "buddy", "initial_extra_tokens": 0}).build(PoolSpec(1_024))
    for rid in range(8):
        alloc.allocate(rid, 128)
    for rid in range(0, 8, 2):
        alloc.free(rid)
    assert alloc.allocate(99, 256) is None
    failure = alloc.last_failure()
    assert failure is not None and failure.cause == "fragmentation"
    assert alloc.stats().largest_contiguous_free_block_ratio == 0.25
