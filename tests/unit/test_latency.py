"""Latency models: roofline sanity, scalar == vector, linear forms, decode runs and the
calibrated JSON format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from support.latency import ForeignLatency

from sim.latency.base import OutOfRange, bisect_steps_within_s
from sim.latency.config import (
    CalibratedLatencyConfig,
    ConstantLatencyConfig,
    LatencyConfig,
    RooflineLatencyConfig,
)
from sim.latency.models import (
    LATENCY_FORMAT,
    CalibratedLatency,
    ConstantLatency,
    LatencyModel,
    RooflineLatency,
    fit_calibrated_latency,
)
from sim.models.hardware import GPUS, MODELS

LLAMA7, A100 = MODELS["llama-2-7b"], GPUS["a100-80gb"]


def _document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": LATENCY_FORMAT,
        "model": "llama-2-7b",
        "gpu": "a100-80gb",
        "coefficients": {
            "intercept_s": 7e-3,
            "per_prefill_token_s": 6e-5,
            "per_decode_seq_s": 4e-5,
            "per_kv_token_s": 3e-8,
            "per_prefill_token_sq_s": 1e-10,
        },
        "valid": {"prefill_tokens": [0, 8192], "decode_seqs": [0, 256], "kv_tokens": [0, 200_000]},
        "fit": {"r2": 0.998, "mape": 0.02, "samples": 5000},
    }
    doc.update(changes)
    return doc


def _models() -> list[LatencyModel]:
    return [
        ConstantLatency(0.01),
        RooflineLatency(LLAMA7, A100),
        RooflineLatency(MODELS["llama-3-70b"], GPUS["h100-80gb"], tp=4),
        CalibratedLatency.from_dict(_document()),
    ]


def test_roofline_decode_step_of_llama2_7b_on_a100_is_memory_bound() -> None:
    # 13.5 GB of weights / 2.0 TB/s / 0.8 + 0.5 ms
    step_s = RooflineLatency(LLAMA7, A100).step_time_s(0, 1, 100)
    assert 7e-3 <= step_s <= 10e-3


def test_roofline_prefill_is_compute_bound() -> None:
    model = RooflineLatency(LLAMA7, A100, compute_efficiency=0.5, overhead_s=0.0)
    expected_s = 2 * LLAMA7.num_params * 4096 / (312e12 * 0.5)
    assert model.step_time_s(4096, 0, 4096) == pytest.approx(expected_s)


def test_roofline_tensor_parallel_adds_communication_only_when_tp_above_one() -> None:
    llama70, h100 = MODELS["llama-2-70b"], GPUS["h100-80gb"]
    assert RooflineLatency(llama70, h100, 1).comm_per_token_s == 0.0
    tp4 = RooflineLatency(llama70, h100, 4, overhead_s=0.0)
    assert tp4.comm_per_token_s > 0
    assert tp4.fixed_s == pytest.approx(2 * 80 * 10e-6)
    assert tp4.linear_decode_coefficients() is None


steps = st.integers(0, 100_000)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 16_384), st.integers(0, 512), st.integers(0, 2_000_000)),
        min_size=1,
        max_size=30,
    )
)
def test_vectorised_equals_scalar_exactly(points: list[tuple[int, int, int]]) -> None:
    prefill, decode, kv = (np.array(column, dtype=np.int64) for column in zip(*points, strict=True))
    for model in _models():
        vector = model.step_times_s(prefill, decode, kv)
        assert vector.dtype == np.float64
        scalar = [model.step_time_s(p, d, k) for p, d, k in points]
        assert vector.tolist() == scalar, type(model).__name__


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 512), st.integers(0, 2_000_000))
def test_linear_coefficients_agree_with_step_time(decode: int, kv: int) -> None:
    for model in _models():
        coefficients = model.linear_decode_coefficients()
        if coefficients is None:
            assert isinstance(model, RooflineLatency)
            continue
        a, b, c = coefficients
        assert model.step_time_s(0, decode, kv) == a + b * decode + c * kv


_Foreign = ForeignLatency  # a model giving only the step methods (tests/support)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 400), st.integers(0, 300_000), st.integers(0, 3000))
def test_decode_run_equals_the_step_by_step_sum(decode: int, kv_start: int, n: int) -> None:
    for model in [*_models(), _Foreign(RooflineLatency(LLAMA7, A100))]:
        total = sum(model.step_time_s(0, decode, kv_start + i * decode) for i in range(n))
        assert model.decode_run_s(decode, kv_start, n) == pytest.approx(total, rel=1e-10, abs=1e-12)


def test_roofline_decode_run_crossing_from_compute_to_memory_bound() -> None:
    # a big batch starts compute-bound and becomes memory-bound as KV grows
    model = RooflineLatency(LLAMA7, A100)
    first = model.step_time_s(0, 400, 0)
    last = model.step_time_s(0, 400, 400 * 2000)
    assert model.compute_per_token_s * 400 > model.memory_fixed_s
    assert last > first
    total = sum(model.step_time_s(0, 400, 400 * i) for i in range(2001))
    assert model.decode_run_s(400, 0, 2001) == pytest.approx(total, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 100_000), st.floats(0, 30.0))
def test_decode_steps_within_budget(decode: int, kv_start: int, budget_s: float) -> None:
    calibrated = CalibratedLatency.from_dict(_document())
    foreign = [_Foreign(RooflineLatency(LLAMA7, A100)), _Foreign(calibrated, linear=True)]
    for model in [*_models(), *foreign]:
        k = model.steps_within_s(decode, kv_start, budget_s, 5000)
        assert k == bisect_steps_within_s(model, decode, kv_start, budget_s, 5000)
        assert model.decode_run_s(decode, kv_start, k) <= budget_s
        if k < 5000:
            assert model.decode_run_s(decode, kv_start, k + 1) > budget_s
        assert model.steps_within_s(decode, kv_start, -1.0, 5000) == 0
        assert model.decode_run_s(decode, kv_start, 0) == 0.0
        assert model.decode_run_s(decode, kv_start, -3) == 0.0


def test_constant_latency() -> None:
    model = ConstantLatency(0.02)
    assert model.step_time_s(100, 3, 10) == 0.02
    assert model.step_times_s(np.zeros(3), np.ones(3), np.ones(3)).tolist() == [0.02] * 3
    assert model.linear_decode_coefficients() == (0.02, 0.0, 0.0)
    with pytest.raises(ValueError):
        ConstantLatency(0.0)


def test_calibrated_json_round_trip(tmp_path: Path) -> None:
    model = CalibratedLatency.from_dict(_document(source={"device": "A100-SXM4-80GB"}))
    path = tmp_path / "latency.json"
    model.to_json(path)
    again = CalibratedLatency.from_json(path)
    assert again.calibration == model.calibration
    assert json.loads(path.read_text())["format"] == "fragsim-latency/1"
    assert again.step_time_s(512, 8, 4000) == model.step_time_s(512, 8, 4000)


def _counter(model: CalibratedLatency) -> OutOfRange:
    counter = OutOfRange.for_model(model)
    assert counter is not None
    return counter


def test_calibrated_out_of_range_is_answered_and_counted_by_the_run() -> None:
    model = CalibratedLatency.from_dict(_document())
    counted = _counter(model)
    counted.note_step(100, 10, 1000)
    assert counted.steps == 0 and counted.first is None
    assert model.step_time_s(100, 300, 1000) > 0  # decode_seqs above 256: extrapolated
    counted.note_step(100, 300, 1000)
    assert counted.steps == 1 and counted.first == (100, 300, 1000)
    counted.note_step(9000, 1, 5)
    assert counted.steps == 2 and counted.first == (100, 300, 1000)  # the first one stays


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(0, 250_000), st.integers(0, 400))
def test_a_decode_run_counts_out_of_range_like_stepping(decode: int, kv: int, n: int) -> None:
    model = CalibratedLatency.from_dict(_document())
    stepped, run = _counter(model), _counter(model)
    for i in range(n):
        stepped.note_step(0, decode, kv + i * decode)
    run.note_run(decode, kv, n)
    assert (run.steps, run.first) == (stepped.steps, stepped.first)


def _state(model: object) -> dict[str, object]:
    """A model's attributes (a compiled class has slots, not ``__dict__``)."""
    if hasattr(model, "__dict__"):
        return dict(vars(model))
    names = [n for n in dir(model) if not n.startswith("__")]
    return {n: v for n in names if not callable(v := getattr(model, n))}


