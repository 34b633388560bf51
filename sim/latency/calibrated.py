"""The calibrated latency model: step times fitted on a GPU, and their JSON file.

A ``fragsim-latency/1`` file (:class:`CalibrationFile`; format in docs/hardware-latency.md) holds
the coefficients of::

    step_s = intercept_s + per_prefill_token_s*p + per_decode_seq_s*d
             + per_kv_token_s*k + per_prefill_token_sq_s*p*p

for a model, GPU and tensor-parallel degree, the inclusive range of each input the fit
saw, and the fit's quality. :func:`fit_calibrated_latency` writes one from measured
steps (non-negative least squares; the range is the points' bounding box).

Contracts of :class:`CalibratedLatency` (a :class:`sim.latency.base.LatencyModel`):

* ``step_times_s`` equals ``step_time_s`` element by element, bit for bit.
* Linear for ``prefill_tokens == 0``: ``linear_decode_coefficients()`` is
  ``(intercept_s, per_decode_seq_s, per_kv_token_s)``, so the base's ``decode_run_s``
  is the closed form of :mod:`sim.latency.decode_runs` and its ``steps_within_s`` the
  exact O(1) inversion.
* Evaluating outside the validity range still answers (extrapolated); ``valid_range``
  gives the range, and a run counts the steps it simulated outside it
  (:class:`sim.latency.base.OutOfRange`). Every method is pure.
* Loading never accepts a malformed file: ValueError naming the file and the field.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy.optimize import nnls

from sim.errors import clip, short
from sim.fields import JsonObject, JsonValue
from sim.latency.base import FloatArray, InputBounds, LatencyModel
from traces.atomic import atomic_path

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
    """The ``fragsim-latency/1`` JSON document (see docs/hardware-latency.md)."""

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


MAX_STEP_S = 60.0
"""The slowest step a calibration file may give at the top of its validity range (every
input at its ``hi``, or 1 where ``hi`` is 0), seconds: a GPU step takes milliseconds."""

MAX_CALIBRATION_BYTES = 1 << 20
"""A calibration file is about 1 KB; past 1 MiB it is refused unread."""


def check_step_times(calibration: CalibrationFile, source: str) -> None:
    """ValueError naming ``source`` unless the coefficients give every step a positive,
    bounded time: each coefficient >= 0 (so a step never takes less time for more
    work); the fastest step of the validity range -- its low corner, with at least one
    prefill token or one decoding sequence -- takes more than 0 s; the slowest -- its
    top corner -- at most :data:`MAX_STEP_S` (1e308 would overflow to inf)."""
    c, v = calibration.coefficients, calibration.valid
    for name, value in c:
        if value < 0:
            raise ValueError(
                f"{source}: bad latency calibration: field coefficients.{name}: got "
                f"{value!r}: must be >= 0 (a step cannot take less time for more work)"
            )

    def step_s(p: int, d: int, k: int) -> float:
        return (
            c.intercept_s
            + c.per_prefill_token_s * p
            + c.per_prefill_token_sq_s * p * p
            + c.per_decode_seq_s * d
            + c.per_kv_token_s * k
        )

    (p_lo, p_hi), (d_lo, d_hi), (k_lo, k_hi) = v.prefill_tokens, v.decode_seqs, v.kv_tokens
    top = (max(p_hi, 1), max(d_hi, 1), max(k_hi, 1))
    slowest = step_s(*top)
    if not slowest <= MAX_STEP_S:
        raise ValueError(
            f"{source}: bad latency calibration: field coefficients: a step of "
            f"(prefill_tokens, decode_seqs, kv_tokens) = {top} takes {slowest:.3g} s; "
            f"at most {MAX_STEP_S:g} s at the top of the validity range"
        )
    fastest = min(step_s(max(p_lo, 1), d_lo, k_lo), step_s(p_lo, max(d_lo, 1), k_lo))
    if not fastest > 0:
        raise ValueError(
            f"{source}: bad latency calibration: field coefficients: the fastest step of "
            f"the validity range takes {fastest:g} s; a step must take time (intercept_s > 0)"
        )


def _read_text(path: Path) -> str:
    """The file's text: a regular file of at most MAX_CALIBRATION_BYTES, UTF-8."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    if info.st_size > MAX_CALIBRATION_BYTES:
        raise ValueError(f"{info.st_size:,} bytes; at most {MAX_CALIBRATION_BYTES:,}")
    data = path.read_bytes()
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # a leading BOM, as traces
    except UnicodeDecodeError as e:
        raise ValueError(
            f"not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})"
        ) from None


MAX_INT_DIGITS = 4300
"""An integer of more digits is refused (Python's own limit on str -> int)."""


