"""PyTorch caching-allocator model: rounding, pools and segments, best fit and splits,
merging, release-and-retry, the seed's fragmentation failure, expandable segments and
growth by reallocation. Token = 1 MiB in most stories so sizes read as MiB."""

from __future__ import annotations

from policies.allocators.base import PoolSpec
from policies.allocators.caching import (
    CachingAllocator,
    round_size_bytes,
    segment_size_bytes,
)
from policies.allocators.config import CachingConfig
from policies.allocators.diagnostics import classify_failure
from policies.allocators.pooled import as_pooled
from policies.allocators.registry import parse_allocator

MIB = 1 << 20


def _mib_pool(capacity_mib: int, **kw: object) -> CachingAllocator:
    return CachingAllocator(PoolSpec(capacity_mib, kv_bytes_per_token=MIB), **kw)  # type: ignore[arg-type]


def test_rounding_and_segment_sizes_follow_pytorch() -> None:
    assert round_size_bytes(1) == 512 and round_size_bytes(513) == 1024
    assert segment_size_bytes(MIB) == 2 * MIB  # small pool
    assert segment_size_bytes(MIB + 512) == 20 * MIB  # large, < 10 MiB
    assert segment_size_bytes(10 * MIB) == 10 * MIB
    assert segment_size_bytes(11 * MIB) == 12 * MIB  # rounded up to 2 MiB


def test_small_requests_split_one_small_segment() -> None:
    a = CachingAllocator(PoolSpec(10_000, kv_bytes_per_token=4096))
    assert a.allocate(1, 10) is not None and a.allocate(2, 10) is not None
    assert a.segment_count() == 1
    assert a.reserved_tokens(1) == 10
    s = a.stats()
    assert s.used_tokens == 20 and s.free_tokens == 10_000 - 20
    assert s.free_extent_count == 2  # the rest of the segment + memory outside segments
    a.free(1)
    a.free(2)
    assert a.stats().free_extent_count == 2  # merged back into one cached segment
    assert a.stats().free_tokens == 10_000
    a.empty_cache()
    assert a.segment_count() == 0 and a.stats().free_extent_count == 1


def test_unsplit_remainder_is_internal_fragmentation() -> None:
    a = CachingAllocator(PoolSpec(100 * 1024, kv_bytes_per_token=1024))
    assert a.allocate(1, 19 * 1024 + 200) is not None  # 19.2 MiB in a 20 MiB segment
    assert a.reserved_tokens(1) == 20 * 1024  # the 0.8 MiB remainder is not split off
    assert a.stats().reserved_unused_tokens == 20 * 1024 - (19 * 1024 + 200)
    assert a.allocate(2, 1024) is not None  # so 1 MiB more needs a new segment
    assert a.segment_count() == 2


def _checkerboard(a: CachingAllocator) -> None:
    """Fifteen 6 MiB requests (five 20 MiB segments of 6+6+6+2), then free the first
    and third of every segment: 70 MiB free, no cached block larger than 8 MiB."""
    for rid in range(15):
        assert a.allocate(rid, 6) is not None
    for rid in range(15):
        if rid % 3 != 1:
            a.free(rid)


def test_free_memory_scattered_across_segments_fails_as_fragmentation() -> None:
    a = _mib_pool(100)
    _checkerboard(a)
    s = a.stats()
    assert s.free_tokens == 70 and s.largest_free_extent_tokens == 8
    assert a.allocate(99, 9) is None
    failure = a.last_failure()
    assert failure is not None and failure.cause == "fragmentation"
    assert classify_failure(a, 9) == "fragmentation" and classify_failure(a, 71) == "capacity"
    assert a.allocate(100, 8) is not None  # a cached block serves what fits inside it


def test_expandable_segments_avoid_the_segment_boundary_failure() -> None:
    a = _mib_pool(100, expandable_segments=True)
    _checkerboard(a)
    assert a.stats().free_tokens == 70
    assert a.allocate(99, 9) is not None  # the free run spans the old segment boundary


