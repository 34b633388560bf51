"""The latency-model interface: everything the engine asks of a model, in one class.

One *step* runs ``prefill_tokens`` prompt tokens (whole prompts or prefill chunks) and
``decode_seqs`` sequences that each decode one token, and its attention reads
``kv_tokens`` KV tokens. A *decode run* is ``steps`` consecutive decode-only steps of
``decode_seqs`` sequences, step ``i`` reading ``kv_first_tokens + i * decode_seqs`` KV
tokens (every sequence grows by one token a step). Inputs are >= 0 (callers guarantee
it; nothing is checked on the hot path).

Contracts every model keeps:

* ``step_times_s`` (vectorised) equals ``step_time_s`` element by element, bit for bit:
  both evaluate the same float64 operations in the same order.
* ``linear_decode_coefficients()`` is ``(a, b, c)`` when, for ``prefill_tokens == 0``,
  ``step_time_s(0, n, k) == a + b*n + c*k`` exactly (same operations); None otherwise.
* ``decode_run_s`` is the run's seconds (0.0 for ``steps <= 0``), equal to the
  step-by-step sum to float rounding; O(1) for the models in this package.
* ``steps_within_s`` is the largest ``k <= max_steps`` with ``decode_run_s(..., k) <=
  budget_s``: how many whole steps of a run have finished ``budget_s`` after it began
  (0 for a negative or NaN budget), exactly the integer :func:`bisect_steps_within_s`
  finds. O(1) where the run has a closed-form inverse.
* Every method is a pure evaluation: a model holds no run-time state, so one model may
  serve every replica of a pool and every run that shares the built parts. A model
  measured over a range (``valid_range``) says so; what a run evaluated outside it is
  counted by the run (:class:`OutOfRange`, one per run and pool) and returned with the
  run's summary.

A subclass gives ``step_time_s`` and ``step_times_s``. The defaults here give the rest
from ``linear_decode_coefficients`` (a closed form and its O(1) inverse) or, for a model
without one, by summing ``step_times_s`` and binary search. Not an ``abc.ABC`` (as
:class:`policies.allocators.base.Allocator`, for the compiled build): the abstract
methods raise NotImplementedError.
"""

# fragsim: compiled
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from sim.latency.decode_runs import _linear_run_s, _linear_steps_within_s
from sim.latency.search import last_true

FloatArray = npt.NDArray[np.float64]
InputBounds = tuple[int, int, int, int, int, int]
"""(prefill lo, prefill hi, decode_seqs lo, decode_seqs hi, kv lo, kv hi), inclusive."""


@mypyc_attr(allow_interpreted_subclasses=True)
class LatencyModel:
    """The time of one iteration of continuous batching, and of runs of decode steps.
    See the module docstring for the contracts."""

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        """Seconds one step takes."""
        raise NotImplementedError

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> FloatArray:
        """``step_time_s`` over arrays (broadcast together), as float64, bit-identical."""
        raise NotImplementedError

    def linear_decode_coefficients(self) -> tuple[float, float, float] | None:
        """``(a, b, c)`` with ``step_time_s(0, n, k) == a + b*n + c*k``, else None."""
        return None

    def decode_run_s(self, decode_seqs: int, kv_first_tokens: int, steps: int) -> float:
        """Seconds ``steps`` consecutive decode-only steps take (records nothing)."""
        if steps <= 0:
            return 0.0
        coefficients = self.linear_decode_coefficients()
        if coefficients is not None:
            return _linear_run_s(coefficients, decode_seqs, kv_first_tokens, steps)
        kv = kv_first_tokens + decode_seqs * np.arange(steps, dtype=np.int64)
        times = self.step_times_s(np.zeros(1, np.int64), np.full(1, decode_seqs, np.int64), kv)
        return float(times.sum())

    def steps_within_s(
        self, decode_seqs: int, kv_first_tokens: int, budget_s: float, max_steps: int
    ) -> int:
        """Whole steps of a decode run finished ``budget_s`` after it began, at most
        ``max_steps`` (records nothing)."""
        coefficients = self.linear_decode_coefficients()
        if coefficients is not None:
            steps = _linear_steps_within_s(
                coefficients, decode_seqs, kv_first_tokens, budget_s, max_steps
            )
            if steps is not None:
                return steps
        return bisect_steps_within_s(self, decode_seqs, kv_first_tokens, budget_s, max_steps)

    def valid_range(self) -> InputBounds | None:
        """The inputs the model was measured over, inclusive: ``(prefill lo, prefill
        hi, decode_seqs lo, decode_seqs hi, kv lo, kv hi)``; None: valid everywhere
        (a model from first principles)."""
        return None


