"""UniqueIds agrees with a plain set on random id streams cut into random chunks: it
raises exactly when an id repeats, naming the first repeating row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traces
from traces.ids import UniqueIds
from traces.validate import ReadContext


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(
        st.one_of(
            st.integers(-5, 40),
            st.sampled_from([-(2**63), -(2**63) + 1, 2**63 - 2, 2**63 - 1]),
            st.integers(-(2**63), 2**63 - 1),
        ),
        min_size=1,
        max_size=60,
    ),
    chunk=st.integers(1, 20),
)
def test_matches_a_set(ids: list[int], chunk: int) -> None:
    first_repeat = None
    seen_set: set[int] = set()
    for i, v in enumerate(ids):
        if v in seen_set:
            first_repeat = i
            break
        seen_set.add(v)
    arr = np.array(ids, dtype=np.int64)
    seen = UniqueIds()
    ctx = ReadContext(Path("p.csv"), 2)
    try:
        for start in range(0, len(arr), chunk):
            ctx.row_offset = start
            seen.add(ctx, arr[start : start + chunk])
    except traces.TraceError as err:
        assert first_repeat is not None
        # the first repeat lies in the chunk that raised; within it, the first row
        # that repeats an earlier one (in this chunk or before) is named
        assert err.row == first_repeat and err.got == ids[first_repeat]
        return
    assert first_repeat is None
    assert np.all(seen.starts[1:] - 1 > seen.ends[:-1])  # disjoint, non-adjacent runs
    covered = sum(int(e - s + 1) for s, e in zip(seen.starts, seen.ends, strict=True))
    assert covered == len(set(ids))


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_chunks(n: int) -> None:
    seen = UniqueIds()
    seen.add(ReadContext(None, None), np.arange(n))
    assert len(seen.starts) == n
