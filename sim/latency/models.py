"""Latency models: the constant and roofline step times, and the package's front door.

The interface and its contracts are :class:`sim.latency.base.LatencyModel`'s; the
calibrated model and its file live in :mod:`sim.latency.calibrated`, the closed-form run
math and its inversion in :mod:`sim.latency.decode_runs`, the scenario configs
(``latency:`` blocks) in :mod:`sim.latency.config`. Everything other modules import from
the package is re-exported here.

Both models here answer ``decode_run_s`` in closed form inline (hot path) and
``steps_within_s`` in O(1): an analytic estimate settled by evaluating the very closed
form ``decode_run_s`` uses (``_settle``), bit-for-bit the integer a binary search over
``decode_run_s`` returns.
"""

# fragsim: compiled
from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.latency.base import FloatArray, LatencyModel, bisect_steps_within_s
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
    _positive_root,
    _roofline_run_s,
    _RooflineRun,
    _settle,
)
from sim.latency.decode_runs import _linear_run_from_terms as _linear_run_from_terms  # re-export
from sim.latency.decode_runs import _linear_run_s as _linear_run_s  # re-export
from sim.latency.decode_runs import _linear_run_terms as _linear_run_terms  # re-export
from sim.models.hardware import GpuSpec, ModelSpec, kv_bytes_per_token

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
    "bisect_steps_within_s",
    "fit_calibrated_latency",
]


def _shape(*arrays: npt.NDArray[Any]) -> tuple[int, ...]:
    return np.broadcast(*arrays).shape


class ConstantLatency(LatencyModel):
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

    def decode_run_s(self, decode_seqs: int, kv_first_tokens: int, steps: int) -> float:
        if steps <= 0:
            return 0.0
        return steps * self.step_s  # as _constant_run_s

    def steps_within_s(
        self, decode_seqs: int, kv_first_tokens: int, budget_s: float, max_steps: int
    ) -> int:
        """In O(1)."""
        if max_steps < 1 or not budget_s >= 0:
            return bisect_steps_within_s(self, decode_seqs, kv_first_tokens, budget_s, max_steps)
        step_s = self.step_s
        return _settle(_constant_run_s, step_s, budget_s / step_s, budget_s, max_steps)


class RooflineLatency(LatencyModel):
    """A roofline step time from the hardware presets.

    Per step, on one GPU of a ``tp``-way replica::

        memory_s  = (weights_bytes/tp + kv_tokens * kv_bytes_per_token(tp)) / (hbm * mem_eff)
        compute_s = 2 * compute_params/tp * (prefill_tokens + decode_seqs) / (flops * compute_eff)
        comm_s    = allreduces * (allreduce_latency_s
                      + 2 (tp-1)/tp * tokens * hidden_size * dtype_bytes / link_bytes_per_s)
                    (tp > 1 only: two ring all-reduces per layer, a hybrid's blocks
                    one each: ModelSpec.allreduces_per_step)
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
            2.0 * model.compute_params / tp / (gpu.dense_bf16_flops * compute_efficiency)
        )
        comm_fixed_s, comm_per_token_s = 0.0, 0.0
        if tp > 1:
            layers_x2 = model.allreduces_per_step
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

    def decode_run_s(self, decode_seqs: int, kv_first_tokens: int, steps: int) -> float:
        """Closed form: the first ``j`` steps are compute-bound (memory grows by
        ``decode_seqs`` KV tokens a step), the rest memory-bound."""
        if steps <= 0:
            return 0.0
        # inline (hot path): the same operations as _run_terms then _roofline_run_s,
        # which steps_within_s evaluates; tests/unit/test_latency_inversion.py checks
        # that both give the same bits
        compute_s = self.compute_per_token_s * decode_seqs
        memory0_s = self.memory_fixed_s + self.memory_per_kv_token_s * kv_first_tokens
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

    def _run_terms(self, decode_seqs: int, kv_first_tokens: int) -> _RooflineRun:
        """The per-run constants of :func:`_roofline_run_s`."""
        compute_s = self.compute_per_token_s * decode_seqs
        memory0_s = self.memory_fixed_s + self.memory_per_kv_token_s * kv_first_tokens
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
        self, decode_seqs: int, kv_first_tokens: int, budget_s: float, max_steps: int
    ) -> int:
        """In O(1): the compute-bound prefix costs ``compute_s + per_step_s`` a step
        (linear), the memory-bound rest a quadratic."""
        if max_steps < 1 or not budget_s >= 0 or decode_seqs < 0 or kv_first_tokens < 0:
            return bisect_steps_within_s(self, decode_seqs, kv_first_tokens, budget_s, max_steps)
        terms = self._run_terms(decode_seqs, kv_first_tokens)
        compute_s, memory0_s, slope_s, bound_limit, per_step_s = terms
        bound_step_s = compute_s + per_step_s
        if bound_limit is None or (bound_limit > 0 and budget_s <= bound_limit * bound_step_s):
            estimate = budget_s / bound_step_s  # > 0: compute_s > memory0_s > 0 here
        else:  # past the prefix: r more steps cost r*linear_s + slope_s*r*r/2
            prefix_s = bound_limit * bound_step_s
            linear_s = memory0_s + per_step_s + slope_s * (2 * bound_limit - 1) / 2
            estimate = bound_limit + _positive_root(slope_s / 2, linear_s, budget_s - prefix_s)
        return _settle(_roofline_run_s, terms, estimate, budget_s, max_steps)
