"""Bounded work: absurd sizes are refused with the number and the field before any
work proportional to them (traces.bounds), in synthetic specs, transforms and the CLI."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import traces
from sim.cli import app
from traces import bounds, transform
from traces.synth import PRESETS, SynthSpec, generate

CHAT = {
    "kind": "pair",
    "prompt": {"kind": "fixed", "tokens": 10},
    "output": {"kind": "fixed", "tokens": 5},
}


def _refused(data: dict[str, object], field: str, words: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ValidationError) as info:
        SynthSpec.model_validate(data)
    assert time.perf_counter() - start < 1.0
    (error,) = info.value.errors()
    assert error["loc"] == (field,) and words in error["msg"], error


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"num_requests": 1_000_000_000}, "num_requests", "less than or equal to 50000000"),
        (
            {"duration_s": 1e8, "arrival": {"kind": "poisson", "rate_per_s": 1e6}},
            "duration_s",
            "MAX_REQUESTS",
        ),
        (
            {"num_requests": 10, "arrival": {"kind": "poisson", "rate_per_s": 1e-300}},
            "num_requests",
            "MAX_ARRIVAL_S",
        ),
        (
            {
                "duration_s": 1e6,
                "arrival": {"kind": "diurnal", "rate_curve_per_s": [1.0] * 100, "period_s": 1.0},
            },
            "duration_s",
            "MAX_RATE_PERIODS",
        ),
        (
            {
                "num_requests": 1000,
                "arrival": {
                    "kind": "bursty",
                    "on_rate_per_s": 1,
                    "mean_on_s": 1e-6,
                    "mean_off_s": 1e-6,
                },
            },
            "num_requests",
            "MAX_RATE_PERIODS",
        ),
    ],
)
def test_absurd_synthetic_workloads_are_refused_up_front(
    data: dict[str, object], field: str, words: str
) -> None:
    spec: dict[str, object] = {"arrival": {"kind": "poisson", "rate_per_s": 1.0}, "lengths": CHAT}
    _refused({**spec, **data}, field, words)


def test_presets_are_within_bounds() -> None:
    for spec in PRESETS.values():
        SynthSpec.model_validate(spec.model_dump())


def test_synth_cli_refuses_a_billion_requests(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    start = time.perf_counter()
    result = CliRunner().invoke(
        app, ["trace", "synth", "bimodal", "-o", str(out), "--num-requests", "1000000000"]
    )
    assert time.perf_counter() - start < 10 and result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: bimodal with --num-requests: field num_requests: got 1000000000")
    result = CliRunner().invoke(
        app, ["trace", "synth", "chat", "-o", str(out), "--rate", "1000000", "--duration-s", "1e8"]
    )
    (line,) = result.stderr.splitlines()
    assert result.exit_code == 2 and "field duration_s" in line and "50,000,000" in line
    assert not out.exists()


def _frame(last_s: float = 10.0, n: int = 3) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": range(n),
            "arrival_s": [last_s * i / max(n - 1, 1) for i in range(n)],
            "prompt_tokens": [4] * n,
            "output_tokens": [1] * n,
        }
    )


@pytest.mark.parametrize("factor", [1e-300, 0.0, -1.0, float("inf"), float("nan")])
def test_rate_scale_is_bounded(factor: float) -> None:
    with pytest.raises(bounds.BoundError) as info:
        transform.rescale_rate(_frame(), factor)
    assert info.value.field == "factor"


def test_tile_to_an_absurd_duration_is_refused_before_copying() -> None:
    start = time.perf_counter()
    for duration_s in (1e12, 1e9, float("inf")):
        with pytest.raises(ValueError) as info:
            transform.tile(_frame(), duration_s)
        assert "duration_s" in str(info.value)
    big = _frame(3600.0, 10_000)
    with pytest.raises(bounds.BoundError, match="MAX_REQUESTS"):
        transform.tile(big, 1e8)  # 27,800 copies of 10,000 rows
    assert time.perf_counter() - start < 5
    assert len(transform.tile(_frame(), 100.0)) == 20  # a sane tiling still works: 0, 5, ..., 95


def test_arrivals_past_the_bound_are_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "far.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,4,1\n1e300,4,1\n")
    with pytest.raises(traces.TraceError, match="arrival too late"):
        traces.load(path)


def test_slow_arrival_process_for_a_length_file_is_refused(tmp_path: Path) -> None:
    from traces.arrivals import PoissonArrival

    path = tmp_path / "len.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n4,1\n5,2\n")
    with pytest.raises(traces.TraceError, match="MAX_ARRIVAL_S"):
        traces.load(path, arrivals=PoissonArrival(rate_per_s=1e-12))


def test_negative_seed_is_refused_by_generate_and_loaders(tmp_path: Path) -> None:
    from traces.arrivals import PoissonArrival

    with pytest.raises(ValueError, match="seed"):
        generate(PRESETS["bimodal"], seed=-1)
    path = tmp_path / "len.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n4,1\n")
    with pytest.raises(traces.TraceError, match="seed"):
        traces.load(path, arrivals=PoissonArrival(rate_per_s=1.0), seed=-1)
