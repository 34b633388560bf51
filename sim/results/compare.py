"""One table over several runs (``fragsim compare``, ``fragsim demo``, postmortem
counterfactuals): the numbers a capacity planner or an SRE compares, from each run's
summary. A single-replica run reads as a fleet of one node for its whole span, with no
price (its cost columns are missing).

"Which fix pays" (:func:`with_deltas`): one run is the baseline; every run gets, per
metric of :data:`DELTA_METRICS`, its difference from the baseline (``METRIC_delta``,
run minus baseline) and that difference in percent of the baseline's value
(``METRIC_delta_pct``), ``cost_saved_usd`` (baseline minus run), a ``rank`` and a
one-line ``verdict``. Ranking rule: most dollars saved first (a run whose savings are
unknown -- no price on it or on the baseline -- ranks after every run whose savings are
known), ties -- savings equal to the cent, or unknown -- broken by fewer allocation
failures, then by fewer failures at high free memory, then by the order given. The
baseline is ranked too (it saves $0), so a baseline ranked first means no alternative
pays."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.table import Table

if TYPE_CHECKING:
    from sim.results.summary_model import Summary

COLUMNS: tuple[tuple[str, str], ...] = (
    ("scenario", "scenario"),
    ("requests", "requests"),
    ("failed_requests", "requests failed or rejected"),
    ("allocation_failures", "allocation failures"),
    ("fragmentation_failures", "  of which fragmentation"),
    ("failures_at_high_free", "  at > 25 % free memory"),
    ("restarts", "restarts"),
    ("replicas_mean", "replicas (time mean)"),
    ("replicas_peak", "replicas (peak)"),
    ("replica_hours", "replica-hours"),
    ("avoidable_replica_hours", "avoidable replica-hours"),
    ("cost_usd", "cost ($)"),
    ("cost_per_million_output_tokens_usd", "$ per 1M output tokens"),
    ("ttft_p99_s", "TTFT p99 (s)"),
    ("e2e_p99_s", "end-to-end p99 (s)"),
)
"""(column, label) in table order."""


def compare_row(summary: Summary) -> dict[str, Any]:
    """One run's row (the keys of :data:`COLUMNS`)."""
    by_status = summary.requests.by_status
    failures = summary.failures
    fleet = summary.fleet
    end_s = float(summary.engine.end_s)
    replicas_mean: float
    replicas_peak: int
    per_m: float | None
    if fleet is not None:
        replicas_mean = fleet.replicas.mean
        replicas_peak = fleet.replicas.peak
        hours = fleet.replica_hours
        avoidable = fleet.avoidable_replica_hours
        cost = fleet.cost_usd
        per_m = fleet.cost_per_million_output_tokens_usd
    else:
        replicas_mean, replicas_peak = 1.0, 1
        hours, avoidable = end_s / 3600.0, 0.0
        cost = per_m = math.nan
    return {
        "scenario": summary.scenario,
        "requests": summary.requests.total,
        "failed_requests": sum(
            v for k, v in by_status.items() if k.startswith(("failed", "rejected"))
        ),
        "allocation_failures": failures.allocation_failures,
        "fragmentation_failures": failures.by_cause.get("fragmentation", 0),
        "failures_at_high_free": failures.at_high_free_memory,
        "restarts": failures.restarts,
        "replicas_mean": replicas_mean,
        "replicas_peak": replicas_peak,
        "replica_hours": hours,
        "avoidable_replica_hours": avoidable,
        "cost_usd": cost,
        "cost_per_million_output_tokens_usd": _number(per_m),  # null: undefined
        "ttft_p99_s": _number(summary.latency_s.ttft.p99),
        "e2e_p99_s": _number(summary.latency_s.e2e.p99),
    }


def compare_frame(summaries: Sequence[Summary]) -> pd.DataFrame:
    """One row per run, in the order given."""
    return pd.DataFrame([compare_row(s) for s in summaries], columns=[c for c, _ in COLUMNS])


