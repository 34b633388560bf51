"""Fit the step-time model from vLLM's OpenTelemetry request spans (``fragsim calibrate
--from-spans``).

Input: the OTLP JSON spans ``fragsim postmortem`` reads (:mod:`sim.postmortem.otlp_files`
takes the files to JSON objects). Each ok span (status not ERROR, no ``error.type``) is
one request: its start is its arrival, ``gen_ai.usage.prompt_tokens`` /
``completion_tokens`` its lengths, ``gen_ai.latency.time_to_first_token`` and
``gen_ai.latency.e2e`` the latencies fitted (``time_in_queue`` is read where present and
not needed). Failed spans are left out of the fit. The node is ``k8s.pod.name``, else
``host.name``, else ``service.instance.id`` (as the postmortem reader says).

Fit. Each node's requests are replayed through the scenario's one replica (fast mode),
so fragsim reconstructs which requests ran together; the step time is the calibrated
linear form ``intercept_s + per_prefill_token_s*p + per_decode_seq_s*d +
per_kv_token_s*k`` (:mod:`sim.latency.calibrated`), its four coefficients (>= 0) found by
``scipy.optimize.least_squares`` minimising each training request's relative TTFT and
e2e error, started from a linear fit of the scenario's own latency model. Every fifth
request (by arrival, per node) is held out: it is replayed (it loads the replica) but not
fitted, and the error reported is on those.

Refused (:class:`SpanFitError`, one line): fewer than :data:`MIN_SPANS` ok spans; an ok
span without the TTFT or e2e attribute (named by file and line); a scenario with a fleet
(each node is replayed as the scenario's single replica) or whose model cannot run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from sim.fields import JsonObject, JsonValue
from sim.latency.base import LatencyModel
from sim.latency.calibrated import LATENCY_FORMAT, CalibratedLatency, fit_calibrated_latency
from sim.postmortem.otlp_files import check_regular, documents, objects, span_entries
from sim.runner import run
from sim.scenario.schema import Scenario, ScenarioError
from sim.simulate.parts import Parts, build_parts

MIN_SPANS = 50
"""The fewest ok spans a fit accepts (a fifth of them are held out)."""
HOLD_OUT_EVERY = 5
"""Every fifth request (by arrival, per node) is held out of the fit."""
TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
_NODE_KEYS = ("k8s.pod.name", "host.name", "service.instance.id")
COEFFICIENTS = ("intercept_s", "per_prefill_token_s", "per_decode_seq_s", "per_kv_token_s")


class SpanFitError(ValueError):
    """Spans or a scenario a fit cannot use; ``str()`` is one line."""


def _value(v: JsonValue) -> JsonValue:
    """An OTLP ``AnyValue``'s scalar (``intValue`` is JSON text of an int64); None for
    anything else."""
    if not isinstance(v, dict):
        return None
    for key in ("intValue", "doubleValue", "stringValue", "boolValue"):
        if key in v:
            raw = v[key]
            if key == "intValue" and isinstance(raw, str | int | float):
                return int(raw)
            return raw
    return None


def _attrs(holder: JsonValue) -> dict[str, JsonValue]:
    """``holder["attributes"]`` (OTLP ``KeyValue``s) by key; empty where there are none."""
    if not isinstance(holder, dict):
        return {}
    return {str(a.get("key")): _value(a.get("value")) for a in objects(holder, "attributes")}


def read_span_requests(path: str | Path) -> pd.DataFrame:
    """One row per ok span: ``node``, ``arrival_s`` (from the earliest span start),
    ``prompt_tokens``, ``output_tokens``, ``ttft_s``, ``e2e_s``; sorted by node, then
    arrival. SpanFitError (or the reader's LogError) naming the file and line."""
    path = Path(path)
    files = span_entries(path) if path.is_dir() else [path]
    if not files:
        raise SpanFitError(f"{path}: no span files (*.json, *.jsonl, maybe .gz/.zst)")
    rows: list[tuple[str, int, int, int, float, float]] = []
    for f in files:
        check_regular(f)
        for line, doc in documents(f):
            for rs in objects(doc, "resourceSpans"):
                res = _attrs(rs.get("resource"))
                node = next((str(res[k]) for k in _NODE_KEYS if res.get(k)), "replica")
                for ss in objects(rs, "scopeSpans"):
                    for span in objects(ss, "spans"):
                        rows += _row(span, node, f, line)
    if len(rows) < MIN_SPANS:
        raise SpanFitError(
            f"{path}: {len(rows)} ok spans; a fit needs at least {MIN_SPANS} (from_spans.MIN_SPANS)"
        )
    frame = pd.DataFrame(
        rows, columns=["node", "start_ns", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s"]
    )
    frame["arrival_s"] = (frame["start_ns"] - frame["start_ns"].min()) / 1e9
    frame = frame.drop(columns="start_ns")
    return frame.sort_values(["node", "arrival_s"], kind="stable").reset_index(drop=True)


def _row(
    span: JsonObject, node: str, f: Path, line: int
) -> list[tuple[str, int, int, int, float, float]]:
    attrs = _attrs(span)
    status = span.get("status")
    code = status.get("code", 0) if isinstance(status, dict) else 0
    if code in (2, "STATUS_CODE_ERROR") or attrs.get("error.type") is not None:
        return []
    numbers: dict[str, int | float] = {}
    for key in (TTFT, E2E, "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"):
        value = attrs.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise SpanFitError(
                f"{f} line {line}: an ok span without {key} (got {value!r}): a fit needs "
                f"{TTFT}, {E2E} and the prompt and completion token counts on every ok span"
            )
        numbers[key] = value
    ttft, e2e = float(numbers[TTFT]), float(numbers[E2E])
    prompt, output = (
        int(numbers["gen_ai.usage.prompt_tokens"]),
        int(numbers["gen_ai.usage.completion_tokens"]),
    )
    if prompt < 1 or output < 1 or not 0 < ttft <= e2e:
        raise SpanFitError(
            f"{f} line {line}: span with prompt_tokens {prompt}, completion_tokens {output}, "
            f"ttft {ttft:g} s, e2e {e2e:g} s: expected tokens >= 1 and 0 < ttft <= e2e"
        )
    start = span.get("startTimeUnixNano") or 0
    try:
        if not isinstance(start, str | int | float):
            raise ValueError(start)
        start_ns = int(start)
    except ValueError:
        raise SpanFitError(
            f"{f} line {line}: startTimeUnixNano {start!r}: expected an integer (nanoseconds)"
        ) from None
    return [(node, start_ns, prompt, output, ttft, e2e)]


@dataclass
class Replay:
    """The scenario's parts and each node's requests (canonical frames)."""

    scenario: Scenario
    parts: Parts
    frames: list[pd.DataFrame]
    observed: pd.DataFrame
    """The spans' rows in replay order, with ``held_out`` (bool)."""

    def requests(self, latency: LatencyModel) -> list[pd.DataFrame]:
        """Each node's run under ``latency``: its requests frame (the run's columns),
        one row per frame row, in the frame's order."""
        parts = [dataclasses.replace(self.parts, latency=latency)]
        return [
            run(self.scenario, frame, parts=parts)
            .requests.set_index("request_id")
            .reindex(frame["request_id"])
            .reset_index()
            for frame in self.frames
        ]

    def phases(self, latency: LatencyModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(admit, first token, finish) of every observed row less its arrival,
        replayed under ``latency``; NaN where a request did not finish."""
        admit: list[np.ndarray] = []
        ttft: list[np.ndarray] = []
        e2e: list[np.ndarray] = []
        for frame, res in zip(self.frames, self.requests(latency), strict=True):
            arrival = frame["arrival_s"].to_numpy()
            ok = (res["status"] == "ok").to_numpy()
            for out, column in ((admit, "admit_s"), (ttft, "first_token_s"), (e2e, "finish_s")):
                out.append(np.where(ok, res[column].to_numpy(np.float64) - arrival, np.nan))
        return np.concatenate(admit), np.concatenate(ttft), np.concatenate(e2e)

    def predict(self, latency: LatencyModel) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT, e2e) of every observed row, replayed under ``latency``; NaN where a
        request did not finish."""
        _, ttft, e2e = self.phases(latency)
        return ttft, e2e


def prepare(scenario: Scenario, spans: pd.DataFrame) -> Replay:
    """Check the scenario can replay the spans (SpanFitError) and build the frames."""
    if scenario.fleet is not None:
        raise SpanFitError(
            "the scenario has a fleet: calibrate --from-spans replays each node's spans "
            "through the scenario's one replica (give a single-replica scenario)"
        )
    scenario = scenario.model_copy(update={"mode": "fast"})
    frames = []
    observed = []
    for node, group in spans.groupby("node", sort=True):
        group = group.reset_index(drop=True)
        n = len(group)
        frame = pd.DataFrame(
            {
                "request_id": np.arange(n, dtype=np.int64),
                "arrival_s": group["arrival_s"].to_numpy(np.float64)
                - float(group["arrival_s"].min()),
                "prompt_tokens": group["prompt_tokens"].to_numpy(np.float64),
                "output_tokens": group["output_tokens"].to_numpy(np.float64),
            }
        )
        frames.append(frame)
        observed.append(group.assign(held_out=np.arange(n) % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1))
        del node
    try:
        parts = build_parts(scenario, frames[0])
    except (ScenarioError, ValueError) as e:
        raise SpanFitError(f"the scenario cannot run: {e}") from None
    longest = int(spans["prompt_tokens"].max() + spans["output_tokens"].max())
    if longest > parts.spec.max_seq_tokens:
        raise SpanFitError(
            f"the scenario's model cannot run the spans: a span of {longest} tokens > the "
            f"model's max_seq_tokens {parts.spec.max_seq_tokens}"
        )
    obs = pd.concat(observed, ignore_index=True)
    return Replay(scenario, parts, frames, obs)


def _linear(coefficients: np.ndarray, replay: Replay) -> CalibratedLatency:
    hw = replay.scenario.hardware
    sched = replay.parts.scheduler
    doc = {
        "format": LATENCY_FORMAT,
        "model": hw.model_spec.name,
        "gpu": hw.gpu_spec.name,
        "tensor_parallel": hw.tensor_parallel,
        "coefficients": dict(zip(COEFFICIENTS, map(float, coefficients), strict=True)),
        "valid": {
            "prefill_tokens": [0, int(sched.max_num_batched_tokens)],
            "decode_seqs": [0, int(sched.max_num_seqs)],
            "kv_tokens": [0, int(replay.parts.kv_capacity_tokens)],
        },
    }
    return CalibratedLatency.from_dict(doc, source="calibrate --from-spans")


def start_coefficients(replay: Replay) -> np.ndarray:
    """A linear fit of the scenario's own latency model over its scheduler's range."""
    rng = np.random.default_rng(0)
    sched, cap = replay.parts.scheduler, replay.parts.kv_capacity_tokens
    p = rng.integers(0, sched.max_num_batched_tokens + 1, 400)
    d = rng.integers(1, sched.max_num_seqs + 1, 400)
    k = rng.integers(0, cap + 1, 400)
    y = replay.parts.latency.step_times_s(p, d, k)
    fit = fit_calibrated_latency(p, d, k, y, model="m", gpu="g")
    return np.array([getattr(fit.calibration.coefficients, c) for c in COEFFICIENTS])


def errors(pred: np.ndarray, obs: np.ndarray) -> tuple[float, float]:
    """(MAPE, p90 absolute percentage error) as fractions; a NaN prediction counts 100 %."""
    ape = np.abs(pred - obs) / obs
    ape = np.where(np.isfinite(ape), ape, 1.0)
    return float(np.mean(ape)), float(np.quantile(ape, 0.9))


@dataclass(frozen=True)
class SpanFit:
    latency: CalibratedLatency
    table: list[tuple[str, int, float, float]]
    """(metric, held-out requests, MAPE, p90 APE) for TTFT and e2e."""
    evaluations: int


Residuals = Callable[[CalibratedLatency], np.ndarray]
"""A candidate step-time model -> the residuals to minimise (it replays what it compares)."""


def solve_linear(
    replay: Replay,
    residuals: Residuals,
    *,
    max_evaluations: int = 100,
    start: CalibratedLatency | None = None,
) -> tuple[CalibratedLatency, int]:
    """The linear step-time model minimising ``residuals`` (``scipy.optimize.least_squares``,
    the four coefficients >= 0, started from ``start`` or :func:`start_coefficients`;
    scaled by the latter), and the models it tried. One solver for spans and Prometheus
    dumps: each says only what it compares. A non-finite residual (a request the replay
    did not finish) counts 10."""
    c0 = start_coefficients(replay)
    typical = np.array([1.0, 512.0, 16.0, 8192.0])
    scale = np.where(c0 > 0, c0, c0[0] / typical)
    calls = [0]

    def scaled(x: np.ndarray) -> np.ndarray:
        calls[0] += 1
        r = residuals(_linear(np.maximum(x, 0) * scale, replay))
        return np.where(np.isfinite(r), r, 10.0)

    if start is not None:
        c = start.calibration.coefficients
        c0 = np.array([getattr(c, name) for name in COEFFICIENTS])
    x0 = c0 / scale
    x0[0] = max(x0[0], 1e-3)
    solution = least_squares(
        scaled, x0, bounds=(0, np.inf), diff_step=0.02, x_scale="jac",
        max_nfev=max_evaluations, method="trf",
    )  # fmt: skip
    return _linear(np.maximum(solution.x, 0) * scale, replay), calls[0]


def fit_from_spans(
    scenario: Scenario, spans: pd.DataFrame, *, source: str = "", max_evaluations: int = 100
) -> SpanFit:
    """Fit (module docstring); deterministic for the same spans and scenario."""
    replay = prepare(scenario, spans)
    obs = replay.observed
    train = ~obs["held_out"].to_numpy()
    o_ttft, o_e2e = obs["ttft_s"].to_numpy(), obs["e2e_s"].to_numpy()

    def residuals(ttft: np.ndarray, e2e: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [(ttft - o_ttft)[train] / o_ttft[train], (e2e - o_e2e)[train] / o_e2e[train]]
        )

    latency, calls = solve_linear(
        replay, lambda model: residuals(*replay.predict(model)), max_evaluations=max_evaluations
    )
    ttft, e2e = replay.predict(latency)
    held = ~train
    table = []
    for name, pred, o in (("TTFT", ttft, o_ttft), ("e2e", e2e, o_e2e)):
        mape, p90 = errors(pred[held], o[held])
        table.append((name, int(held.sum()), mape, p90))
    e2e_held = o_e2e[held]
    resid = np.where(np.isfinite(e2e[held]), e2e[held], 0.0) - e2e_held
    total = float(np.sum((e2e_held - e2e_held.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / total if total > 0 else 1.0
    doc = latency.calibration.model_dump(mode="json")
    doc["fit"] = {"r2": min(r2, 1.0), "mape": table[1][2], "samples": table[1][1]}
    doc["source"] = {
        "fitted_from": "otlp spans",
        "spans": source,
        "requests": len(obs),
        "held_out_requests": int(held.sum()),
        "held_out_ttft_mape": table[0][2],
        "held_out_ttft_p90_ape": table[0][3],
        "held_out_e2e_mape": table[1][2],
        "held_out_e2e_p90_ape": table[1][3],
        "evaluations": calls,
    }
    return SpanFit(CalibratedLatency.from_dict(doc, source="calibrate --from-spans"), table, calls)
