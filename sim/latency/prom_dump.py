"""A Prometheus range dump of vLLM's ``vllm:*`` histograms, read into per-window
increments (``fragsim calibrate --from-prometheus``, :mod:`sim.latency.from_prometheus`).

Formats (a file, or a folder whose regular files are read in name order; a file
starting with gzip's magic bytes is gunzipped, whatever its name):

* **query_range JSON** -- what ``GET /api/v1/query_range`` answers: ``{"status":
  "success", "data": {"resultType": "matrix", "result": [{"metric": {...}, "values":
  [[unix_s, "value"], ...]}, ...]}}``. A file may hold several such documents, one per
  line (one query per metric). Timestamps in seconds.
* **text samples** -- one sample a line, ``name{label="v",...} value timestamp`` (the
  Prometheus text format: timestamps in milliseconds) or ``{__name__="name", ...} value
  timestamp_ms`` (what ``promtool tsdb dump`` prints); a file holding a ``# EOF`` line
  is OpenMetrics, its timestamps in seconds. ``#`` lines and blank lines are skipped;
  every sample needs a timestamp.

Series. Only ``vllm:*`` names are kept. A sample's node is its ``pod`` label, else
``instance``, else ``replica``; an ``engine`` label (vLLM's data-parallel engine index)
is appended (``pod/engine 1``). Series of one node, name and ``le`` that differ in other
labels (``model_name``, ``job``, ``finished_reason``) are summed at each timestamp.

Histograms. :data:`NEEDED` must be there for every node; vLLM v1's phase histograms
(:data:`PHASES`) and TPOT (or ITL) are read where present.

Windows. A node's windows run between consecutive timestamps of its
``vllm:e2e_request_latency_seconds_count``; the increment of a counter over a window is
its difference, or its new value where it fell (a restart: counters reset to 0). A
window some needed series has no sample at both ends of is left out.

Errors: :class:`DumpError` (a :class:`sim.latency.from_spans.SpanFitError`: one line,
naming the file and line or the series).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.latency.from_spans import SpanFitError

TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"
TPOT = "vllm:time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
"""vLLM's newer name for TPOT's per-token histogram; either is read."""
QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
INFERENCE = "vllm:request_inference_time_seconds"
PHASES = (QUEUE, PREFILL, DECODE, INFERENCE)
"""vLLM v1's per-phase request histograms (observed at finish, ``request_latency``
buckets): read where the dump has them, and the fit uses them (waiting, scheduled to
first token, first to last token, scheduled to last token)."""
NEEDED = (TTFT, E2E, PROMPT, GENERATION)
"""The histograms a fit needs, each as ``_bucket``, ``_sum`` and ``_count``."""
_NODE_LABELS = ("pod", "instance")
_SAMPLE = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


class DumpError(SpanFitError):
    """A dump a fit cannot use; ``str()`` is one line."""


@dataclass(frozen=True)
class Histogram:
    """One window's increments of a histogram: ``counts[i]`` observations at most
    ``bounds[i]`` (cumulative, as Prometheus's ``le``; the last bound is ``inf``)."""

    bounds: np.ndarray
    counts: np.ndarray
    sum: float
    count: float

    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan


@dataclass(frozen=True)
class Window:
    """A node's interval ``(start_s, end_s]`` and its histograms' increments (by name;
    the TPOT histogram under :data:`TPOT` when the dump has it or ITL)."""

    node: str
    start_s: float
    end_s: float
    histograms: dict[str, Histogram]

    @property
    def requests(self) -> int:
        """Requests finished in the window (the e2e histogram's count)."""
        return round(self.histograms[E2E].count)


Key = tuple[str, str, str]
"""(node, series name, le label or "")."""


def _unescape(value: str) -> str:
    return value.replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")


def _labels(text: str, where: str) -> dict[str, str]:
    body, out, pos = text[1:-1], {}, 0
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if m is None:
            raise DumpError(f'{where}: bad labels {text[:80]!r}: expected name="value", ...')
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _key(name: str, labels: dict[str, str]) -> Key:
    node = next((labels[k] for k in _NODE_LABELS if labels.get(k)), "replica")
    if labels.get("engine"):
        node = f"{node}/engine {labels['engine']}"
    return node, name, labels.get("le", "")


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DumpError(f"{where}: {what} {text[:40]!r} is not a number") from None
    if math.isnan(value) and what == "timestamp":
        raise DumpError(f"{where}: timestamp is NaN")
    return value


def _text(path: Path, lines: list[str]) -> Iterator[tuple[Key, float, float]]:
    per_s = 1.0 if any(line.strip() == "# EOF" for line in lines) else 1e-3
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path} line {n}"
        m = _SAMPLE.match(line)
        if m is None:
            raise DumpError(f"{where}: expected a sample: name{{labels}} value timestamp")
        labels = _labels(m.group(2), where) if m.group(2) else {}
        name = m.group(1) or labels.pop("__name__", "")
        if not name:
            raise DumpError(f"{where}: a sample without a metric name")
        if not name.startswith("vllm:"):
            continue
        if m.group(4) is None:
            raise DumpError(f"{where}: a sample without a timestamp: a range dump needs one")
        value = _number(m.group(3), "value", where)
        yield _key(name, labels), _number(m.group(4), "timestamp", where) * per_s, value