def test_only_a_model_with_a_validity_range_is_counted_and_no_model_keeps_state() -> None:
    """A model is pure: evaluating it changes nothing on it (one model serves every
    replica of a pool and every run); only a calibrated one has a range to count."""
    for model in [*_models(), _Foreign(RooflineLatency(LLAMA7, A100))]:
        before = _state(model)
        model.step_time_s(9000, 300, 10**9)
        model.decode_run_s(300, 10**9, 50)
        model.steps_within_s(300, 10**9, 1.0, 50)
        assert _state(model) == before
        counts = isinstance(model, CalibratedLatency)
        assert (OutOfRange.for_model(model) is not None) is counts


def test_a_run_of_no_steps_notes_nothing() -> None:
    counted = _counter(CalibratedLatency.from_dict(_document()))
    for steps in (0, -2):
        counted.note_run(10_000, 10**9, steps)  # out of range, but no step ran
    assert counted.steps == 0 and counted.first is None


def test_bad_calibration_files_name_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json.*cannot read"):
        CalibratedLatency.from_json(path)
    with pytest.raises(ValueError, match="cannot read"):
        CalibratedLatency.from_json(tmp_path / "missing.json")
    cases = [
        (_document(format="fragsim-latency/9"), "field format"),
        ({k: v for k, v in _document().items() if k != "coefficients"}, "field coefficients"),
        (_document(coefficients={"intercept_s": 1.0}), "field coefficients.per_prefill"),
        (
            _document(valid={"prefill_tokens": [5, 1], "decode_seqs": [0, 1], "kv_tokens": [0, 1]}),
            "lo 5 > hi 1",
        ),
        (_document(extra_field=1), "field extra_field"),
    ]
    for document, message in cases:
        path.write_text(json.dumps(document))
        with pytest.raises(ValueError, match=message) as info:
            CalibratedLatency.from_json(path)
        assert str(path) in str(info.value)


