"""``sim.metrics.frame`` builds the same DataFrame ``pd.DataFrame.from_records`` would
(values, dtypes, column order), on hand-made rows and on a real run's recorder rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sim.build import engine_build
from sim.engine.recorder import EVENT_COLUMNS, SAMPLE_COLUMNS, Recorder
from sim.results.frames import REQUEST_COLUMNS, frame, request_frame
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload


def same_as_from_records(rows: list[tuple[object, ...]], columns: tuple[str, ...]) -> None:
    want = pd.DataFrame.from_records(rows, columns=list(columns))
    got = frame(rows, columns)
    assert list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [(1, 0.5, "ok", True)],
        [(1, 0.5, "ok", True), (2, math.nan, "rejected-capacity", False)],
        [(1, 2, "a", None), (3, 4.5, None, None)],  # int+float; str+None; all None
        [(1 << 40, -0.0, "x", 1.0), (-(1 << 40), math.inf, "y", None)],  # float+None
        [(True, 1, "b", 7), (False, 2, "c", 8)],
        [(True, 1.5, (1, 2), 1 << 70), (2, False, (3,), 5)],  # bool+number; uneven; huge
    ],
)
def test_hand_made_rows(rows: list[tuple[object, ...]]) -> None:
    same_as_from_records(rows, ("a", "b", "c", "d"))


@pytest.mark.skipif(
    engine_build() != "pure", reason="patches Recorder.frames (compiled classes cannot be)"
)
def test_a_real_runs_rows() -> None:
    scenario = parse_scenario(
        {
            "name": "frame-check",
            "workload": {
                "preset": "bimodal",
                "synth": {"duration_s": 600, "arrival": {"kind": "poisson", "rate_per_s": 2}},
            },
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "kv_capacity_tokens": 60_000},
            "allocator": {"kind": "best_fit"},
            "restart": {"every_s": 200, "mode": "kill", "downtime_s": 5},
            "metrics": {"sample_interval_s": 10},
        }
    )
    captured: list[Recorder] = []
    original = Recorder.frames

    def keep(self: Recorder) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        captured.append(self)
        return original(self)

    Recorder.frames = keep  # type: ignore[method-assign]
    try:
        run(scenario, load_workload(scenario))
    finally:
        Recorder.frames = original  # type: ignore[method-assign]
    (recorder,) = captured
    assert recorder.done and recorder.samples and recorder.events
    rows = [
        (
            g.request_id,
            replica,
            g.arrival_s,
            g.prompt_tokens,
            g.output_tokens,
            g.num_seqs,
            g.admit_s,
            g.first_token_s,
            g.finish_s,
            g.status,
            g.preemptions,
            g.retries,
            g.peak_reserved_tokens,
            g.cached_tokens,
        )
        for g, replica in zip(recorder.done, recorder.done_replicas, strict=True)
    ]
    want = pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))
    want = want.sort_values("request_id", kind="stable").reset_index(drop=True)
    got = request_frame(recorder.done, recorder.done_replicas)
    assert list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    same_as_from_records(recorder.samples, SAMPLE_COLUMNS)
    same_as_from_records(recorder.events, EVENT_COLUMNS)
