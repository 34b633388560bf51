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
* Both run methods are what-if evaluations and record nothing. ``note_run`` tells the
  model the engine simulated a run: a model with a validity range
  (``counts_out_of_range``) counts the run's steps outside it in
  ``out_of_range_calls`` and keeps the first such ``(prefill_tokens, decode_seqs,
  kv_tokens)`` in ``first_out_of_range``, as ``step_time_s`` and ``step_times_s`` do
  for the steps they evaluate; any other model leaves them at 0 and None.

A subclass gives ``step_time_s`` and ``step_times_s``. The defaults here give the rest
from ``linear_decode_coefficients`` (a closed form and its O(1) inverse) or, for a model
without one, by summing ``step_times_s`` and binary search. Not an ``abc.ABC`` (as
:class:`policies.allocators.base.Allocator`, for the compiled build): the abstract
methods raise NotImplementedError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from sim.latency.decode_runs import _linear_run_s, _linear_steps_within_s
from sim.latency.search import last_true

FloatArray = npt.NDArray[np.float64]


@mypyc_attr(allow_interpreted_subclasses=True)
class LatencyModel:
    """The time of one iteration of continuous batching, and of runs of decode steps.
    See the module docstring for the contracts."""

    counts_out_of_range: bool = False
    """True for a model with a validity range that counts steps outside it."""
    out_of_range_calls: int = 0
    """Steps evaluated (or noted) outside the validity range, not calls."""
    first_out_of_range: tuple[int, int, int] | None = None
    """The first such ``(prefill_tokens, decode_seqs, kv_tokens)``."""

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

    def note_run(self, decode_seqs: int, kv_first_tokens: int, steps: int) -> None:
        """The engine simulated this run: count its steps outside the validity range
        (nothing to count here)."""


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