def test_expandable_segments_map_and_unmap_whole_pages() -> None:
    a = _mib_pool(100, expandable_segments=True)
    assert a.allocate(1, 30) is not None  # large pool pages are 20 MiB: 2 mapped
    assert a.stats().largest_free_extent_tokens == 60
    assert a.allocate(2, 50) is not None  # 30..80 MiB: pages 1-3
    assert a.stats().largest_free_extent_tokens == 20
    a.free(1)  # page 0 is unmapped, page 1 is still touched by request 2
    assert a.stats().largest_free_extent_tokens == 40
    assert a.stats().free_tokens == 50
    a.free(2)
    assert a.stats().largest_free_extent_tokens == a.stats().free_tokens == 100


def test_fully_free_segments_are_released_and_the_allocation_retried() -> None:
    a = _mib_pool(100)
    for rid in range(8):
        assert a.allocate(rid, 12) is not None  # exact 12 MiB segments
    for rid in range(0, 8, 2):
        a.free(rid)
    assert a.segment_count() == 8
    assert a.stats().largest_free_extent_tokens == 4 + 48
    assert a.allocate(99, 24) is not None
    assert a.segment_count() == 5


def test_growth_reallocates_and_copies() -> None:
    a = CachingAllocator(PoolSpec(100_000, kv_bytes_per_token=4096), growth_factor=2.0)
    assert a.allocate(1, 100) is not None
    assert a.headroom_tokens(1) == 0
    assert a.extend(1, 1)  # 101 tokens in a tensor of 200
    assert a.stats().copied_tokens_total == 100 and a.headroom_tokens(1) == 99
    assert a.extend(1, 99) and a.stats().copied_tokens_total == 100
    exact = CachingAllocator(PoolSpec(100_000, kv_bytes_per_token=4096), growth_factor=1.0)
    assert exact.allocate(1, 100) is not None
    for _ in range(3):
        assert exact.extend(1, 1)
    assert exact.stats().copied_tokens_total == 100 + 101 + 102  # torch.cat every step


def test_growth_needs_old_and_new_together() -> None:
    a = _mib_pool(40)
    assert a.allocate(1, 20) is not None
    before = a.stats()
    assert not a.extend(1, 1)  # a 40 MiB tensor beside the 20 MiB one does not fit
    assert a.stats() == before
    assert a.fork(1, 2)
    assert a.stats().copied_tokens_total == 20


def test_config_is_registered() -> None:
    config = parse_allocator({"kind": "caching", "expandable_segments": True})
    assert isinstance(config, CachingConfig)
    alloc = config.build(PoolSpec(1_000, kv_bytes_per_token=MIB))
    assert as_pooled(alloc) is None and alloc.stats().free_tokens == 1_000


def test_tensor_parallelism_sizes_pools_and_segments_per_gpu() -> None:
    """200 tokens of 8 KiB (replica bytes) are 1.56 MiB on one GPU at tp=1 (large pool,
    20 MiB segment) but 0.78 MiB at tp=2 (small pool, 2 MiB segment); a 1,000-token
    tensor (large pool either way) then shares the segment at tp=1 only."""
    segments = {}
    for tp in (1, 2):
        a = CachingAllocator(PoolSpec(100_000, kv_bytes_per_token=8192, tensor_parallel=tp))
        assert a.allocate(1, 200) is not None and a.reserved_tokens(1) == 200
        assert a.allocate(2, 1_000) is not None and a.reserved_tokens(2) == 1_000
        assert a.stats().free_tokens == 100_000 - 1_200
        segments[tp] = a.segment_count()
    assert segments == {1: 1, 2: 2}


def test_rounding_applies_to_one_gpus_bytes() -> None:
    # 768 B per token over the replica; one token is 384 B per GPU at tp=2: rounded to
    # 512 B, which holds one token (at tp=1 it would be 768 -> 1,024 B, also one token).
    # 3 tokens at tp=2: 1,152 B -> 1,536 B = 4 tokens; at tp=1: 2,304 B -> 2,560 B = 3.
    for tp, reserved in ((1, 3), (2, 4)):
        a = CachingAllocator(PoolSpec(10_000, kv_bytes_per_token=768, tensor_parallel=tp))
        assert a.allocate(1, 3) is not None and a.reserved_tokens(1) == reserved
