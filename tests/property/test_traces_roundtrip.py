"""Canonical write -> read is the identity, for CSV, JSONL and Parquet, hashes included."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traces
from traces.table import to_frame
from traces.validate import MAX_TOKENS, assemble

I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@st.composite
def canonical_frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(min_value=1, max_value=25))
    ids = draw(st.lists(I64, min_size=n, max_size=n, unique=True))
    arrival = sorted(
        draw(
            st.lists(
                st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_subnormal=False),
                min_size=n,
                max_size=n,
            )
        )
    )
    tokens = st.integers(min_value=0, max_value=MAX_TOKENS)
    hashes = draw(st.lists(st.lists(I64, max_size=6), min_size=n, max_size=n))
    block = [
        draw(st.integers(min_value=1, max_value=4096)) if h else draw(st.integers(0, 64))
        for h in hashes
    ]
    # a prompt has >= 1 token, and at least one token in each block it has a hash for
    prompt = [
        max(draw(st.integers(min_value=1, max_value=MAX_TOKENS)), (len(h) - 1) * b + 1)
        for h, b in zip(hashes, block, strict=True)
    ]
    sessions = draw(st.lists(st.one_of(st.none(), I64), min_size=n, max_size=n))
    cols = {
        "request_id": np.array(ids, dtype=np.int64),
        "arrival_s": np.array(arrival, dtype=np.float64),
        "prompt_tokens": np.array(prompt, dtype=np.int64),
        "output_tokens": np.array(draw(st.lists(tokens, min_size=n, max_size=n)), dtype=np.int64),
        "prefix_hashes": pa.array(hashes, pa.list_(pa.int64())),
        "prefix_block_tokens": np.array(block, dtype=np.int64),
        "num_samples": np.array(
            draw(st.lists(st.integers(1, 64), min_size=n, max_size=n)), dtype=np.int64
        ),
        "beam_width": np.array(
            draw(st.lists(st.integers(1, 64), min_size=n, max_size=n)), dtype=np.int64
        ),
        "session_id": pa.array(sessions, pa.int64()),
    }
    return to_frame(assemble(cols, n))


@settings(max_examples=40, deadline=None)
@given(df=canonical_frames(), ext=st.sampled_from([".csv", ".jsonl", ".parquet"]))
def test_write_then_load_is_identity(df: pd.DataFrame, ext: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trace{ext}"
        assert traces.write(df, path) == len(df)
        back = traces.load(path)
        pd.testing.assert_frame_equal(back, df)
        assert traces.detect_format(path).name == "canonical"
        assert [p.name for p in Path(tmp).iterdir()] == [path.name]  # no temp files left


@settings(max_examples=15, deadline=None)
@given(df=canonical_frames(), chunk_rows=st.integers(min_value=1, max_value=7))
def test_streamed_convert_equals_whole(df: pd.DataFrame, chunk_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "a.parquet", Path(tmp) / "b.csv"
        traces.write(df, src)
        traces.convert(src, dst, chunk_rows=chunk_rows)
        pd.testing.assert_frame_equal(traces.load(dst), df)
        chunks = list(traces.iter_chunks(dst, chunk_rows=chunk_rows))
        _assert_same_summary(traces.describe(chunks), traces.describe(df))


def _assert_same_summary(a: dict, b: dict) -> None:  # type: ignore[type-arg]
    """Equal, up to float summation order (chunks sum hit fractions in another order)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], rel=1e-12)
        else:
            assert a[key] == b[key]
