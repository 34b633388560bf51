"""Latency models: the time of one continuous-batching iteration.

One *step* runs ``prefill_tokens`` prompt tokens (whole prompts or prefill chunks) and
``decode_seqs`` sequences that each decode one token, and its attention reads
``kv_tokens`` KV tokens. All three are >= 0 (callers guarantee it; nothing is checked
on the hot path).

Contracts every model here keeps:

* ``step_times_s`` (vectorised) equals ``step_time_s`` element by element, bit for bit:
  both evaluate the same float64 operations in the same order.
* ``linear_decode_coefficients()`` is ``(a, b, c)`` when, for ``prefill_tokens == 0``,
  ``step_time_s(0, n, k) == a + b*n + c*k`` exactly (same operations); None otherwise.
* :func:`decode_run_s` sums a run of decode-only steps (step ``i`` reads
  ``kv_tokens_start + i * decode_seqs`` KV tokens) in closed form where the model
  allows; it equals the step-by-step sum to float rounding.
* :func:`decode_steps_within_s` inverts it: the largest run that fits a budget. The
  models here answer in O(1) (``steps_within_s``: an analytic estimate settled by
  evaluating the very closed form ``decode_run_s`` uses), bit-for-bit the same integer
  as a binary search over ``decode_run_s``.

Layout: this module holds the :class:`LatencyModel` protocol, the constant and roofline
models and the dispatching run functions (the scenario configs, ``latency:`` blocks,
are in :mod:`sim.latency_config`).
The calibrated model and its file live in :mod:`sim.latency_calibrated`; the closed-form
run math and its inversion in :mod:`sim.decode_runs`. Everything other modules import
from here is re-exported here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sim.hardware import GpuSpec, ModelSpec, kv_bytes_per_token
from sim.latency.calibrated import (
    LATENCY_FORMAT,
    CalibratedLatency,
    CalibrationFile,
    FitQuality,
    LatencyCoefficients,
    ValidRange,
    fit_calibrated_latency,
)
from sim.latency.decode_runs import (
    _constant_run_s,
    _linear_run_s,
    _linear_steps_within_s,
    _positive_root,
    _roofline_run_s,
    _RooflineRun,
    _settle,
)
from sim.latency.decode_runs import _linear_run_from_terms as _linear_run_from_terms  # re-export
from sim.latency.decode_runs import _linear_run_terms as _linear_run_terms  # re-export

__all__ = [
    "LATENCY_FORMAT",
    "CalibratedLatency",
    "CalibrationFile",
    "ConstantLatency",
    "FitQuality",
    "LatencyCoefficients",
    "LatencyModel",
    "RooflineLatency",
    "ValidRange",
    "decode_run_fn",
    "decode_run_s",
    "decode_steps_within_s",
    "fit_calibrated_latency",
    "steps_within_fn",
]

FloatArray = npt.NDArray[np.float64]


class LatencyModel(Protocol):
    """The time of one iteration of continuous batching."""

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        """Seconds one step takes."""
        ...

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> FloatArray:
        """``step_time_s`` over arrays (broadcast together), as float64, bit-identical."""
        ...

    def linear_decode_coefficients(self) -> tuple[float, float, float] | None:
        """``(a, b, c)`` with ``step_time_s(0, n, k) == a + b*n + c*k``, else None."""
        ...


def _shape(*arrays: npt.NDArray[Any]) -> tuple[int, ...]:
    return np.broadcast(*arrays).shape


class ConstantLatency:
    """Every step takes ``step_s`` whatever it runs (for M/D/c-style hand checks)."""

    def __init__(self, step_s: float) -> None:
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        self.step_s = float(step_s)

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        return self.step_s

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> FloatArray:
        return np.full(_shape(prefill_tokens, decode_seqs, kv_tokens), self.step_s)

    def linear_decode_coefficients(self) -> tuple[float, float, float]:
        return (self.step_s, 0.0, 0.0)

    def decode_run_s(self, decode_seqs: int, kv_tokens_start: int, steps: int) -> float:
        return steps * self.step_s  # as _constant_run_s

    def steps_within_s(
        self, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
    ) -> int:
        """:func:`decode_steps_within_s` in O(1)."""
        if max_steps < 1 or not budget_s >= 0:
            return _bisect_steps_within_s(self, decode_seqs, kv_tokens_start, budget_s, max_steps)
        step_s = self.step_s
        return _settle(_constant_run_s, step_s, budget_s / step_s, budget_s, max_steps)


class RooflineLatency:
    """A roofline step time from the hardware presets.

    Per step, on one GPU of a ``tp``-way replica::

        memory_s  = (weights_bytes/tp + kv_tokens * kv_bytes_per_token(tp)) / (hbm * mem_eff)
        compute_s = 2 * num_params/tp * (prefill_tokens + decode_seqs) / (flops * compute_eff)
        comm_s    = 2 * num_layers * (allreduce_latency_s
                      + 2 (tp-1)/tp * tokens * hidden_size * dtype_bytes / link_bytes_per_s)
                    (tp > 1 only: two ring all-reduces per layer)
        step_s    = max(memory_s, compute_s) + comm_s + overhead_s

    Attention FLOPs are left out (they matter only for prompts of many thousand tokens:
    use a calibrated model there). Memory and compute overlap (max); communication and
    the fixed overhead (scheduling, kernel launches) do not. Not linear (the max), so
    ``linear_decode_coefficients`` is None; :meth:`decode_run_s` is still closed form.
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int = 1,
        *,
        mem_efficiency: float = 0.8,
        compute_efficiency: float = 0.6,
        overhead_s: float = 0.5e-3,
        tp_allreduce_latency_s: float = 10e-6,
        tp_link_bytes_per_s: float = 200e9,
    ) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        if not (0 < mem_efficiency <= 1 and 0 < compute_efficiency <= 1):
            raise ValueError("efficiencies must be in (0, 1]")
        if overhead_s < 0 or tp_allreduce_latency_s < 0 or tp_link_bytes_per_s <= 0:
            raise ValueError(
                "overhead_s and tp_allreduce_latency_s must be >= 0, tp_link_bytes_per_s > 0"
            )
        self.model, self.gpu, self.tp = model, gpu, tp
        bandwidth = gpu.hbm_bytes_per_s * mem_efficiency
        self.memory_fixed_s = model.weights_bytes / tp / bandwidth
        """Weights read once per step."""
        self.memory_per_kv_token_s = kv_bytes_per_token(model, tp) / bandwidth
        self.compute_per_token_s = (
            2.0 * model.num_params / tp / (gpu.dense_bf16_flops * compute_efficiency)
        )
        comm_fixed_s, comm_per_token_s = 0.0, 0.0
        if tp > 1:
            layers_x2 = 2 * model.num_layers
            comm_fixed_s = layers_x2 * tp_allreduce_latency_s
            comm_per_token_s = (
                layers_x2
                * 2.0
                * (tp - 1)
                / tp
                * (model.hidden_size * model.dtype_bytes)
                / tp_link_bytes_per_s
            )
        self.fixed_s = overhead_s + comm_fixed_s
        """Per-step time that depends on nothing: overhead and all-reduce latency."""
        self.comm_per_token_s = comm_per_token_s

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        tokens = prefill_tokens + decode_seqs
        memory_s = self.memory_fixed_s + self.memory_per_kv_token_s * kv_tokens
        compute_s = self.compute_per_token_s * tokens
        return float(max(memory_s, compute_s) + self.fixed_s + self.comm_per_token_s * tokens)

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> FloatArray:
        tokens = np.asarray(prefill_tokens) + np.asarray(decode_seqs)
        memory_s = self.memory_fixed_s + self.memory_per_kv_token_s * np.asarray(kv_tokens)
        compute_s = self.compute_per_token_s * tokens
        out = np.maximum(memory_s, compute_s) + self.fixed_s + self.comm_per_token_s * tokens
        return np.asarray(out, dtype=np.float64)

    def linear_decode_coefficients(self) -> tuple[float, float, float] | None:
        return None  # max(memory, compute) is not linear

    def decode_run_s(self, decode_seqs: int, kv_tokens_start: int, steps: int) -> float:
        """Closed form: the first ``j`` steps are compute-bound (memory grows by
        ``decode_seqs`` KV tokens a step), the rest memory-bound."""
        if steps <= 0:
            return 0.0
        # inline (hot path): the same operations as _run_terms then _roofline_run_s,
        # which steps_within_s evaluates; tests/unit/test_latency_inversion.py checks
        # that both give the same bits
        compute_s = self.compute_per_token_s * decode_seqs
        memory0_s = self.memory_fixed_s + self.memory_per_kv_token_s * kv_tokens_start
        slope_s = self.memory_per_kv_token_s * decode_seqs
        if memory0_s >= compute_s:
            bound_steps = 0
        elif slope_s <= 0:
            bound_steps = steps
        else:
            bound_steps = min(steps, math.ceil((compute_s - memory0_s) / slope_s))
        rest = steps - bound_steps
        memory_sum_s = rest * memory0_s + slope_s * (bound_steps + steps - 1) * rest / 2
        per_step_s = self.fixed_s + self.comm_per_token_s * decode_seqs
        return bound_steps * compute_s + memory_sum_s + steps * per_step_s

    def _run_terms(self, decode_seqs: int, kv_tokens_start: int) -> _RooflineRun:
        """The per-run constants of :func:`_roofline_run_s`."""
        compute_s = self.compute_per_token_s * decode_seqs
        memory0_s = self.memory_fixed_s + self.memory_per_kv_token_s * kv_tokens_start
        slope_s = self.memory_per_kv_token_s * decode_seqs
        bound_limit: int | None  # steps that are compute-bound at most (None: all)
        if memory0_s >= compute_s:
            bound_limit = 0
        elif slope_s <= 0:
            bound_limit = None
        else:
            bound_limit = math.ceil((compute_s - memory0_s) / slope_s)
        per_step_s = self.fixed_s + self.comm_per_token_s * decode_seqs
        return compute_s, memory0_s, slope_s, bound_limit, per_step_s

    def steps_within_s(
        self, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
    ) -> int:
        """:func:`decode_steps_within_s` in O(1): the compute-bound prefix costs
        ``compute_s + per_step_s`` a step (linear), the memory-bound rest a quadratic."""
        if max_steps < 1 or not budget_s >= 0 or decode_seqs < 0 or kv_tokens_start < 0:
            return _bisect_steps_within_s(self, decode_seqs, kv_tokens_start, budget_s, max_steps)
        terms = self._run_terms(decode_seqs, kv_tokens_start)
        compute_s, memory0_s, slope_s, bound_limit, per_step_s = terms
        bound_step_s = compute_s + per_step_s
        if bound_limit is None or (bound_limit > 0 and budget_s <= bound_limit * bound_step_s):
            estimate = budget_s / bound_step_s  # > 0: compute_s > memory0_s > 0 here
        else:  # past the prefix: r more steps cost r*linear_s + slope_s*r*r/2
            prefix_s = bound_limit * bound_step_s
            linear_s = memory0_s + per_step_s + slope_s * (2 * bound_limit - 1) / 2
            estimate = bound_limit + _positive_root(slope_s / 2, linear_s, budget_s - prefix_s)
        return _settle(_roofline_run_s, terms, estimate, budget_s, max_steps)


