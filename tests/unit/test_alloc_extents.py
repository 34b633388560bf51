"""The free-extent index: which extent each fit picks, coalescing, and the sorted-int
multiset underneath."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.allocators.extents import FITS, FreeExtentIndex, SortedInts


def _holes(fit: str) -> FreeExtentIndex:
    """A 1,000-slot pool whose free extents are [0,100) [200,250) [400,700) [800,860)
    (the rest is taken)."""
    index = FreeExtentIndex(1000, fit)  # type: ignore[arg-type]
    assert index.take(1000) == 0
    for start, size in [(0, 100), (200, 50), (400, 300), (800, 60)]:
        index.give(start, size)
    return index


@pytest.mark.parametrize(
    ("fit", "expected_start"),
    [("first_fit", 0), ("best_fit", 800), ("worst_fit", 400), ("next_fit", 0)],
)
def test_each_fit_picks_its_extent_for_a_55_slot_request(fit: str, expected_start: int) -> None:
    index = _holes(fit)
    assert index.take(55) == expected_start
    assert index.free_tokens == 510 - 55
    assert index.extent_count() == 4  # carved from the front, the rest stays free


def test_next_fit_roves_past_the_last_placement_and_wraps() -> None:
    index = _holes("next_fit")
    assert index.take(40) == 0
    assert index.take(40) == 40  # continues in the same extent
    assert index.take(40) == 200  # the rover passed [80, 100)
    assert index.take(250) == 400
    assert index.take(60) == 800
    assert index.take(20) == 80  # nothing fits after the rover: wraps to the lowest


def test_best_fit_breaks_size_ties_by_lowest_address() -> None:
    index = FreeExtentIndex(100, "best_fit")
    index.take(100)
    index.give(60, 10)
    index.give(20, 10)
    assert index.take(10) == 20


def test_freeing_between_two_free_extents_merges_all_three() -> None:
    index = _holes("best_fit")
    index.give(100, 100)  # joins [0,100) and [200,250)
    assert index.extents() == [(0, 250), (400, 300), (800, 60)]
    assert index.largest_tokens() == 300
    index.give(250, 150)
    index.give(700, 100)
    index.give(860, 140)
    assert index.extents() == [(0, 1000)]


def test_a_request_larger_than_every_extent_is_refused_without_change() -> None:
    for fit in FITS:
        index = _holes(fit)
        assert index.take(301) is None
        assert index.extents() == [(0, 100), (200, 50), (400, 300), (800, 60)]


def test_double_free_and_out_of_pool_ranges_raise() -> None:
    index = _holes("first_fit")
    with pytest.raises(ValueError, match="double free"):
        index.give(200, 10)
    with pytest.raises(ValueError, match="cannot free"):
        index.give(990, 20)


def test_first_fit_on_a_hundred_million_slot_pool_finds_the_lowest_fitting_hole() -> None:
    index = FreeExtentIndex(100_000_000, "first_fit")
    for i in range(5_000):
        assert index.take(1_000) == i * 1_000
    for i in range(1, 5_000, 2):  # checkerboard: 2,500 one-thousand-slot holes
        index.give(i * 1_000, 1_000)
    index.give(4_000_000, 1_000)  # a 3,000-slot hole at 3,999,000
    assert index.extent_count() == 2_499
    assert index.take(1_000) == 1_000
    assert index.take(2_000) == 3_999_000
    assert index.take(1_000) == 3_000  # the lowest hole again
    assert index.take(1_001) == 4_999_000  # the last hole merged with the tail


def test_remove_extent_takes_a_whole_free_extent_out() -> None:
    index = _holes("first_fit")
    assert index.size_at(400) == 300 and index.size_at(401) is None
    assert index.remove_extent(400) == 300
    assert index.extents() == [(0, 100), (200, 50), (800, 60)]
    assert index.free_tokens == 210 and index.largest_tokens() == 100
    assert index.take(101) is None  # the address tree forgot the removed extent


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3_000)), max_size=300))
def test_sorted_ints_matches_a_sorted_set(ops: list[tuple[bool, int]]) -> None:
    ints, model = SortedInts(load=4), set[int]()
    for add, value in ops:
        if add and value not in model:
            ints.add(value)
            model.add(value)
        elif not add:
            got = ints.pop_ceiling(value)
            expected = min((v for v in model if v >= value), default=None)
            assert got == expected
            if expected is not None:
                model.discard(expected)
        assert list(ints) == sorted(model)
        assert ints.last() == (max(model) if model else None)
        assert len(ints) == len(model)


@pytest.mark.parametrize("fit", FITS)
@settings(max_examples=30, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.booleans(),
            st.one_of(st.integers(1, 40), st.integers(1, 3_000)),
            st.integers(0, 10**6),
        ),
        min_size=10,
        max_size=200,
    )
)
def test_fits_match_a_brute_force_model_with_many_extents_per_bucket(
    fit: str, ops: list[tuple[bool, int, int]]
) -> None:
    capacity = 1 << 20  # 128-slot address buckets: several extents share one
    index = FreeExtentIndex(capacity, fit)  # type: ignore[arg-type]
    taken: list[tuple[int, int]] = []
    rover = 0
    for take, size, pick in ops:
        if take or not taken:
            free = index.extents()
            fitting = [(s, n) for s, n in free if n >= size]
            got = index.take(size)
            if not fitting:
                assert got is None
                continue
            if fit == "first_fit":
                assert got == fitting[0][0]
            elif fit == "next_fit":
                after = [(s, n) for s, n in fitting if s + n > rover]
                assert got == (after or fitting)[0][0]
            elif fit == "best_fit":
                assert got == min(fitting, key=lambda e: (e[1], e[0]))[0]
            else:
                assert got is not None and dict(free)[got] == max(n for _, n in fitting)
            assert got is not None
            rover = got + size
            taken.append((got, size))
        else:
            start, n = taken.pop(pick % len(taken))
            index.give(start, n)
    for start, n in taken:
        index.give(start, n)
    assert index.extents() == [(0, capacity)] and index.free_tokens == capacity


def test_first_fit_scans_a_shared_bucket_in_address_order() -> None:
    index = FreeExtentIndex(1 << 20, "first_fit")  # 128-slot address buckets
    starts = [index.take(10) for _ in range(40)]  # [0, 400) in 10-slot blocks
    assert starts == list(range(0, 400, 10))
    for start in (200, 220, 240):  # three holes ending in bucket 1 ([128, 256))
        index.give(start, 10)
    assert index.take(10) == 200
    assert index.take(10) == 220
    assert index.take(10) == 240
