"""Transform invariants over random traces: ids stay unique, rows are conserved or
subset, arrivals stay sorted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import transform
from traces.table import to_frame
from traces.validate import assemble


@st.composite
def traces_(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(min_value=1, max_value=30))
    ids = draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n, unique=True))
    arrival = sorted(draw(st.lists(st.floats(0, 100, allow_nan=False), min_size=n, max_size=n)))
    hashes = draw(st.lists(st.lists(st.integers(-50, 50), max_size=4), min_size=n, max_size=n))
    sessions = draw(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=n, max_size=n))
    cols = {
        "request_id": np.array(ids, dtype=np.int64),
        "arrival_s": np.array(arrival),
        "prompt_tokens": np.full(n, 64, dtype=np.int64),
        "output_tokens": np.ones(n, dtype=np.int64),
        "prefix_hashes": pa.array(hashes, pa.list_(pa.int64())),
        "prefix_block_tokens": np.full(n, 16, dtype=np.int64),
        "session_id": pa.array(sessions, pa.int64()),
    }
    return to_frame(assemble(cols, n))


def _hash_sets(df: pd.DataFrame) -> set[int]:
    return {int(h) for hs in df["prefix_hashes"] for h in hs}


@settings(max_examples=40, deadline=None)
@given(a=traces_(), b=traces_())
def test_merge_conserves_rows_and_separates_ids(a: pd.DataFrame, b: pd.DataFrame) -> None:
    merged = transform.merge(a, b)
    assert len(merged) == len(a) + len(b)
    assert merged["request_id"].is_unique
    assert merged["arrival_s"].is_monotonic_increasing
    assert len(_hash_sets(merged)) == len(_hash_sets(a)) + len(_hash_sets(b))


@settings(max_examples=40, deadline=None)
@given(df=traces_(), copies=st.integers(1, 4))
def test_tile_makes_disjoint_copies(df: pd.DataFrame, copies: int) -> None:
    period = float(df["arrival_s"].max() - df["arrival_s"].min()) + 1.0
    tiled = transform.tile(df, copies * period, period_s=period)
    assert len(tiled) == copies * len(df)
    assert tiled["request_id"].is_unique and tiled["arrival_s"].is_monotonic_increasing
    assert len(_hash_sets(tiled)) == copies * len(_hash_sets(df))
    assert sorted(tiled["prompt_tokens"]) == sorted(list(df["prompt_tokens"]) * copies)


@settings(max_examples=40, deadline=None)
@given(df=traces_(), fraction=st.floats(0, 1), seed=st.integers(0, 10), lo=st.floats(0, 100))
def test_sample_and_window_are_subsets(
    df: pd.DataFrame, fraction: float, seed: int, lo: float
) -> None:
    ids = set(df["request_id"])
    assert set(transform.sample(df, fraction, seed)["request_id"]) <= ids
    win = transform.time_window(df, lo, lo + 10.0, rebase=False)
    assert set(win["request_id"]) <= ids
    assert win["arrival_s"].between(lo, lo + 10.0, inclusive="left").all()