def decode_run_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, steps: int, *, record: bool = True
) -> float:
    """Seconds ``steps`` consecutive decode-only steps take, step ``i`` reading
    ``kv_tokens_start + i * decode_seqs`` KV tokens (every sequence grows by one token a
    step). O(1) for the models here; a calibrated model also counts the run's
    out-of-range steps unless ``record`` is False. A foreign model without a linear
    form is summed with ``step_times_s``."""
    if steps <= 0:
        return 0.0
    if isinstance(model, CalibratedLatency):
        return model.decode_run_s(decode_seqs, kv_tokens_start, steps, record=record)
    if isinstance(model, ConstantLatency | RooflineLatency):
        return model.decode_run_s(decode_seqs, kv_tokens_start, steps)
    coefficients = model.linear_decode_coefficients()
    if coefficients is not None:
        return _linear_run_s(coefficients, decode_seqs, kv_tokens_start, steps)
    kv = kv_tokens_start + decode_seqs * np.arange(steps, dtype=np.int64)
    times = model.step_times_s(np.zeros(1, np.int64), np.full(1, decode_seqs, np.int64), kv)
    return float(times.sum())


def decode_run_fn(model: LatencyModel) -> Callable[[int, int, int], float]:
    """``decode_run_s(model, seqs, kv_start, steps, record=False)`` as one callable,
    dispatched once (the engine calls it a few times per simulated request)."""
    if isinstance(model, CalibratedLatency):
        return functools.partial(model.decode_run_s, record=False)
    if isinstance(model, ConstantLatency | RooflineLatency):
        return model.decode_run_s
    return functools.partial(decode_run_s, model, record=False)


