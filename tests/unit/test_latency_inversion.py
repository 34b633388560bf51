"""``LatencyModel.steps_within_s``, the inversion of a decode run, held to its
definition: the number of whole steps of the run that end within the budget.

Two independent references, neither sharing code with the search it checks:

* the *certificate* on the closed form: ``k`` is in ``[0, max_steps]``,
  ``decode_run_s(k) <= budget_s`` and ``decode_run_s(k + 1) > budget_s`` unless
  ``k == max_steps``; for a run non-decreasing in ``k`` (every step time >= 0) only one
  ``k`` passes it;
* the *definition*, walked step by step (``tests/support/latency.py``): add each step's
  ``step_time_s`` until the next one would end past the budget. The closed form and the
  step-by-step sum differ by float rounding, so the answer must lie between the walk's
  answers for a budget a hair (1e-9 relative) smaller and a hair larger; the walk is
  cut at ``WALK_LIMIT`` steps (past it, the answer must be at least that).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.latency import (
    ForeignLatency,
    calibration_document,
    decode_step_times_s,
    stepwise_steps_within_s,
)

from sim.latency.decode_runs import (  # the inversion's core, tested directly
    _constant_run_s,
    _linear_run_from_terms,
    _linear_run_s,
    _linear_run_terms,
    _roofline_run_s,
    _settle,
)
from sim.latency.models import (
    CalibratedLatency,
    ConstantLatency,
    LatencyModel,
    RooflineLatency,
    fit_calibrated_latency,
)
from sim.models.hardware import GPUS, MODELS

WALK_LIMIT = 1_000
"""Steps the step-by-step reference walks at most."""

ROUNDING = 1e-9
"""How far (relative) the closed form may stray from the step-by-step sum."""


def assert_last_step_that_fits(
    run_s: Callable[[int], float], k: int, budget_s: float, max_steps: int
) -> None:
    """The certificate: ``k`` steps fit ``budget_s`` and ``k + 1`` do not (or ``k`` is
    ``max_steps``); 0 when not even one step fits (a negative budget, say). Past the
    range, the answers the contract fixes: 0 for a NaN budget, ``max_steps`` for
    ``max_steps < 1`` (a run of no steps takes 0 s) unless the budget is negative."""
    if math.isnan(budget_s):
        assert k == 0, (k, budget_s)
    elif max_steps < 1:
        assert k == (max_steps if budget_s >= 0 else 0), (k, max_steps, budget_s)
    else:
        assert 0 <= k <= max_steps, (k, max_steps)
        assert k == 0 or run_s(k) <= budget_s, (k, run_s(k), budget_s)
        assert k == max_steps or run_s(k + 1) > budget_s, (k, run_s(k + 1), budget_s)


def assert_within_the_walk(
    model: LatencyModel, seqs: int, kv: int, budget_s: float, max_steps: int, k: int
) -> None:
    """The definition: ``k`` is between the step-by-step answers for the budget less and
    plus its rounding (checked where the run is monotone and the budget finite)."""
    if not math.isfinite(budget_s) or budget_s < 0 or max_steps < 1:
        return
    limit = min(max_steps, WALK_LIMIT)
    margin_s = ROUNDING * budget_s
    fewest = stepwise_steps_within_s(model, seqs, kv, budget_s - margin_s, limit)
    most = stepwise_steps_within_s(model, seqs, kv, budget_s + margin_s, limit)
    if fewest is None or most is None:
        return  # a step takes negative time: only the certificate applies
    assert fewest <= k, (k, fewest, budget_s)
    if most < WALK_LIMIT:
        assert k <= most, (k, most, budget_s)


def _check(model: LatencyModel, seqs: int, kv: int, budget_s: float, max_steps: int) -> int:
    k = model.steps_within_s(seqs, kv, budget_s, max_steps)

    def run_s(steps: int) -> float:
        return model.decode_run_s(seqs, kv, steps)

    assert_last_step_that_fits(run_s, k, budget_s, max_steps)
    assert_within_the_walk(model, seqs, kv, budget_s, max_steps, k)
    return k


def _calibrated(**coefficients: float) -> CalibratedLatency:
    """KV tokens valid only in [0, 1]: every run below is out of range."""
    return CalibratedLatency.from_dict(calibration_document(valid_kv_tokens=(0, 1), **coefficients))


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
    run_s = model.decode_run_s(seqs, kv, k)
    if kind == "below":
        return math.nextafter(run_s, -math.inf)
    if kind == "above":
        return math.nextafter(run_s, math.inf)
    return run_s


@settings(max_examples=400, deadline=None)
@given(models, st.integers(1, 1024), kv_starts, max_steps_st, st.data())
def test_the_last_step_that_fits(
    model: LatencyModel, seqs: int, kv: int, max_steps: int, data: st.DataObject
) -> None:
    _check(model, seqs, kv, _budget(data.draw, model, seqs, kv, max_steps), max_steps)


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
    prefix_s = model.decode_run_s(1024, 0, bound_limit)
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
    for max_steps in (0, 1, 2, 10**6):
        assert _check(model, 34, 46_000, math.inf, max_steps) == max_steps
        assert _check(model, 34, 46_000, math.nan, max_steps) == 0
        assert _check(model, 34, 46_000, -1.0, max_steps) == 0
    assert _check(model, 34, 46_000, 0.2, -3) == -3
    _check(model, 0, 0, 10.0, 10**6)  # no sequences: every step costs the same
    _check(model, 1024, 10_000_000, 100.0, 10**9)


@pytest.mark.parametrize(
    "model",
    [
        ConstantLatency(0.013),
        RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"]),
        RooflineLatency(MODELS["llama-2-7b"], GPUS["h200-141gb"], compute_efficiency=0.02),
        *CALIBRATED,
    ],
    ids=lambda m: type(m).__name__,
)
def test_small_runs_by_hand(model: LatencyModel) -> None:
    """Budgets half-way between the ends of the first steps, each step timed on its own:
    the answer is the number of steps that end before the budget, exactly."""
    for seqs, kv in ((1, 0), (34, 46_000), (300, 0)):
        step_s = decode_step_times_s(model, seqs, kv, 40)
        if min(step_s) < 0:
            continue  # not monotone: no "steps that end before" to count
        ends_s = np.cumsum(step_s).tolist()
        for k in range(len(ends_s) - 1):
            budget_s = (ends_s[k] + ends_s[k + 1]) / 2  # inside step k + 1 (1-based)
            assert model.steps_within_s(seqs, kv, budget_s, 10**6) == k + 1
            assert model.steps_within_s(seqs, kv, budget_s, k) == k
        assert model.steps_within_s(seqs, kv, ends_s[0] / 2, 10**6) == 0


def test_calibrated_inversion_records_nothing() -> None:
    model = _calibrated()  # kv valid only in [0, 1]: every run below is out of range
    before = dict(vars(model))
    assert model.steps_within_s(300, 500_000, 5.0, 10_000) > 0
    assert vars(model) == before


def test_foreign_models_still_answer() -> None:
    roofline = RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"])
    summed = ForeignLatency(roofline, linear=False)  # only step_times_s: summed, searched
    linear = ForeignLatency(_calibrated(), linear=True)  # inverse from the coefficients
    for model, max_steps in ((summed, 2_000), (linear, 10**6)):
        for budget_s in (0.0, 0.2, 3.0, 1e6):
            _check(model, 34, 46_000, budget_s, max_steps)
        for k in (1, 2, 7, 100, 1_999):  # budgets exactly at the end of step k
            budget_s = model.decode_run_s(34, 46_000, k)
            assert _check(model, 34, 46_000, budget_s, max_steps) == k


def test_a_model_may_bring_its_own_inverse() -> None:
    class _Own(ForeignLatency):
        def steps_within_s(self, decode_seqs: int, kv: int, budget_s: float, max_steps: int) -> int:
            return 7

    assert ForeignLatency(ConstantLatency(1.0)).steps_within_s(1, 0, 1.0, 9) == 1  # the base's
    assert _Own(ConstantLatency(1.0)).steps_within_s(1, 0, 1.0, 9) == 7


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
    on the last step that fits."""
    budget_s = max(0.0, _budget(data.draw, model, seqs, kv, max_steps))
    terms = model._run_terms(seqs, kv)
    exact = _check(model, seqs, kv, budget_s, max_steps)
    near = exact + data.draw(st.integers(-3, 3))
    for guess in (estimate, float(near), near - 1e-9, near + 0.5):
        k = _settle(_roofline_run_s, terms, guess, budget_s, max_steps)
        assert_last_step_that_fits(lambda s: _roofline_run_s(terms, s), k, budget_s, max_steps)
        assert k == exact


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