def test_fit_recovers_linear_coefficients() -> None:
    rng = np.random.default_rng(7)
    prefill = rng.integers(0, 4096, 400)
    decode = rng.integers(0, 256, 400)
    kv = rng.integers(0, 100_000, 400)
    measured = 5e-3 + 5e-5 * prefill + 3e-5 * decode + 2e-8 * kv
    model = fit_calibrated_latency(
        prefill, decode, kv, measured, model="llama-2-7b", gpu="a100-80gb"
    )
    c = model.calibration.coefficients
    assert c.intercept_s == pytest.approx(5e-3, rel=1e-6)
    assert c.per_kv_token_s == pytest.approx(2e-8, rel=1e-6)
    assert c.per_prefill_token_sq_s == 0.0
    assert model.calibration.fit is not None and model.calibration.fit.r2 == pytest.approx(1.0)
    assert model.calibration.valid.decode_seqs == (int(decode.min()), int(decode.max()))


def _noisy_steps(seed: int) -> tuple[npt.NDArray[Any], ...]:
    """Step times of 7 ms + 60 us a prefill token + 40 us a decoding sequence, and no
    cost per KV token, with 2 ms of Gaussian noise: (prefill, decode, kv, measured)."""
    rng = np.random.default_rng(seed)
    prefill = rng.integers(0, 2048, 200)
    decode = rng.integers(1, 256, 200)
    kv = rng.integers(0, 200_000, 200)
    measured = 7e-3 + 6e-5 * prefill + 4e-5 * decode + rng.normal(0, 2e-3, 200)
    return prefill, decode, kv, measured


