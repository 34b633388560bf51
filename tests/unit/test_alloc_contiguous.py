"""Contiguous fits as usage stories: growth by reallocation, forks by copy, refusals
and the seed's diagnosis of a checkerboarded pool."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.allocators import fit_kinds

from policies.allocators.base import PoolSpec
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.diagnostics import classify_failure, free_extent_histogram
from policies.allocators.registry import parse_allocator


def _build(capacity: int, **config: object) -> ContiguousAllocator:
    alloc = parse_allocator({"kind": "best_fit", **config}).build(PoolSpec(capacity))
    assert isinstance(alloc, ContiguousAllocator)
    return alloc


def checkerboard(alloc: ContiguousAllocator, holes: int, hole: int, live: int) -> None:
    """Fill the pool with alternating ``live``-slot and ``hole``-slot requests, then free
    the ``hole`` ones: ``holes`` free gaps, none adjacent."""
    for i in range(holes):
        assert alloc.allocate(2 * i, live) is not None
        assert alloc.allocate(2 * i + 1, hole) is not None
    for i in range(holes):
        alloc.free(2 * i + 1)


def test_a_request_starts_with_its_prompt_plus_64_slots() -> None:
    alloc = _build(10_000)
    got = alloc.allocate(1, 100)
    assert got is not None and got.reserved_tokens == 164
    s = alloc.stats()
    assert (s.used_tokens, s.reserved_unused_tokens, s.free_tokens) == (100, 64, 9_836)
    assert alloc.headroom_tokens(1) == 64


def test_a_full_buffer_is_replaced_by_a_twice_larger_one_and_held_tokens_are_copied() -> None:
    alloc = _build(10_000)
    alloc.allocate(1, 100)
    assert alloc.extend(1, 64)  # fills the buffer exactly: no copy
    assert alloc.stats().copied_tokens_total == 0
    assert alloc.extend(1, 1)  # full: a 328-slot buffer, 164 tokens copied
    assert alloc.reserved_tokens(1) == 328
    assert alloc._extents_of(1) == [(164, 328)]  # the old one was still live when placed
    s = alloc.stats()
    assert s.copied_tokens_total == 164
    assert (s.used_tokens, s.free_tokens, s.free_extent_count) == (165, 9_672, 2)


def test_growth_by_chunks_adds_whole_chunks() -> None:
    alloc = _build(10_000, initial_extra_tokens=0, growth_chunk_tokens=50)
    alloc.allocate(1, 10)
    assert alloc.extend(1, 120)  # 130 tokens need 10 + 3 chunks
    assert alloc.reserved_tokens(1) == 160


def test_growth_fails_when_old_and_new_buffers_cannot_coexist() -> None:
    alloc = _build(250, initial_extra_tokens=0)
    alloc.allocate(1, 100)
    assert not alloc.extend(1, 1)  # needs 200 beside the old 100: only 150 free
    failure = alloc.last_failure()
    assert failure is not None and failure.need_tokens == 200
    assert failure.cause == "capacity" and failure.free_tokens == 150
    assert alloc.held_tokens(1) == 100 and alloc.reserved_tokens(1) == 100


def test_fork_copies_the_parent_into_a_buffer_of_its_size() -> None:
    alloc = _build(10_000)
    alloc.allocate(1, 2_000)
    assert alloc.fork(1, 2)
    assert alloc.held_tokens(2) == 2_000 and alloc.reserved_tokens(2) == 2_064
    s = alloc.stats()
    assert s.copied_tokens_total == 2_000 and s.shared_tokens == 0
    assert s.used_tokens == 4_000  # the seed's point: no sharing, the prompt twice


def test_misuse_raises() -> None:
    alloc = _build(1_000)
    alloc.allocate(1, 10)
    with pytest.raises(ValueError, match="already live"):
        alloc.allocate(1, 10)
    with pytest.raises(KeyError):
        alloc.free(2)
    with pytest.raises(KeyError):
        alloc.extend(2, 1)
    alloc.free(1)
    with pytest.raises(KeyError):
        alloc.free(1)


def test_config_is_validated_at_the_edge() -> None:
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "first_fit", "growth_factor": 1.0})
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "worst_fit", "blocks": 3})


@pytest.mark.parametrize("kind", fit_kinds())
def test_seed_worked_example_a_22000_token_request_fails_at_38_percent_free(kind: str) -> None:
    """The seed's day 5: gaps of 1,200 tokens add up to 38 % free, and a 22,000-token
    document request finds no gap large enough: a fragmentation failure."""
    alloc = _build(100 * (1_958 + 1_200), kind=kind, initial_extra_tokens=0)
    checkerboard(alloc, holes=100, hole=1_200, live=1_958)
    s = alloc.stats()
    assert round(s.free_tokens / s.capacity_tokens, 2) == 0.38
    assert s.largest_free_extent_tokens == 1_200 and s.free_extent_count == 100
    assert s.largest_contiguous_free_block_ratio == pytest.approx(0.01)
    assert alloc.allocate(999, 22_000) is None
    failure = alloc.last_failure()
    assert failure is not None and failure.cause == "fragmentation"
    assert classify_failure(alloc, 22_000) == "fragmentation"
    assert classify_failure(alloc, 200_000) == "capacity"


def test_free_extent_histogram_bins_the_free_extents() -> None:
    from policies.allocators.base import PoolSpec
    from policies.allocators.registry import ALLOCATORS

    alloc = ALLOCATORS["first_fit"](kind="first_fit", initial_extra_tokens=0).build(
        PoolSpec(capacity_tokens=1000)
    )
    for rid in range(10):
        assert alloc.allocate(rid, 100) is not None
    for rid in (1, 3, 4, 8):  # holes of 100, 200 and 100 tokens, nothing else free
        alloc.free(rid)
    assert sorted(alloc.free_extent_sizes()) == [100, 100, 200]
    assert free_extent_histogram(alloc, [1, 150, 1000]) == [2, 1, 0]
