"""Closed-form decode runs and their exact inversion: the pure math under sim.latency.

A *decode run* is ``steps`` consecutive decode-only steps of ``decode_seqs`` sequences,
step ``i`` reading ``kv_first_tokens + i * decode_seqs`` KV tokens. This module holds
the run sums of the models in :mod:`sim.latency.models` and
:mod:`sim.latency.calibrated` in closed form, and their inversion (the largest run that
fits a time budget). It depends on no latency model: the models call into it.

Contracts:

* Each ``*_run_s`` / ``*_run_from_terms`` function evaluates its model's closed form
  with the very float64 operations, in the same order, as the model's inline
  ``decode_run_s``, so both give the same bits (tests/unit/test_latency_inversion.py).
* Inversion: an analytic estimate (:func:`_positive_root` or a division) settled by
  :func:`_settle`, which evaluates the closed form itself; the answer is exactly the
  integer a binary search over the run (:func:`sim.latency.search.last_true`) finds.
  Why: with every step time >= 0 each closed form is non-decreasing in ``k`` even in
  floating point (every term is, and rounded + and * are monotone), so
  ``{k: run(k) <= budget_s}`` is a prefix of ``[0, max_steps]`` whose end both find.
  Runs that may not be monotone (negative coefficients or inputs, ``max_steps < 1``, a
  NaN or negative budget) are left to the binary search by the callers
  (:func:`sim.latency.base.bisect_steps_within_s`).
"""

# fragsim: compiled
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from sim.latency.search import last_true_between

_T = TypeVar("_T")


def _constant_run_s(step_s: float, steps: int) -> float:
    return steps * step_s


_RooflineRun = tuple[float, float, float, int | None, float]
"""``(compute_s, memory0_s, slope_s, bound_limit, per_step_s)`` of one decode run."""


def _roofline_run_s(terms: _RooflineRun, steps: int) -> float:
    """:meth:`RooflineLatency.decode_run_s` for ``steps >= 1`` from its run constants."""
    compute_s, memory0_s, slope_s, bound_limit, per_step_s = terms
    bound_steps = steps if bound_limit is None else min(steps, bound_limit)
    rest = steps - bound_steps
    memory_sum_s = rest * memory0_s + slope_s * (bound_steps + steps - 1) * rest / 2
    return bound_steps * compute_s + memory_sum_s + steps * per_step_s


def _linear_run_terms(
    coefficients: tuple[float, float, float], decode_seqs: int, kv_first_tokens: int
) -> tuple[float, float]:
    """``(first_s, growth_s)``: the first step's time and how much each step adds."""
    a, b, c = coefficients
    return a + b * decode_seqs + c * kv_first_tokens, c * decode_seqs


def _linear_run_from_terms(terms: tuple[float, float], steps: int) -> float:
    first_s, growth_s = terms
    return steps * first_s + growth_s * (steps * (steps - 1) / 2)


def _linear_run_s(
    coefficients: tuple[float, float, float], decode_seqs: int, kv_first_tokens: int, steps: int
) -> float:
    # inline (hot path): the same operations as _linear_run_terms then
    # _linear_run_from_terms (``c * decode_seqs * x`` is ``(c * decode_seqs) * x``)
    a, b, c = coefficients
    first_s = a + b * decode_seqs + c * kv_first_tokens
    return steps * first_s + c * decode_seqs * (steps * (steps - 1) / 2)


def _linear_steps_within_s(
    coefficients: tuple[float, float, float],
    decode_seqs: int,
    kv_first_tokens: int,
    budget_s: float,
    max_steps: int,
) -> int | None:
    """``LatencyModel.steps_within_s`` for a linear model: ``run(m) =
    m*first_s + growth_s*m(m-1)/2`` inverted, then settled on the closed form. None
    when the run may not be monotone (a step may take negative time, ``max_steps < 1``,
    a NaN or negative budget): the caller answers it by binary search."""
    terms = _linear_run_terms(coefficients, decode_seqs, kv_first_tokens)
    first_s, growth_s = terms
    if max_steps < 1 or not (budget_s >= 0 and first_s >= 0 and growth_s >= 0):
        return None
    estimate = _positive_root(growth_s / 2, first_s - growth_s / 2, budget_s)
    return _settle(_linear_run_from_terms, terms, estimate, budget_s, max_steps)


def _positive_root(quadratic: float, linear: float, value: float) -> float:
    """The root ``x >= 0`` of ``quadratic*x*x + linear*x == value`` (``quadratic >= 0``,
    ``value >= 0``), without cancellation; inf when the left side never reaches
    ``value``. Only an estimate: :func:`_settle` makes the answer exact."""
    if quadratic <= 0:
        return value / linear if linear > 0 else math.inf
    root = math.sqrt(linear * linear + 4 * quadratic * value)
    if linear >= 0:
        return 2 * value / (linear + root) if linear + root > 0 else 0.0
    return (root - linear) / (2 * quadratic)


def _settle(
    run_s: Callable[[_T, int], float], terms: _T, estimate: float, budget_s: float, max_steps: int
) -> int:
    """The largest ``k`` in ``[0, max_steps]`` with ``run_s(terms, k) <= budget_s``, for
    a run non-decreasing in ``k`` with ``run(0) == 0 <= budget_s`` and ``max_steps >= 1``:
    start at the estimate (clamped), check it and its upper neighbour (two evaluations
    when the estimate is right, as it nearly always is), else gallop away from it and
    bisect the bracket. The answer rests only on evaluations, so it is exact whatever the estimate; for a
    monotone run it is the integer a plain binary search finds."""
    # nudged up: a budget equal to run(k) often inverts to k minus a rounding error
    estimate = estimate * (1 + 1e-12) + 1e-9
    # -inf and below zero: 0; +inf, NaN (comparisons fail) and beyond: max_steps
    k = (int(estimate) if estimate > 0 else 0) if estimate < max_steps else max_steps
    if k > 0 and run_s(terms, k) > budget_s:  # too far: gallop down to a fitting lo
        hi, step = k, 1
        while True:
            lo = hi - step
            if lo <= 0:
                lo = 0
                break
            if run_s(terms, lo) <= budget_s:
                break
            hi, step = lo, step * 2
    else:  # run(k) fits: gallop up to a hi that does not
        lo, step = k, 1
        while True:
            if lo >= max_steps:
                return max_steps
            hi = min(lo + step, max_steps)
            if run_s(terms, hi) > budget_s:
                break
            lo, step = hi, step * 2
    # invariant: run(lo) <= budget_s < run(hi); no closure unless a bracket is left
    return lo if hi - lo <= 1 else _bisect_settled(run_s, terms, budget_s, lo, hi)


def _bisect_settled(
    run_s: Callable[[_T, int], float], terms: _T, budget_s: float, lo: int, hi: int
) -> int:
    """The end of :func:`_settle`: bisect the bracket ``run(lo) <= budget_s < run(hi)``.
    Its own function so the closure's captured variables (mypyc keeps them in an
    environment object) cost nothing on _settle's common path."""
    return last_true_between(lo, hi, lambda k: run_s(terms, k) <= budget_s)