class OutOfRange:
    """What one run counted of the steps it simulated outside a model's validity range
    (:meth:`LatencyModel.valid_range`): ``steps`` (steps, not calls: a decode run counts
    each of its steps outside) and ``first``, the first such ``(prefill_tokens,
    decode_seqs, kv_tokens)`` in the order the run noted them. The engine notes every
    real step (:meth:`note_step`) and every decode run it applies (:meth:`note_run`);
    the two count the same steps the same way. Made per run (and per pool in a fleet,
    shared by the pool's replicas): the model itself stays pure."""

    def __init__(self, bounds: InputBounds) -> None:
        self.bounds = bounds
        self.steps = 0
        self.first: tuple[int, int, int] | None = None

    @staticmethod
    def for_model(model: LatencyModel) -> OutOfRange | None:
        """A fresh counter for ``model``; None when the model is valid everywhere."""
        bounds = model.valid_range()
        return None if bounds is None else OutOfRange(bounds)

    def _note(self, point: tuple[int, int, int], steps: int) -> None:
        self.steps += steps
        if self.first is None:
            self.first = point

    def note_step(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> None:
        """One step the run simulated."""
        p_lo, p_hi, d_lo, d_hi, k_lo, k_hi = self.bounds
        if not (
            p_lo <= prefill_tokens <= p_hi
            and d_lo <= decode_seqs <= d_hi
            and k_lo <= kv_tokens <= k_hi
        ):
            self._note((int(prefill_tokens), int(decode_seqs), int(kv_tokens)), 1)

    def note_run(self, decode_seqs: int, kv_first_tokens: int, steps: int) -> None:
        """A decode run the run applied: its steps counted as :meth:`note_step` would
        count them one by one (step ``i`` reads ``kv_first_tokens + i * decode_seqs``)."""
        if steps <= 0:
            return
        p_lo, p_hi, d_lo, d_hi, k_lo, k_hi = self.bounds
        if not (p_lo <= 0 <= p_hi and d_lo <= decode_seqs <= d_hi):
            self._note((0, int(decode_seqs), int(kv_first_tokens)), steps)
            return
        # kv of step i is kv_first_tokens + i*decode_seqs: in range for i in [first, last]
        n = max(decode_seqs, 0)
        if n == 0:
            first, last = (0, steps - 1) if k_lo <= kv_first_tokens <= k_hi else (0, -1)
        else:
            first = max(0, -(-(k_lo - kv_first_tokens) // n))
            last = min(steps - 1, (k_hi - kv_first_tokens) // n)
        inside = max(0, last - first + 1)
        if inside < steps:
            bad = 0 if first > 0 or inside == 0 else last + 1
            self._note((0, int(decode_seqs), int(kv_first_tokens + bad * n)), steps - inside)


def bisect_steps_within_s(
    model: LatencyModel, decode_seqs: int, kv_first_tokens: int, budget_s: float, max_steps: int
) -> int:
    """``model.steps_within_s`` by binary search over ``model.decode_run_s``
    (O(log max_steps) evaluations): the reference the closed-form inverses equal (why:
    :mod:`sim.latency.decode_runs`), and the answer for a run without one or one that
    may not be monotone (a step of negative time, ``max_steps < 1``, a NaN or negative
    budget)."""
    return last_true(
        0, max_steps, lambda k: model.decode_run_s(decode_seqs, kv_first_tokens, k) <= budget_s
    )
