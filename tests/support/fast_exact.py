"""Comparing a scenario's fast-mode and exact-mode runs on their full outputs (shared by
the property tests and the real-trace tests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import note

from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario


def run_mode(data: dict[str, Any], df: pd.DataFrame, mode: str) -> RunResult:
    return run(parse_scenario({**data, "mode": mode}), df)


def assert_frames_match(name: str, fast: pd.DataFrame, exact: pd.DataFrame) -> None:
    """Same shape and columns; floats to 1e-9 (NaN = NaN), everything else exactly."""
    assert list(fast.columns) == list(exact.columns), name
    assert len(fast) == len(exact), f"{name}: {len(fast)} rows fast, {len(exact)} exact"
    for col in fast.columns:
        f, e = fast[col], exact[col]
        if pd.api.types.is_float_dtype(f) or pd.api.types.is_float_dtype(e):
            np.testing.assert_allclose(
                f.to_numpy(dtype=float),
                e.to_numpy(dtype=float),
                rtol=1e-9,
                atol=1e-9,
                equal_nan=True,
                err_msg=f"{name}.{col}",
            )
        else:
            bad = np.flatnonzero(f.to_numpy() != e.to_numpy())
            assert bad.size == 0, (
                f"{name}.{col} differs at rows {bad[:5].tolist()}: "
                f"fast {f.iloc[bad[:5]].tolist()} exact {e.iloc[bad[:5]].tolist()}"
            )


def assert_modes_agree(
    data: dict[str, Any], df: pd.DataFrame, *, in_hypothesis: bool = True
) -> None:
    if in_hypothesis:
        note(f"scenario: {data!r}")
        note(f"trace:\n{df.to_dict(orient='list')!r}")
    fast, exact = run_mode(data, df, "fast"), run_mode(data, df, "exact")
    assert_frames_match("requests", fast.requests, exact.requests)
    assert_frames_match("events", fast.events, exact.events)
    assert_frames_match("timeseries", fast.timeseries, exact.timeseries)
    # The summary too, but for the engine's own counters (steps taken one by one, ...).
    f_summary = fast.summary.to_json_dict() | {"engine": fast.summary.engine.end_s}
    e_summary = exact.summary.to_json_dict() | {"engine": exact.summary.engine.end_s}
    assert_same_values("summary", f_summary, e_summary)


def assert_same_values(path: str, fast: Any, exact: Any) -> None:
    """Nested dicts/lists equal, floats to 1e-9 (NaN = NaN)."""
    if isinstance(exact, dict):
        assert isinstance(fast, dict) and set(fast) == set(exact), path
        for k in exact:
            assert_same_values(f"{path}.{k}", fast[k], exact[k])
    elif isinstance(exact, list | tuple):
        assert isinstance(fast, list | tuple) and len(fast) == len(exact), path
        for i, (f, e) in enumerate(zip(fast, exact, strict=True)):
            assert_same_values(f"{path}[{i}]", f, e)
    elif isinstance(exact, float) or isinstance(fast, float):
        assert fast == pytest.approx(exact, rel=1e-9, abs=1e-9, nan_ok=True), path
    else:
        assert fast == exact, path
