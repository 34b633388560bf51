"""last_true: the binary search every "how many steps fit" question shares, held to a
linear scan."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from sim.latency.search import last_true, last_true_between


@given(st.integers(-50, 50), st.integers(0, 200), st.integers(-60, 300))
def test_the_last_x_that_fits(lo: int, width: int, threshold: int) -> None:
    hi = lo + width
    calls: list[int] = []

    def fits(x: int) -> bool:
        calls.append(x)
        return x <= threshold

    # fits(lo) is assumed: the answer is lo whenever nothing above it fits
    expected = max([lo, *(x for x in range(lo, hi + 1) if fits(x))])
    calls.clear()
    assert last_true(lo, hi, fits) == expected
    assert lo not in calls or lo == hi  # lo is never evaluated (unless it is hi)
    assert calls[0] == hi  # the whole range first
    assert len(calls) <= 1 + max(1, math.ceil(math.log2(max(width, 1))))


def test_an_empty_or_reversed_range() -> None:
    assert last_true(5, 5, lambda x: True) == 5
    assert last_true(5, 5, lambda x: False) == 5
    assert last_true(0, -3, lambda x: True) == -3  # hi fits: hi
    assert last_true(0, -3, lambda x: False) == 0  # else lo


def test_between_a_known_bracket_evaluates_neither_end() -> None:
    seen: list[int] = []

    def fits(x: int) -> bool:
        seen.append(x)
        return x <= 37

    assert last_true_between(10, 100, fits) == 37
    assert 10 not in seen and 100 not in seen
    assert last_true_between(10, 11, fits) == 10 and seen[-1] != 11
