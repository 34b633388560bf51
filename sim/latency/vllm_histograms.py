"""vLLM's request histograms, as a Prometheus scraping it every ``scrape_interval_s``
would have stored them, from a run's per-request rows -- and written as a range dump
:mod:`sim.latency.prom_dump` reads (query_range JSON or OpenMetrics text).

Buckets are vLLM 0.33.0's defaults (``vllm/v1/metrics/buckets.py``, the families
``time_to_first_token``, ``inter_token_latency``, ``request_latency`` and
``request_tokens``; the three latency tuples below were compared equal with that
source): TTFT, TPOT and e2e latency in
seconds, and prompt and generation tokens on vLLM's 1-2-5 series up to the model's
length. What vLLM observes and when: TTFT at the first token, the others when the
request finishes; vLLM observes every inter-token interval in TPOT, fragsim records
only a request's first and last token, so each request adds ``output_tokens - 1``
observations of its mean interval (the histogram's sum is exact, its buckets are not).
Where the rows have ``admit_s`` (a run's requests do), vLLM v1's phase histograms too, at
finish with the ``request_latency`` buckets: queue (admitted less arrival), prefill (first
token less admitted), decode (finish less first token) and inference (finish less
admitted).
Only finished (``status == "ok"``) requests are counted. A sample at scrape ``k`` (time
``origin_s + k * scrape_interval_s``) counts the observations at or before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from sim.latency.prom_dump import (
    DECODE,
    E2E,
    GENERATION,
    INFERENCE,
    PREFILL,
    PROMPT,
    QUEUE,
    TPOT,
    TTFT,
    Key,
)
from traces.atomic import atomic_path

TTFT_BOUNDS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TPOT_BOUNDS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BOUNDS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


def token_bounds(max_model_len: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_model_len``."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


def _observations(requests: pd.DataFrame, max_model_len: int) -> list[tuple[str, tuple[float, ...], np.ndarray, np.ndarray, np.ndarray]]:  # fmt: skip
    """(name, bounds, observed at s, value, weight) per histogram."""
    ok = requests[requests["status"] == "ok"]
    first = ok["first_token_s"].to_numpy(np.float64)
    finish = ok["finish_s"].to_numpy(np.float64)
    arrival = ok["arrival_s"].to_numpy(np.float64)
    out_tokens = ok["output_tokens"].to_numpy(np.float64)
    intervals = np.maximum(out_tokens - 1, 0)
    tpot = np.where(intervals > 0, (finish - first) / np.maximum(intervals, 1), 0.0)
    ones = np.ones(len(ok))
    tokens = token_bounds(max_model_len)
    out = [
        (TTFT, TTFT_BOUNDS_S, first, first - arrival, ones),
        (E2E, E2E_BOUNDS_S, finish, finish - arrival, ones),
        (PROMPT, tokens, finish, ok["prompt_tokens"].to_numpy(np.float64), ones),
        (GENERATION, tokens, finish, out_tokens, ones),
        (TPOT, TPOT_BOUNDS_S, finish, tpot, intervals),
    ]
    if "admit_s" not in ok:
        return out
    admit = np.clip(ok["admit_s"].to_numpy(np.float64), arrival, first)
    return [
        *out,
        (QUEUE, E2E_BOUNDS_S, finish, admit - arrival, ones),
        (PREFILL, E2E_BOUNDS_S, finish, first - admit, ones),
        (DECODE, E2E_BOUNDS_S, finish, finish - first, ones),
        (INFERENCE, E2E_BOUNDS_S, finish, finish - admit, ones),
    ]


def histogram_series(
    requests: pd.DataFrame,
    *,
    scrape_interval_s: float,
    max_model_len: int,
    node: str = "replica",
    origin_s: float = 1_767_225_600.0,
) -> dict[Key, dict[float, float]]:
    """The cumulative series ``{(node, name, le): {unix_s: value}}`` of one replica's
    requests (``arrival_s``, ``first_token_s``, ``finish_s``, ``prompt_tokens``,
    ``output_tokens``, ``status``), scraped from 0 to past the last finish."""
    last = float(requests["finish_s"].max())
    scrapes = np.arange(0.0, last + 2 * scrape_interval_s, scrape_interval_s)
    stamps = [round(origin_s + t, 3) for t in scrapes]
    series: dict[Key, dict[float, float]] = {}
    for name, bounds, at_s, value, weight in _observations(requests, max_model_len):
        order = np.argsort(at_s, kind="stable")
        at_s, value, weight = at_s[order], value[order], weight[order]
        seen = np.searchsorted(at_s, scrapes, side="right")
        cum_weight = np.concatenate([[0.0], np.cumsum(weight)])
        cum_sum = np.concatenate([[0.0], np.cumsum(weight * value)])
        for le in (*bounds, float("inf")):
            inside = np.concatenate([[0.0], np.cumsum(weight * (value <= le))])
            label = "+Inf" if le == float("inf") else repr(le)
            series[(node, f"{name}_bucket", label)] = dict(zip(stamps, inside[seen], strict=True))
        series[(node, f"{name}_sum", "")] = dict(zip(stamps, cum_sum[seen], strict=True))
        series[(node, f"{name}_count", "")] = dict(zip(stamps, cum_weight[seen], strict=True))
    return series


def _metric(key: Key) -> dict[str, str]:
    node, name, le = key
    return {"__name__": name, "instance": node, **({"le": le} if le else {})}


def write_query_range_json(path: str | Path, series: dict[Key, dict[float, float]]) -> None:
    """One ``/api/v1/query_range`` answer holding every series, atomically."""
    result = [
        {"metric": _metric(key), "values": [[t, f"{v:.17g}"] for t, v in sorted(points.items())]}
        for key, points in sorted(series.items())
    ]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")


def openmetrics_lines(series: dict[Key, dict[float, float]]) -> Iterable[str]:
    """OpenMetrics text with timestamps in seconds, one family after another; ends
    with ``# EOF`` (``promtool tsdb create-blocks-from openmetrics`` backfills it)."""
    families = sorted({key[1].rsplit("_", 1)[0] for key in series})
    for family in families:
        yield f"# TYPE {family} histogram"
        for key, points in sorted(series.items()):
            if key[1].rsplit("_", 1)[0] != family:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in _metric(key).items() if k != "__name__")
            for t, v in sorted(points.items()):
                yield f"{key[1]}{{{labels}}} {v:.17g} {t:.3f}"
    yield "# EOF"


def write_openmetrics(path: str | Path, series: dict[Key, dict[float, float]]) -> None:
    """:func:`openmetrics_lines` to ``path``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(openmetrics_lines(series)) + "\n", encoding="utf-8")