def _least_squares(prefill: Any, decode: Any, kv: Any, measured: Any) -> npt.NDArray[Any]:
    design = np.column_stack([np.ones(len(measured)), prefill, decode, kv]).astype(np.float64)
    return np.linalg.lstsq(design, measured, rcond=None)[0]


def test_a_noisy_fit_has_no_negative_coefficient_and_loads(tmp_path: Path) -> None:
    """Plain least squares gives this data a per-KV-token cost below 0, which a
    calibration file may not hold; the fit is non-negative, so its file loads."""
    prefill, decode, kv, measured = _noisy_steps(seed=0)
    assert _least_squares(prefill, decode, kv, measured)[3] < 0  # what nnls is for
    model = fit_calibrated_latency(
        prefill, decode, kv, measured, model="llama-2-7b", gpu="a100-80gb"
    )
    c = model.calibration.coefficients
    assert all(value >= 0 for _, value in c)
    assert c.per_kv_token_s == 0.0
    assert c.per_prefill_token_s == pytest.approx(6e-5, rel=0.01)
    assert c.per_decode_seq_s == pytest.approx(4e-5, rel=0.05)
    fit = model.calibration.fit
    assert fit is not None and fit.r2 > 0.99 and fit.samples == 200
    path = tmp_path / "fit.json"
    model.to_json(path)
    loaded = CalibratedLatency.from_json(path)
    assert loaded.calibration == model.calibration


def test_a_fit_without_negative_coefficients_is_least_squares() -> None:
    """Where plain least squares already gives every coefficient >= 0, the
    non-negative fit is the same solution."""
    prefill, decode, kv, measured = _noisy_steps(seed=1)
    expected = _least_squares(prefill, decode, kv, measured)
    assert min(expected) > 0
    model = fit_calibrated_latency(
        prefill, decode, kv, measured, model="llama-2-7b", gpu="a100-80gb"
    )
    c = model.calibration.coefficients
    got = [c.intercept_s, c.per_prefill_token_s, c.per_decode_seq_s, c.per_kv_token_s]
    assert got == pytest.approx(expected.tolist(), rel=1e-9)


def test_latency_config_dispatches_on_kind(tmp_path: Path) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(LatencyConfig)
    assert isinstance(adapter.validate_python({"kind": "roofline"}), RooflineLatencyConfig)
    constant = adapter.validate_python({"kind": "constant", "step_s": 0.01})
    assert isinstance(constant, ConstantLatencyConfig)
    assert isinstance(constant.build(LLAMA7, A100, 1), ConstantLatency)
    roofline = adapter.validate_python({"kind": "roofline", "overhead_s": 0.0})
    assert isinstance(roofline.build(LLAMA7, A100, 1), RooflineLatency)
    for bad in (
        {"kind": "magic"},
        {"kind": "constant"},
        {"kind": "roofline", "x": 1},
        {"kind": "roofline", "mem_efficiency": 1.5},
    ):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_document()))
    calibrated = adapter.validate_python({"kind": "calibrated", "path": str(path)})
    assert isinstance(calibrated, CalibratedLatencyConfig)
    assert isinstance(calibrated.build(LLAMA7, A100, 1), CalibratedLatency)
    with pytest.raises(ValueError, match="calibrated for llama-2-7b"):
        calibrated.build(MODELS["mistral-7b"], A100, 1)
    lenient = CalibratedLatencyConfig(path=path, check_hardware=False)
    assert isinstance(lenient.build(MODELS["mistral-7b"], A100, 1), CalibratedLatency)


def test_documented_calibration_example_is_valid() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "hardware-latency.md"
    text = page.read_text(encoding="utf-8")
    section = text[text.index("## Calibrated latency file") :]
    example = section.split("```json\n", 1)[1].split("```", 1)[0]
    model = CalibratedLatency.from_dict(json.loads(example), source=str(page))
    assert model.calibration.format == LATENCY_FORMAT