def steps_within_fn(model: LatencyModel) -> Callable[[int, int, float, int], int]:
    """``decode_steps_within_s(model, seqs, kv_start, budget_s, max_steps)`` as one
    callable, dispatched once."""
    method = getattr(model, "steps_within_s", None)
    if method is not None:
        return method
    return functools.partial(decode_steps_within_s, model)


def decode_steps_within_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
) -> int:
    """The largest ``k <= max_steps`` with ``decode_run_s(model, ..., k) <= budget_s``:
    how many whole steps of a decode run have finished ``budget_s`` after it began
    (0 for a negative or NaN budget). Records no out-of-range steps.

    Exactly the integer a binary search over ``decode_run_s(..., record=False)``
    returns, so ``run(k) <= budget_s < run(k + 1)`` unless ``k == max_steps``. O(1)
    (nearly always two closed-form evaluations) for a model with a ``steps_within_s`` method
    (the models here; a foreign model may offer one with this contract) or with
    ``linear_decode_coefficients``; otherwise a binary search (O(log max_steps)
    evaluations).

    Why the fast answer is the search's: with every step time >= 0 each closed form is
    non-decreasing in ``k`` even in floating point (every term is, and rounded + and *
    are monotone), so ``{k: run(k) <= budget_s}`` is a prefix of ``[0, max_steps]``
    whose end both find. Runs that may not be monotone (negative coefficients or
    inputs, ``max_steps < 1``, a NaN or negative budget) are answered by the search."""
    steps_within_s = getattr(model, "steps_within_s", None)
    if steps_within_s is not None:
        return steps_within_s(decode_seqs, kv_tokens_start, budget_s, max_steps)
    coefficients = model.linear_decode_coefficients()
    if coefficients is not None:
        steps = _linear_steps_within_s(
            coefficients, decode_seqs, kv_tokens_start, budget_s, max_steps
        )
        if steps is not None:
            return steps
    return _bisect_steps_within_s(model, decode_seqs, kv_tokens_start, budget_s, max_steps)


def _bisect_steps_within_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
) -> int:
    """:func:`decode_steps_within_s` by binary search over ``decode_run_s``: the
    reference, and the answer for any model without a closed-form inverse. The loop of
    :func:`sim.decode_runs._bisect_run_s`, inline: no partial per call on this path."""
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
