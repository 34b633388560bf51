"""Latency test helpers: a calibration file's mapping, a model known only through the
protocol, and decode runs walked step by step from their definition (the slow, obvious
reference of the closed forms and their inversion in ``sim.latency``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sim.latency.calibrated import LATENCY_FORMAT
from sim.latency.models import LatencyModel


def calibration_document(
    *, valid_kv_tokens: tuple[int, int] = (0, 262_144), **coefficients: float
) -> dict[str, Any]:
    """A calibration file's mapping (``CalibratedLatency.from_dict``) for llama-2-7b on
    an A100: a 7 ms step, 60 us a prefill token, 40 us a decoding sequence, 30 ns a KV
    token, changed by ``coefficients``; valid for prefills of up to 8,192 tokens, up to
    256 sequences and ``valid_kv_tokens``."""
    return {
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
        "valid": {
            "prefill_tokens": [0, 8192],
            "decode_seqs": [0, 256],
            "kv_tokens": list(valid_kv_tokens),
        },
    }


class ForeignLatency(LatencyModel):
    """A latency model that gives only the step methods of :class:`LatencyModel` (and a
    linear form only when ``linear`` is True): runs and their inversion come from
    whatever ``sim.latency`` does for a model it does not know."""

    def __init__(self, inner: LatencyModel, linear: bool = False) -> None:
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


def decode_step_times_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, steps: int
) -> list[float]:
    """The times of a decode run's steps, one ``step_time_s`` call each: step ``i`` runs
    ``decode_seqs`` sequences over ``kv_tokens_start + i * decode_seqs`` KV tokens."""
    return [
        model.step_time_s(0, decode_seqs, kv_tokens_start + i * decode_seqs) for i in range(steps)
    ]


def stepwise_steps_within_s(
    model: LatencyModel, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
) -> int | None:
    """How many whole steps of a decode run end within ``budget_s``, by walking the run
    one step at a time (adding each step's time) until the next step would end past the
    budget or ``max_steps`` steps are done. None when a step takes negative time: the
    run is then not monotone and "the steps that fit" has no single answer.

    Linear in the answer: call it only where the answer is small."""
    total_s, steps = 0.0, 0
    while steps < max_steps:
        step_s = model.step_time_s(0, decode_seqs, kv_tokens_start + steps * decode_seqs)
        if step_s < 0:
            return None
        if not total_s + step_s <= budget_s:  # NaN budgets too
            break
        total_s += step_s
        steps += 1
    return steps
