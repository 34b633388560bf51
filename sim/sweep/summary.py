"""A sweep's tables: one row per run (``runs.parquet``) and one per point of the sweep
(``summary.parquet`` / ``summary.csv``) with each metric's mean and 95 % confidence
interval over the point's replications.

The interval is Student's t over the replications that finished:
``mean +/- t(0.975, n-1) * sd / sqrt(n)`` with the sample standard deviation; with one
replication (or a metric missing in all but one) the bounds are NaN. Metric values
missing from a run (a single replica has no price) are left out of its point's mean.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd
from scipy import stats

from sim.fields import JsonValue
from sim.results.compare import compare_row
from sim.results.summary_model import Summary
from sim.sweep.execute import Outcome
from traces.atomic import staged
from traces.errors import TraceError

METRICS: tuple[str, ...] = (
    "requests",
    "failed_requests",
    "failure_rate",
    "allocation_failures",
    "fragmentation_failures",
    "failures_at_high_free",
    "restarts",
    "replicas_mean",
    "replicas_peak",
    "replica_hours",
    "avoidable_replica_hours",
    "cost_usd",
    "cost_per_million_output_tokens_usd",
    "output_tokens_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
)
"""The metrics of a run, in column order: ``compare_row``'s and a few more."""

Cell: TypeAlias = str | int | float | bool | None
"""A value of a table's cell (a Parquet column holds one of these kinds)."""


def metrics(summary: Summary) -> dict[str, float]:
    """A run's metrics (:data:`METRICS`) from its summary; NaN where it has none (a
    summary read back from ``summary.json`` writes an undefined statistic as null)."""
    row = compare_row(summary)
    latency = summary.latency_s
    total = row["requests"]
    row["failure_rate"] = row["failed_requests"] / total if total else math.nan
    row["output_tokens_per_s"] = summary.throughput.output_tokens_per_s
    for name, p in (("ttft", latency.ttft), ("tpot", latency.tpot), ("e2e", latency.e2e)):
        for q, value in (("p50", p.p50), ("p99", p.p99)):
            row[f"{name}_{q}_s"] = math.nan if value is None else float(value)
    return {m: math.nan if row[m] is None else float(row[m]) for m in METRICS}


def param_value(value: JsonValue) -> Cell:
    """A parameter as a table cell: scalars as they are, mappings and lists as JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def _param_columns(frame: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """A parameter column whose values are of several types becomes text (Parquet
    columns hold one type)."""
    for name in params:
        kinds = {type(v) for v in frame[name] if v is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            frame[name] = [None if v is None else str(v) for v in frame[name]]
    return frame


RUN_COLUMNS = ("id", "point", "replication", "seed", "status", "error")
"""The columns of ``runs.parquet`` besides the parameters and :data:`METRICS`."""


def runs_frame(outcomes: Sequence[Outcome], params: Sequence[str]) -> pd.DataFrame:
    """One row per run, ordered by (point, replication): id, point, replication, seed,
    the parameters, status (``ok`` / ``failed``), error, then :data:`METRICS`. A
    parameter that is one of these columns (a sweep over ``seed``) is that column: the
    run's ``seed`` is the point's plus the replication."""
    params = [p for p in params if p not in RUN_COLUMNS]
    rows = []
    for o in sorted(outcomes, key=lambda o: (o.task.point, o.task.replication)):
        t = o.task
        row: dict[str, Cell] = {
            "id": t.id,
            "point": t.point,
            "replication": t.replication,
            "seed": t.scenario.seed,
        }
        row.update({p: param_value(t.params.get(p)) for p in params})
        row["status"] = "ok" if o.error is None else "failed"
        row["error"] = None if o.error is None else o.error.strip().splitlines()[-1]
        values = metrics(o.summary) if o.summary is not None else {}
        row.update({m: values.get(m, math.nan) for m in METRICS})
        rows.append(row)
    columns = ["id", "point", "replication", "seed", *params, "status", "error", *METRICS]
    frame = pd.DataFrame(rows, columns=columns)
    frame["error"] = frame["error"].astype(object)
    return _param_columns(frame, params)


def ci95(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high) of the finite values; NaN bounds below two values."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, mean - half, mean + half


def summary_frame(runs: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """One row per point: the parameters (a ``seed`` parameter: the point's seed, its
    replication 0's), ``replications`` (runs that finished), ``failed_runs``, and
    ``METRIC_mean``, ``METRIC_ci95_low``, ``METRIC_ci95_high``."""
    rows = []
    for _, group in runs.groupby("point", sort=True):
        first = group.iloc[0]
        ok = group[group["status"] == "ok"]
        row: dict[str, Cell] = {"point": int(group["point"].iloc[0])}
        row.update({p: first[p] for p in params})
        row["replications"] = len(ok)
        row["failed_runs"] = len(group) - len(ok)
        for m in METRICS:
            mean, low, high = ci95(ok[m].to_numpy(dtype=float))
            row[f"{m}_mean"] = mean
            row[f"{m}_ci95_low"] = low
            row[f"{m}_ci95_high"] = high
        rows.append(row)
    columns = ["point", *params, "replications", "failed_runs"]
    columns += [f"{m}_{s}" for m in METRICS for s in ("mean", "ci95_low", "ci95_high")]
    return pd.DataFrame(rows, columns=columns)


def write_frame(frame: pd.DataFrame, path: Path) -> None:
    """``.parquet`` or ``.csv`` by suffix, atomically (a reader sees old or new)."""
    write_frames({path: frame})


def write_frames(frames: dict[Path, pd.DataFrame]) -> None:
    """Each frame to its path (``.parquet`` or ``.csv`` by suffix), all or none
    (``traces.atomic.staged``: every table is complete in its temporary before any is
    put in place, so a failure leaves the earlier tables, all of them, as they were).
    ``traces.TraceError`` names the path that could not be written."""
    with staged() as outputs:
        for path, frame in frames.items():
            tmp = outputs.file(path)
            try:
                if path.suffix == ".csv":
                    frame.to_csv(tmp, index=False)
                else:
                    frame.to_parquet(tmp, index=False)
            except OSError as exc:
                raise TraceError(path, f"cannot write file ({exc.strerror or exc})") from None
