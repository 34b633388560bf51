"""decode_steps_within_s: the O(1) inversion returns exactly the integer the binary search
over decode_run_s returns, for every model and input (compared with a verbatim copy of the
original binary search)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.hardware import GPUS, MODELS
from sim.latency.models import (  # the inversion's core, tested directly
    LATENCY_FORMAT,
    CalibratedLatency,
    ConstantLatency,
    LatencyModel,
    RooflineLatency,
    _constant_run_s,
    _linear_run_from_terms,
    _linear_run_s,
    _linear_run_terms,
    _roofline_run_s,
    _settle,
    decode_run_s,
    decode_steps_within_s,
    fit_calibrated_latency,
)


def reference_steps_within_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
) -> int:
    """The original implementation (binary search over the closed form), verbatim."""
    lo, hi = 0, max_steps
    if decode_run_s(model, decode_seqs, kv_tokens_start, hi, record=False) <= budget_s:
        return hi
    while hi - lo > 1:  # invariant: run(lo) <= budget_s < run(hi)
        mid = (lo + hi) // 2
        if decode_run_s(model, decode_seqs, kv_tokens_start, mid, record=False) <= budget_s:
            lo = mid
        else:
            hi = mid
    return lo


def _calibrated(**coefficients: float) -> CalibratedLatency:
    return CalibratedLatency.from_dict(
        {
            "format": LATENCY_FORMAT,
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "coefficients": {
                "intercept_s": 7e-3,
                "per_prefill_token_s": 6e-5,
                "per_decode_seq_s": 4e-5,
                "per_kv_token_s": 3e-8,
                **coefficients,
            },
            "valid": {"prefill_tokens": [0, 8192], "decode_seqs": [0, 256], "kv_tokens": [0, 1]},
        }
    )


def _fitted() -> CalibratedLatency:
    """A model fitted on roofline step times of a grid (as a calibration run would)."""
    truth = RooflineLatency(MODELS["llama-3-8b"], GPUS["h100-80gb"])
    rng = np.random.default_rng(7)
    prefill = rng.integers(0, 4096, 400)
    decode = rng.integers(1, 512, 400)
    kv = rng.integers(0, 2_000_000, 400)
    measured = truth.step_times_s(prefill, decode, kv)
    return fit_calibrated_latency(
        prefill, decode, kv, measured, model="llama-3-8b", gpu="h100-80gb"
    )


CALIBRATED = [
    _calibrated(),
    _calibrated(per_kv_token_s=0.0),  # growth 0: the run is linear in steps
    _calibrated(per_decode_seq_s=0.0, per_kv_token_s=0.0, intercept_s=1e-6),
    _calibrated(per_decode_seq_s=-2e-4),  # steps of negative time: binary search path
    _fitted(),
]


@st.composite
def rooflines(draw: st.DrawFn) -> RooflineLatency:
    return RooflineLatency(
        MODELS[draw(st.sampled_from(sorted(MODELS)))],
        GPUS[draw(st.sampled_from(sorted(GPUS)))],
        draw(st.sampled_from([1, 2, 4])),
        # low compute efficiency: big batches start compute-bound, so the prefix matters
        compute_efficiency=draw(st.sampled_from([0.6, 0.1, 0.02])),
        mem_efficiency=draw(st.sampled_from([0.8, 0.3, 1.0])),
        overhead_s=draw(st.sampled_from([0.5e-3, 0.0])),
    )


models = st.one_of(
    st.builds(ConstantLatency, st.sampled_from([1e-4, 0.013, 0.02, 1.0, 60.0])),
    rooflines(),
    st.sampled_from(CALIBRATED),
)
kv_starts = st.one_of(st.integers(0, 2_000), st.integers(0, 10_000_000))
max_steps_st = st.one_of(st.integers(1, 64), st.integers(1, 1_000_000))


def _budget(
    draw: Callable[..., Any], model: LatencyModel, seqs: int, kv: int, max_steps: int
) -> float:
    """Free budgets, and budgets exactly at (or one ulp around) the end of some step."""
    kind = draw(st.sampled_from(["free", "small", "exact", "below", "above"]))
    if kind == "free":
        return draw(st.floats(0, 100))
    if kind == "small":
        return draw(st.floats(0, 0.05))
    k = draw(st.one_of(st.integers(0, min(max_steps, 64)), st.integers(0, max_steps)))
    run_s = decode_run_s(model, seqs, kv, k, record=False)
    if kind == "below":
        return math.nextafter(run_s, -math.inf)
    if kind == "above":
        return math.nextafter(run_s, math.inf)
    return run_s


def _check(model: LatencyModel, seqs: int, kv: int, budget_s: float, max_steps: int) -> None:
    expected = reference_steps_within_s(model, seqs, kv, budget_s, max_steps)
    got = decode_steps_within_s(model, seqs, kv, budget_s, max_steps)
    assert got == expected, (type(model).__name__, seqs, kv, budget_s, max_steps)


@settings(max_examples=400, deadline=None)
@given(models, st.integers(1, 1024), kv_starts, max_steps_st, st.data())
def test_equals_the_binary_search(
    model: LatencyModel, seqs: int, kv: int, max_steps: int, data: st.DataObject
) -> None:
    budget_s = _budget(data.draw, model, seqs, kv, max_steps)
    expected = reference_steps_within_s(model, seqs, kv, budget_s, max_steps)
    assert decode_steps_within_s(model, seqs, kv, budget_s, max_steps) == expected
    assert decode_run_s(model, seqs, kv, expected, record=False) <= budget_s or expected == 0
    if expected < max_steps:
        assert decode_run_s(model, seqs, kv, expected + 1, record=False) > budget_s


@settings(max_examples=150, deadline=None)
@given(rooflines(), st.integers(64, 1024), st.integers(0, 3_000), max_steps_st, st.data())
def test_roofline_runs_that_start_compute_bound(
    model: RooflineLatency, seqs: int, kv: int, max_steps: int, data: st.DataObject
) -> None:
    budget_s = _budget(data.draw, model, seqs, kv, max_steps)
    _check(model, seqs, kv, budget_s, max_steps)


def test_a_compute_bound_prefix_is_exercised() -> None:
    model = RooflineLatency(MODELS["llama-2-7b"], GPUS["h200-141gb"], compute_efficiency=0.02)
    bound_limit = model._run_terms(1024, 0)[3]
    assert bound_limit is not None and bound_limit > 100
    prefix_s = decode_run_s(model, 1024, 0, bound_limit)
    for budget_s in (prefix_s / 3, prefix_s, prefix_s * 1.01, prefix_s * 50):
        _check(model, 1024, 0, budget_s, 1_000_000)


@pytest.mark.parametrize(
    "model",
    [
        ConstantLatency(0.02),
        RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"], 2),
        *CALIBRATED,
    ],
)
def test_edges(model: LatencyModel) -> None:
    for budget_s in (-1.0, -0.0, 0.0, 5e-324, math.nan, math.inf, -math.inf):
        for max_steps in (0, 1, 2, 10**6, 10**15):
            _check(model, 34, 46_000, budget_s, max_steps)
    _check(model, 34, 46_000, 0.2, -3)
    _check(model, 0, 0, 10.0, 10**6)  # no sequences: every step costs the same
    _check(model, 1024, 10_000_000, 100.0, 10**9)


def test_calibrated_inversion_records_nothing() -> None:
    model = _calibrated()  # kv valid only in [0, 1]: every run below is out of range
    assert decode_steps_within_s(model, 300, 500_000, 5.0, 10_000) > 0
    assert model.out_of_range_calls == 0 and model.first_out_of_range is None


class _Foreign:
    """A latency model known only through the protocol."""

    def __init__(self, inner: LatencyModel, linear: bool) -> None:
        self.inner, self.linear = inner, linear

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        return self.inner.step_time_s(prefill_tokens, decode_seqs, kv_tokens)

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> npt.NDArray[np.float64]:
        return self.inner.step_times_s(prefill_tokens, decode_seqs, kv_tokens)

    def linear_decode_coefficients(self) -> tuple[float, float, float] | None:
        return self.inner.linear_decode_coefficients() if self.linear else None


def test_foreign_models_still_answer() -> None:
    roofline = RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"])
    summed = _Foreign(roofline, linear=False)  # only step_times_s: summed, bisected
    for budget_s in (0.0, 0.2, 3.0, 1e6):
        k = decode_steps_within_s(summed, 34, 46_000, budget_s, 2_000)
        assert k == reference_steps_within_s(summed, 34, 46_000, budget_s, 2_000)
    linear = _Foreign(_calibrated(), linear=True)  # closed-form inverse from coefficients
    for budget_s in (0.0, 0.2, 3.0, 1e6):
        assert decode_steps_within_s(linear, 34, 46_000, budget_s, 10**6) == (
            reference_steps_within_s(linear, 34, 46_000, budget_s, 10**6)
        )


def test_a_model_may_bring_its_own_inverse() -> None:
    class _Own(_Foreign):
        def steps_within_s(self, decode_seqs: int, kv: int, budget_s: float, max_steps: int) -> int:
            return 7

    assert decode_steps_within_s(_Own(ConstantLatency(1.0), linear=False), 1, 0, 1.0, 9) == 7


@settings(max_examples=300, deadline=None)
@given(
    rooflines(),
    st.integers(1, 1024),
    kv_starts,
    max_steps_st,
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(-10.0, 2e6),
        st.integers(-5, 5).map(float),
    ),
    st.data(),
)
def test_settling_is_exact_whatever_the_estimate(
    model: RooflineLatency,
    seqs: int,
    kv: int,
    max_steps: int,
    estimate: float,
    data: st.DataObject,
) -> None:
    """The estimate only buys speed: a wrong one (off by one, far off, NaN) still lands
    on the binary search's answer."""
    budget_s = max(0.0, _budget(data.draw, model, seqs, kv, max_steps))
    terms = model._run_terms(seqs, kv)
    exact = reference_steps_within_s(model, seqs, kv, budget_s, max_steps)
    near = exact + data.draw(st.integers(-3, 3))
    for guess in (estimate, float(near), near - 1e-9, near + 0.5):
        assert _settle(_roofline_run_s, terms, guess, budget_s, max_steps) == exact


@settings(max_examples=200, deadline=None)
@given(
    rooflines(),
    st.sampled_from(CALIBRATED),
    st.floats(1e-4, 60.0),
    st.integers(0, 1024),
    kv_starts,
    st.one_of(st.integers(1, 5_000), st.integers(1, 10**12)),
)
def test_the_inversion_evaluates_the_same_bits_as_decode_run(
    roofline: RooflineLatency,
    calibrated: CalibratedLatency,
    step_s: float,
    seqs: int,
    kv: int,
    steps: int,
) -> None:
    """decode_run_s keeps its closed forms inline (hot path); the inversion evaluates
    them through per-run constants: both must give the same float, bit for bit."""
    terms = roofline._run_terms(seqs, kv)
    assert _roofline_run_s(terms, steps) == roofline.decode_run_s(seqs, kv, steps)
    coefficients = calibrated.linear_decode_coefficients()
    linear_terms = _linear_run_terms(coefficients, seqs, kv)
    assert _linear_run_from_terms(linear_terms, steps) == _linear_run_s(
        coefficients, seqs, kv, steps
    )
    assert _constant_run_s(step_s, steps) == ConstantLatency(step_s).decode_run_s(seqs, kv, steps)
