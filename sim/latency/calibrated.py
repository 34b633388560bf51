"""The calibrated latency model: step times fitted on a GPU, and their JSON file.

A ``fragsim-latency/1`` file (:class:`CalibrationFile`; format in the README) holds
the coefficients of::

    step_s = intercept_s + per_prefill_token_s*p + per_decode_seq_s*d
             + per_kv_token_s*k + per_prefill_token_sq_s*p*p

for a model, GPU and tensor-parallel degree, the inclusive range of each input the fit
saw, and the fit's quality. :func:`fit_calibrated_latency` writes one from measured
steps (least squares; the range is the points' bounding box).

Contracts of :class:`CalibratedLatency` (a :class:`sim.latency.LatencyModel`):

* ``step_times_s`` equals ``step_time_s`` element by element, bit for bit.
* Linear for ``prefill_tokens == 0``: ``linear_decode_coefficients()`` is
  ``(intercept_s, per_decode_seq_s, per_kv_token_s)``; ``decode_run_s`` is the closed
  form of :mod:`sim.decode_runs` and ``steps_within_s`` its exact O(1) inversion.
* Evaluating outside the validity range still answers but is counted (steps, not
  calls), except in what-if evaluations (``record=False``, ``steps_within_s``).
* Loading never accepts a malformed file: ValueError naming the file and the field.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.latency.decode_runs import _bisect_run_s, _linear_run_s, _linear_steps_within_s

FloatArray = npt.NDArray[np.float64]

LATENCY_FORMAT = "fragsim-latency/1"
"""The ``format`` tag of calibration files this version reads and writes."""

_Bounds = tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]


class LatencyCoefficients(BaseModel):
    """``step_s = intercept_s + per_prefill_token_s*p + per_decode_seq_s*d
    + per_kv_token_s*k + per_prefill_token_sq_s*p*p`` (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    intercept_s: float
    per_prefill_token_s: float
    per_decode_seq_s: float
    per_kv_token_s: float
    per_prefill_token_sq_s: float = 0.0


class ValidRange(BaseModel):
    """Inclusive ``[lo, hi]`` of each input the fit saw; outside it, steps are counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_tokens: _Bounds
    decode_seqs: _Bounds
    kv_tokens: _Bounds

    @model_validator(mode="after")
    def _ordered(self) -> ValidRange:
        for name in ("prefill_tokens", "decode_seqs", "kv_tokens"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ValueError(f"{name}: lo {lo} > hi {hi}")
        return self


class FitQuality(BaseModel):
    """How well the coefficients fit the measured steps."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    r2: float = Field(le=1)
    mape: float = Field(ge=0, description="Mean absolute percentage error, as a fraction.")
    samples: int = Field(ge=1)


class CalibrationFile(BaseModel):
    """The ``fragsim-latency/1`` JSON document (see the README)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["fragsim-latency/1"]
    model: str = Field(min_length=1, description="Model preset name (ModelSpec.name).")
    gpu: str = Field(min_length=1, description="GPU preset name (GpuSpec.name).")
    tensor_parallel: int = Field(default=1, ge=1)
    coefficients: LatencyCoefficients
    valid: ValidRange
    fit: FitQuality | None = None
    source: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Provenance: device, software versions, date."
    )


class CalibratedLatency:
    """A model fitted on a GPU. Evaluating outside the validity range still answers but
    is counted: ``out_of_range_calls`` (steps, not calls, for the vectorised forms) and
    ``first_out_of_range`` (the first offending ``(prefill_tokens, decode_seqs,
    kv_tokens)``), so the engine can report it. Linear for ``prefill_tokens == 0``."""

    def __init__(self, calibration: CalibrationFile) -> None:
        self.calibration = calibration
        c = calibration.coefficients
        self._a, self._p, self._d = c.intercept_s, c.per_prefill_token_s, c.per_decode_seq_s
        self._k, self._pp = c.per_kv_token_s, c.per_prefill_token_sq_s
        v = calibration.valid
        self._bounds = (*v.prefill_tokens, *v.decode_seqs, *v.kv_tokens)
        self.out_of_range_calls = 0
        self.first_out_of_range: tuple[int, int, int] | None = None

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> CalibratedLatency:
        """Validate a decoded document; ValueError naming ``source`` and the field."""
        try:
            return cls(CalibrationFile.model_validate(data))
        except ValidationError as exc:
            problems = "; ".join(
                f"field {'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(f"{source}: bad latency calibration: {problems}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> CalibratedLatency:
        """Load a calibration file; ValueError naming the file (and field) when bad."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read latency calibration: {exc}") from None
        return cls.from_dict(data, source=str(path))

    def to_json(self, path: str | Path) -> None:
        """Write the calibration (not the counters), keys in a fixed order."""
        text = json.dumps(self.calibration.model_dump(mode="json"), indent=2)
        Path(path).write_text(text + "\n", encoding="utf-8")

    def check_hardware(self, model: str, gpu: str, tp: int, source: str = "") -> None:
        """ValueError when the file was calibrated for other hardware."""
        cal = self.calibration
        if (cal.model, cal.gpu, cal.tensor_parallel) != (model, gpu, tp):
            raise ValueError(
                f"{source or 'latency calibration'}: calibrated for {cal.model} on "
                f"{cal.tensor_parallel} x {cal.gpu}, scenario runs {model} on {tp} x {gpu} "
                "(set check_hardware: false to use it anyway)"
            )

    def _note(self, point: tuple[int, int, int], steps: int) -> None:
        self.out_of_range_calls += steps
        if self.first_out_of_range is None:
            self.first_out_of_range = point

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
        p_lo, p_hi, d_lo, d_hi, k_lo, k_hi = self._bounds
        if not (
            p_lo <= prefill_tokens <= p_hi
            and d_lo <= decode_seqs <= d_hi
            and k_lo <= kv_tokens <= k_hi
        ):
            self._note((int(prefill_tokens), int(decode_seqs), int(kv_tokens)), 1)
        return float(
            self._a
            + self._p * prefill_tokens
            + self._d * decode_seqs
            + self._k * kv_tokens
            + self._pp * prefill_tokens * prefill_tokens
        )

    def step_times_s(
        self,
        prefill_tokens: npt.NDArray[Any],
        decode_seqs: npt.NDArray[Any],
        kv_tokens: npt.NDArray[Any],
    ) -> FloatArray:
        p, d, k = np.broadcast_arrays(
            np.asarray(prefill_tokens), np.asarray(decode_seqs), np.asarray(kv_tokens)
        )
        p_lo, p_hi, d_lo, d_hi, k_lo, k_hi = self._bounds
        outside = (p < p_lo) | (p > p_hi) | (d < d_lo) | (d > d_hi) | (k < k_lo) | (k > k_hi)
        count = int(np.count_nonzero(outside))
        if count:
            i = np.unravel_index(int(np.argmax(outside)), outside.shape)
            self._note((int(p[i]), int(d[i]), int(k[i])), count)
        out = self._a + self._p * p + self._d * d + self._k * k + self._pp * p * p
        return np.asarray(out, dtype=np.float64)

    def linear_decode_coefficients(self) -> tuple[float, float, float]:
        return (self._a, self._d, self._k)

    def decode_run_s(
        self, decode_seqs: int, kv_tokens_start: int, steps: int, *, record: bool = True
    ) -> float:
        """Closed form; counts the run's out-of-range steps as ``step_time_s`` would
        (unless ``record`` is False: a what-if evaluation)."""
        if steps <= 0:
            return 0.0
        if record:
            self._note_run(decode_seqs, kv_tokens_start, steps)
        return _linear_run_s((self._a, self._d, self._k), decode_seqs, kv_tokens_start, steps)

    def steps_within_s(
        self, decode_seqs: int, kv_tokens_start: int, budget_s: float, max_steps: int
    ) -> int:
        """:func:`sim.latency.decode_steps_within_s` in O(1); records no out-of-range
        steps. A run that may not be monotone is answered by binary search."""
        coefficients = (self._a, self._d, self._k)
        steps = _linear_steps_within_s(
            coefficients, decode_seqs, kv_tokens_start, budget_s, max_steps
        )
        if steps is not None:
            return steps
        run_s = functools.partial(self.decode_run_s, decode_seqs, kv_tokens_start, record=False)
        return _bisect_run_s(run_s, budget_s, max_steps)

    def _note_run(self, decode_seqs: int, kv_tokens_start: int, steps: int) -> None:
        p_lo, p_hi, d_lo, d_hi, k_lo, k_hi = self._bounds
        if not (p_lo <= 0 <= p_hi and d_lo <= decode_seqs <= d_hi):
            self._note((0, decode_seqs, kv_tokens_start), steps)
        else:  # kv of step i is kv_tokens_start + i*decode_seqs: in range for i in [first, last]
            n = max(decode_seqs, 0)
            if n == 0:
                first, last = (0, steps - 1) if k_lo <= kv_tokens_start <= k_hi else (0, -1)
            else:
                first = max(0, -(-(k_lo - kv_tokens_start) // n))
                last = min(steps - 1, (k_hi - kv_tokens_start) // n)
            inside = max(0, last - first + 1)
            if inside < steps:
                bad = 0 if first > 0 or inside == 0 else last + 1
                self._note((0, decode_seqs, kv_tokens_start + bad * n), steps - inside)


def fit_calibrated_latency(
    prefill_tokens: npt.NDArray[Any],
    decode_seqs: npt.NDArray[Any],
    kv_tokens: npt.NDArray[Any],
    measured_s: npt.NDArray[Any],
    *,
    model: str,
    gpu: str,
    tensor_parallel: int = 1,
    quadratic_prefill: bool = False,
    source: dict[str, str | int | float | bool] | None = None,
) -> CalibratedLatency:
    """Least-squares fit of the calibrated form to measured step times; the validity
    range is the measured points' bounding box."""
    p, d, k, y = (
        np.asarray(x, dtype=np.float64)
        for x in (prefill_tokens, decode_seqs, kv_tokens, measured_s)
    )
    columns = [np.ones_like(y), p, d, k] + ([p * p] if quadratic_prefill else [])
    design = np.column_stack(columns)
    solution = np.linalg.lstsq(design, y, rcond=None)[0]
    predicted = design @ solution
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - predicted) ** 2)) / total if total > 0 else 1.0
    names = (
        "intercept_s",
        "per_prefill_token_s",
        "per_decode_seq_s",
        "per_kv_token_s",
        "per_prefill_token_sq_s",
    )
    document = {
        "format": LATENCY_FORMAT,
        "model": model,
        "gpu": gpu,
        "tensor_parallel": tensor_parallel,
        "coefficients": {name: float(v) for name, v in zip(names, solution, strict=False)},
        "valid": {
            name: [int(np.min(x)), int(np.max(x))]
            for name, x in (("prefill_tokens", p), ("decode_seqs", d), ("kv_tokens", k))
        },
        "fit": {
            "r2": min(r2, 1.0),
            "mape": float(np.mean(np.abs(predicted - y) / y)),
            "samples": int(y.size),
        },
        "source": dict(source or {}),
    }
    return CalibratedLatency.from_dict(document, source="fit_calibrated_latency")