def _int(text: str) -> int:
    """A JSON integer; ValueError worded for the user past MAX_INT_DIGITS digits."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"a number has too many digits ({digits:,}; at most {MAX_INT_DIGITS:,})")
    return int(text)


def _unique_keys(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    """A JSON object whose keys are all different (``json`` keeps the last silently)."""
    out: JsonObject = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {short(key)} given twice")
        out[key] = value
    return out


def _problems(exc: ValidationError) -> str:
    """``field a.b: got VALUE: message; ...`` for a pydantic error (values bounded)."""
    return "; ".join(
        f"field {'.'.join(str(p) for p in e['loc']) or '<root>'}: "
        + ("" if e["type"] == "missing" else f"got {short(e.get('input'))}: ")
        + clip(str(e["msg"]))
        for e in exc.errors()
    )


class CalibratedLatency(LatencyModel):
    """A model fitted on a GPU. Evaluating outside the validity range still answers
    (extrapolated); a run counts those steps against :meth:`valid_range`
    (:class:`sim.latency.base.OutOfRange`) and reports them. Linear for
    ``prefill_tokens == 0``: the base class's closed-form decode runs apply."""

    def __init__(self, calibration: CalibrationFile) -> None:
        self.calibration = calibration
        c = calibration.coefficients
        self._a, self._p, self._d = c.intercept_s, c.per_prefill_token_s, c.per_decode_seq_s
        self._k, self._pp = c.per_kv_token_s, c.per_prefill_token_sq_s
        v = calibration.valid
        self._bounds: InputBounds = (*v.prefill_tokens, *v.decode_seqs, *v.kv_tokens)

    @classmethod
    def from_dict(cls, data: object, source: str = "<dict>") -> CalibratedLatency:
        """Validate a decoded document (of any shape: the schema checks it); ValueError
        naming ``source`` and the field."""
        try:
            return cls(CalibrationFile.model_validate(data))
        except ValidationError as exc:
            raise ValueError(f"{source}: bad latency calibration: {_problems(exc)}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> CalibratedLatency:
        """Load a calibration file; ValueError naming the file (and field) when it is
        not a readable regular file of UTF-8 JSON with each key once, a field has the
        wrong type (strictly: ``"0.1"`` is not a number) or the coefficients give steps
        of no, negative or unbounded time (:func:`check_step_times`)."""
        source = clip(str(path))
        try:
            text = _read_text(Path(path))
            json.loads(text, object_pairs_hook=_unique_keys, parse_int=_int)
        except OSError as exc:
            raise ValueError(
                f"{source}: cannot read latency calibration: {exc.strerror or exc}"
            ) from None
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
            reason = "nested too deeply" if isinstance(exc, RecursionError) else clip(str(exc))
            raise ValueError(f"{source}: cannot read latency calibration: {reason}") from None
        try:
            calibration = CalibrationFile.model_validate_json(text, strict=True)
        except ValidationError as exc:
            raise ValueError(f"{source}: bad latency calibration: {_problems(exc)}") from None
        check_step_times(calibration, source)
        return cls(calibration)

    def to_json(self, path: str | Path) -> None:
        """Write the calibration (not the counters), keys in a fixed order, atomically
        (``traces.atomic.atomic_path``: never a half-written file, never a replaced
        device; ``traces.TraceError`` naming ``path`` when it cannot be written)."""
        text = json.dumps(self.calibration.model_dump(mode="json"), indent=2)
        with atomic_path(path) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")

    def check_hardware(self, model: str, gpu: str, tp: int, source: str = "") -> None:
        """ValueError when the file was calibrated for other hardware."""
        cal = self.calibration
        if (cal.model, cal.gpu, cal.tensor_parallel) != (model, gpu, tp):
            raise ValueError(
                f"{source or 'latency calibration'}: calibrated for {cal.model} on "
                f"{cal.tensor_parallel} x {cal.gpu}, scenario runs {model} on {tp} x {gpu} "
                "(set check_hardware: false to use it anyway)"
            )

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int) -> float:
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
        out = self._a + self._p * p + self._d * d + self._k * k + self._pp * p * p
        return np.asarray(out, dtype=np.float64)

    def linear_decode_coefficients(self) -> tuple[float, float, float]:
        return (self._a, self._d, self._k)

    def valid_range(self) -> InputBounds:
        return self._bounds


def fit_calibrated_latency(
    prefill_tokens: npt.ArrayLike,
    decode_seqs: npt.ArrayLike,
    kv_tokens: npt.ArrayLike,
    measured_s: npt.ArrayLike,
    *,
    model: str,
    gpu: str,
    tensor_parallel: int = 1,
    quadratic_prefill: bool = False,
    source: dict[str, str | int | float | bool] | None = None,
) -> CalibratedLatency:
    """Non-negative least-squares fit of the calibrated form to measured step times
    (``scipy.optimize.nnls``), so every coefficient is >= 0 as :func:`check_step_times`
    requires of a file, noisy measurements included; the validity range is the measured
    points' bounding box. Each design column is scaled to unit norm before the solve
    (token counts and the intercept column differ by orders of magnitude) and the
    solution unscaled after it."""
    p, d, k, y = (
        np.asarray(x, dtype=np.float64)
        for x in (prefill_tokens, decode_seqs, kv_tokens, measured_s)
    )
    columns = [np.ones_like(y), p, d, k] + ([p * p] if quadratic_prefill else [])
    design = np.column_stack(columns)
    norms = np.linalg.norm(design, axis=0)
    scale = np.where(norms > 0, norms, 1.0)  # an all-zero column keeps coefficient 0
    solution = nnls(design / scale, y)[0] / scale
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