def _json(path: Path, lines: list[str]) -> Iterator[tuple[Key, float, float]]:
    text = "\n".join(lines)
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        docs = []
        for n, line in enumerate(lines, 1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DumpError(f"{path} line {n}: not JSON: {e.msg}") from None
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("status") != "success":
            status = doc.get("status") if isinstance(doc, dict) else type(doc).__name__
            error = doc.get("error", "") if isinstance(doc, dict) else ""
            raise DumpError(
                f"{path}: field status: got {status!r} {error}: expected a successful "
                "/api/v1/query_range answer"
            )
        data = doc.get("data") or {}
        if data.get("resultType") != "matrix":
            raise DumpError(
                f"{path}: field data.resultType: got {data.get('resultType')!r}: expected "
                "'matrix' (a range query: /api/v1/query_range, not /api/v1/query)"
            )
        for i, series in enumerate(data.get("result") or []):
            labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
            name = labels.pop("__name__", "")
            if not name.startswith("vllm:"):
                continue
            key = _key(name, labels)
            for pair in series.get("values") or []:
                where = f"{path}: field data.result[{i}].values"
                if not isinstance(pair, list) or len(pair) != 2:
                    raise DumpError(f'{where}: expected [unix_s, "value"] pairs')
                yield (
                    key,
                    _number(str(pair[0]), "timestamp", where),
                    _number(str(pair[1]), "value", where),
                )


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DumpError(f"{path}: an empty folder: give a Prometheus range dump")
        return files
    if not path.is_file():
        raise DumpError(f"{path}: not a file or folder")
    return [path]


def _read_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise DumpError(f"{path}: damaged gzip: {e}") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff").splitlines()
    except UnicodeDecodeError as e:
        raise DumpError(f"{path}: not UTF-8 text (offset {e.start})") from None


def read_samples(path: str | Path) -> dict[Key, dict[float, float]]:
    """Every ``vllm:*`` sample of the dump, summed over the labels that are not the
    node's or ``le``: ``{(node, name, le): {timestamp_s: value}}``."""
    path = Path(path)
    series: dict[Key, dict[float, float]] = defaultdict(dict)
    for f in _files(path):
        lines = _read_lines(f)
        first = next((line.lstrip() for line in lines if line.strip()), "")
        samples = _json(f, lines) if first.startswith(('{"', "[")) else _text(f, lines)
        for key, t_s, value in samples:
            t = round(t_s, 3)  # Prometheus keeps milliseconds
            points = series[key]
            points[t] = points.get(t, 0.0) + value
    return dict(series)


def _increase(points: dict[float, float], times: list[float]) -> np.ndarray | None:
    """Each window's increase, or None where a time is missing."""
    if any(t not in points for t in times):
        return None
    v = np.array([points[t] for t in times])
    d = np.diff(v)
    return np.where(d >= 0, d, v[1:])


def _histogram_increases(
    series: dict[Key, dict[float, float]], node: str, name: str, times: list[float]
) -> list[Histogram | None] | None:
    """The histogram's increments per window (None for a window it misses), or None when
    the node has no such histogram."""
    buckets = sorted(
        (float(le), points)
        for (n, s, le), points in series.items()
        if n == node and s == f"{name}_bucket" and le
    )
    total = series.get((node, f"{name}_sum", ""))
    count = series.get((node, f"{name}_count", ""))
    if not buckets or total is None or count is None:
        return None
    bounds = np.array([b for b, _ in buckets])
    parts = [_increase(p, times) for _, p in buckets]
    sums, counts = _increase(total, times), _increase(count, times)
    out: list[Histogram | None] = []
    for w in range(len(times) - 1):
        if sums is None or counts is None or any(p is None for p in parts):
            out.append(None)
            continue
        cum = np.array([p[w] for p in parts if p is not None])
        out.append(Histogram(bounds, np.maximum.accumulate(cum), float(sums[w]), float(counts[w])))
    return out


def read_windows(path: str | Path) -> list[Window]:
    """The dump's windows, by node then time (module docstring); DumpError when it has
    no ``vllm:*`` series or lacks one of :data:`NEEDED` (named, with what to query)."""
    return windows_of(read_samples(path), str(path))


def windows_of(series: dict[Key, dict[float, float]], path: str) -> list[Window]:
    """:func:`read_windows` of samples already read (``path`` names them in errors)."""
    if not series:
        raise DumpError(
            f"{path}: no vllm:* series: export vLLM's histograms, e.g. query "
            '{__name__=~"vllm:.*"} (docs/hardware-latency.md)'
        )
    nodes = sorted({node for node, _, _ in series})
    windows: list[Window] = []
    for node in nodes:
        for name in NEEDED:
            for part in ("_bucket", "_sum", "_count"):
                if not any(n == node and s == name + part for n, s, _ in series):
                    raise DumpError(
                        f"{path}: node {node!r} has no {name}{part} series: a fit needs "
                        f"{', '.join(NEEDED)}, each with _bucket, _sum and _count"
                    )
        times = sorted(series[(node, f"{E2E}_count", "")])
        per_name = {name: _histogram_increases(series, node, name, times) for name in NEEDED}
        tpot = _histogram_increases(series, node, TPOT, times) or _histogram_increases(
            series, node, ITL, times
        )
        phases = {name: _histogram_increases(series, node, name, times) for name in PHASES}
        for w in range(len(times) - 1):
            got = [(name, h[w]) for name, h in per_name.items() if h is not None]
            hists = {name: h for name, h in got if h is not None}
            if len(hists) < len(NEEDED):
                continue
            extra = tpot[w] if tpot is not None else None
            if extra is not None:
                hists[TPOT] = extra
            for name, phase in phases.items():
                one = phase[w] if phase is not None else None
                if one is not None:
                    hists[name] = one
            windows.append(Window(node, times[w], times[w + 1], hists))
    return windows


def histogram_quantile(q: float, bounds: np.ndarray, counts: np.ndarray) -> float:
    """PromQL's ``histogram_quantile``: linear interpolation within the bucket holding
    rank ``q * total`` (the first bucket from 0); the ``+Inf`` bucket answers the
    highest finite bound; NaN for an empty histogram."""
    total = float(counts[-1]) if len(counts) else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    i = int(np.searchsorted(counts, rank, side="left"))
    i = min(i, len(counts) - 1)
    if math.isinf(bounds[i]):
        return float(bounds[i - 1]) if i > 0 else math.nan
    lo = float(bounds[i - 1]) if i > 0 else 0.0
    below = float(counts[i - 1]) if i > 0 else 0.0
    inside = float(counts[i]) - below
    if inside <= 0:
        return float(bounds[i])
    return lo + (float(bounds[i]) - lo) * (rank - below) / inside


def bucket_counts(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Cumulative counts of ``values`` at most each bound (Prometheus's ``le``)."""
    return np.searchsorted(np.sort(values), bounds, side="right").astype(np.float64)