def formatted(column: str, value: Any) -> str:
    """A cell as the terminal table shows it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if column == "scenario":
        return str(value)
    if isinstance(value, int) or (
        isinstance(value, float)
        and column.endswith(("requests", "failures", "restarts", "free", "peak"))
    ):
        return f"{int(value):,}"
    if column in ("ttft_p99_s", "e2e_p99_s"):
        return f"{value:.3f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _number(v: float | None) -> float:
    return math.nan if v is None else float(v)


def comparison_table(frame: pd.DataFrame, title: str = "comparison") -> Table:
    """The compare frame as a terminal table: one column per run."""
    t = Table("metric", *(str(s) for s in frame["scenario"]), title=title)
    for column, label in COLUMNS[1:]:
        t.add_row(label, *(formatted(column, v) for v in frame[column].tolist()))
    return t


DELTA_METRICS: tuple[str, ...] = (
    "cost_usd",
    "replica_hours",
    "avoidable_replica_hours",
    "failed_requests",
    "allocation_failures",
    "failures_at_high_free",
    "ttft_p99_s",
    "e2e_p99_s",
)
"""The metrics compared against the baseline, in table order (all: lower is better)."""


def with_deltas(frame: pd.DataFrame, names: Sequence[str], baseline: int = 0) -> pd.DataFrame:
    """``frame`` (:func:`compare_frame`) with a first column ``run`` (``names``, one per
    row, unique) and the comparison against the row at position ``baseline`` (module
    docstring): ``METRIC_delta`` and ``METRIC_delta_pct`` per metric of
    :data:`DELTA_METRICS`, ``cost_saved_usd``, ``baseline`` (its run name), ``rank`` and
    ``verdict``. Rows come back in display order: the baseline first, then the others by
    rank. A value missing on either side gives a missing delta; a percentage of a zero
    baseline is missing too (0 when both are zero)."""
    if len(names) != len(frame) or len(set(names)) != len(names):
        raise ValueError("with_deltas needs one unique name per row")
    if not 0 <= baseline < len(frame):
        raise IndexError(f"baseline {baseline} is not a row of {len(frame)}")
    out = frame.copy()
    out.insert(0, "run", list(names))
    for metric in DELTA_METRICS:
        values = pd.to_numeric(out[metric], errors="coerce").astype(float)
        ref = float(values.iloc[baseline])
        delta = values - ref
        out[f"{metric}_delta"] = delta
        if ref != 0:
            out[f"{metric}_delta_pct"] = 100.0 * delta / abs(ref)
        else:
            out[f"{metric}_delta_pct"] = [0.0 if d == 0 else math.nan for d in delta]
    out["cost_saved_usd"] = 0.0 - out["cost_usd_delta"]  # no -0.0
    out["baseline"] = names[baseline]
    rows = [{str(k): v for k, v in r.items()} for r in out.to_dict("records")]
    order = sorted(range(len(rows)), key=lambda i: _rank_key(rows[i], i))
    rank = {i: r + 1 for r, i in enumerate(order)}
    out["rank"] = [rank[i] for i in range(len(rows))]
    out["verdict"] = [
        "baseline" if i == baseline else verdict(row, rows[baseline]) for i, row in enumerate(rows)
    ]
    shown = [baseline, *(i for i in order if i != baseline)]
    return out.iloc[shown].reset_index(drop=True)


def _rank_key(row: Mapping[str, Any], position: int) -> tuple[float, ...]:
    saved = round(float(row["cost_saved_usd"]), 2)  # savings under a cent are a tie
    priced = not math.isnan(saved)
    return (
        0.0 if priced else 1.0,
        -saved if priced else 0.0,
        float(row["allocation_failures"]),
        float(row["failures_at_high_free"]),
        float(position),
    )


def verdict(row: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """One line: what the run at ``row`` saves or costs against ``base`` (rows of
    :func:`with_deltas`), in dollars (and percent) where both are priced, and in
    allocation failures: ``paged saves $126.75 (71.1 %) and 81 allocation failures vs
    seed-postmortem``."""
    saved = round(float(row["cost_saved_usd"]), 2)  # under a cent: the same cost
    failures = float(row["allocation_failures_delta"])
    n = int(abs(failures)) if not math.isnan(failures) else 0
    count = f"{n:,} allocation failure{'' if n == 1 else 's'}"
    if math.isnan(saved):
        if math.isnan(failures):
            text = "has nothing to compare"
        else:
            text = f"avoids {count}" if failures < 0 else f"adds {count}" if failures > 0 else ""
            text = text or "has as many allocation failures"
        return f"{row['run']} {text} vs {base['run']}"
    pct = abs(float(row["cost_usd_delta_pct"]))
    share = "" if math.isnan(pct) else f" ({pct:.1f} %)"
    if saved > 0:
        money = f"saves {usd(saved)}{share}"
    elif saved < 0:
        money = f"costs {usd(-saved)}{share} more"
    else:
        money = "costs the same"
    better = saved >= 0
    if math.isnan(failures) or failures == 0:
        tail = " with as many allocation failures"
    elif failures < 0:
        tail = f" and {count}" if saved > 0 else f" but avoids {count}"
    else:
        tail = f" but adds {count}" if better else f" and adds {count}"
    return f"{row['run']} {money}{tail} vs {base['run']}"


def usd(value: float) -> str:
    """Dollars: cents below $1,000, whole dollars from there."""
    return f"${value:,.2f}" if abs(value) < 1000 else f"${value:,.0f}"


def delta_text(metric: str, delta: float, pct: float) -> str:
    """A difference as tables show it, with its share of the baseline's value:
    ``-78.27 (-43.9 %)`` (a true minus sign); ``—`` when missing; ``0`` when none, or
    too small to show in the metric's format."""
    if math.isnan(delta):
        return "—"
    size = formatted(metric, abs(delta))
    if float(size.replace(",", "")) == 0:  # zero, or too small to show
        return "0"
    sign = "−" if delta < 0 else "+"
    share = "" if math.isnan(pct) else f" ({sign}{abs(pct):.1f} %)"
    return f"{sign}{size}{share}"
