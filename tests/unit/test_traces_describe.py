"""describe(): exact percentiles, prefix reuse on a hand-checked example, streaming."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import traces
from traces.table import to_frame
from traces.validate import assemble


def _frame(
    prompt: list[int], hashes: list[list[int]] | None = None, block: int = 4
) -> pd.DataFrame:
    n = len(prompt)
    cols: dict[str, object] = {
        "request_id": np.arange(n),
        "arrival_s": np.arange(n, dtype=float),
        "prompt_tokens": np.array(prompt),
        "output_tokens": np.ones(n, dtype=np.int64),
    }
    if hashes is not None:
        cols["prefix_hashes"] = pa.array(hashes, pa.list_(pa.int64()))
        cols["prefix_block_tokens"] = np.full(n, block)
    return to_frame(assemble(cols, n))


def test_percentiles_nearest_rank() -> None:
    s = traces.describe(_frame(list(range(1, 101))))
    p = s["prompt_tokens"]
    assert (p["p50"], p["p90"], p["p99"], p["min"], p["max"], p["mean"]) == (
        50,
        90,
        99,
        1,
        100,
        50.5,
    )
    assert s["rows"] == 100 and s["span_s"] == 99.0 and s["rate_per_s"] == pytest.approx(100 / 99)


def test_huge_token_counts_are_exact() -> None:
    s = traces.describe(_frame([5, 1 << 35, 7]))
    assert (s["prompt_tokens"]["max"], s["prompt_tokens"]["p50"]) == (1 << 35, 7)


def test_prefix_reuse_by_hand() -> None:
    # block 4: r0 [1,2,3] 10 tok: nothing seen; r1 [1,2,9] 12 tok: hits 8; r2 [1,5] 6 tok: hits 4;
    # r3 [2,3] 8 tok: 2 and 3 were seen (in r0) -> hits 8 (ids are compared as given).
    df = _frame([10, 12, 6, 8], [[1, 2, 3], [1, 2, 9], [1, 5], [2, 3]])
    s = traces.describe(df)
    assert s["prefix_hit_tokens"] == 20
    assert s["prefix_reuse_token_ratio"] == pytest.approx(20 / 36)
    assert s["prefix_hit_fraction_mean"] == pytest.approx((0 + 8 / 12 + 4 / 6 + 8 / 8) / 4)
    chunks = [df.iloc[i : i + 1] for i in range(4)]
    assert traces.describe(chunks)["prefix_hit_tokens"] == 20


def test_partial_last_block_caps_hit_at_prompt() -> None:
    s = traces.describe(_frame([5, 5], [[1, 2], [1, 2]]))
    assert s["prefix_hit_tokens"] == 5


def test_no_hashes_means_unknown_reuse() -> None:
    s = traces.describe(_frame([3, 4]))
    assert s["prefix_reuse_token_ratio"] is None and s["prefix_hit_fraction_mean"] is None
