"""Compaction as a usage story: the seed's checkerboarded pool, fixed by moving live
buffers, with the moved tokens reported for the engine's stall."""

from __future__ import annotations

from policies.allocators.base import PoolSpec
from policies.allocators.compaction import CompactingAllocator
from policies.allocators.diagnostics import classify_failure
from policies.allocators.registry import parse_allocator


def checkerboard(alloc: CompactingAllocator, holes: int, hole: int, live: int) -> None:
    """Alternating ``live``-slot and ``hole``-slot requests; the ``hole`` ones freed."""
    for i in range(holes):
        assert alloc.allocate(2 * i, live) is not None
        assert alloc.allocate(2 * i + 1, hole) is not None
    for i in range(holes):
        alloc.free(2 * i + 1)


def _build(capacity: int, fit: str = "best_fit", extra: int = 0) -> CompactingAllocator:
    config = {"kind": "compaction", "fit": fit, "initial_extra_tokens": extra}
    alloc = parse_allocator(config).build(PoolSpec(capacity))
    assert isinstance(alloc, CompactingAllocator)
    return alloc


def test_compaction_admits_the_22000_token_request_and_reports_moved_tokens() -> None:
    alloc = _build(100 * (1_958 + 1_200))
    checkerboard(alloc, holes=100, hole=1_200, live=1_958)
    assert classify_failure(alloc, 22_000) == "fragmentation"
    got = alloc.allocate(999, 22_000)
    assert got is not None
    # Buffer 0 stays at slot 0; sliding the next 18 down merges the 19 holes below
    # buffer 19 into 19 x 1,200 = 22,800 slots.
    assert got.moved_tokens == 18 * 1_958
    s = alloc.stats()
    assert s.moved_tokens_total == got.moved_tokens
    assert alloc.compaction_count == 1
    assert alloc._extents_of(999) == [(19 * 1_958, 22_000)]
    assert alloc._extents_of(0) == [(0, 1_958)]  # the lowest buffer never moved
    assert s.free_extent_count == 100 - 19 + 1  # 800 slots left in the opened gap


def test_moved_tokens_count_held_tokens_not_reserved_slots() -> None:
    alloc = _build(1_000, extra=150)
    for rid in range(5):  # five 200-slot buffers holding 50 tokens each
        assert alloc.allocate(rid, 50) is not None
    alloc.free(0)
    alloc.free(2)
    got = alloc.allocate(9, 250)  # 400 slots; two 200-slot holes: compaction needed
    assert got is not None and got.moved_tokens == 50  # only request 1 slid down
    assert alloc.stats().largest_free_extent_tokens == 0


def test_a_capacity_failure_moves_nothing() -> None:
    alloc = _build(1_000)
    checkerboard(alloc, holes=5, hole=100, live=100)
    assert alloc.allocate(99, 501) is None
    failure = alloc.last_failure()
    assert failure is not None and failure.cause == "capacity"
    assert alloc.stats().moved_tokens_total == 0 and alloc.compaction_count == 0


def test_growth_that_fails_for_fragmentation_compacts_too() -> None:
    alloc = _build(1_000, fit="first_fit")
    checkerboard(alloc, holes=5, hole=100, live=100)  # 500 free in five holes
    assert alloc.extend(0, 150)  # request 0 needs 250 slots beside its old 100
    assert alloc.reserved_tokens(0) == 250 and alloc.held_tokens(0) == 250
    s = alloc.stats()
    assert s.moved_tokens_total > 0 and s.copied_tokens_total == 100
    assert s.free_tokens == 1_000 - 4 * 100 - 250
