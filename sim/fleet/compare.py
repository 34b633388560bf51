"""One table over several runs (``fragsim compare``, ``fragsim demo``, postmortem
counterfactuals): the numbers a capacity planner or an SRE compares, from each run's
summary. A single-replica run reads as a fleet of one node for its whole span, with no
price (its cost columns are missing)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.table import Table

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


def compare_row(summary: dict[str, Any]) -> dict[str, Any]:
    """One run's row (the keys of :data:`COLUMNS`)."""
    by_status = summary["requests"]["by_status"]
    failures = summary["failures"]
    fleet = summary.get("fleet")
    end_s = float(summary["engine"]["end_s"])
    if fleet is not None:
        replicas_mean = fleet["replicas"]["mean"]
        replicas_peak = fleet["replicas"]["peak"]
        hours = fleet["replica_hours"]
        avoidable = fleet["avoidable_replica_hours"]
        cost = fleet["cost_usd"]
        per_m = fleet["cost_per_million_output_tokens_usd"]
    else:
        replicas_mean, replicas_peak = 1.0, 1
        hours, avoidable = end_s / 3600.0, 0.0
        cost = per_m = math.nan
    return {
        "scenario": summary["scenario"],
        "requests": summary["requests"]["total"],
        "failed_requests": sum(
            v for k, v in by_status.items() if k.startswith(("failed", "rejected"))
        ),
        "allocation_failures": failures["allocation_failures"],
        "fragmentation_failures": failures["by_cause"].get("fragmentation", 0),
        "failures_at_high_free": failures["at_high_free_memory"],
        "restarts": failures["restarts"],
        "replicas_mean": replicas_mean,
        "replicas_peak": replicas_peak,
        "replica_hours": hours,
        "avoidable_replica_hours": avoidable,
        "cost_usd": cost,
        "cost_per_million_output_tokens_usd": per_m,
        "ttft_p99_s": _number(summary["latency_s"]["ttft"]["p99"]),
        "e2e_p99_s": _number(summary["latency_s"]["e2e"]["p99"]),
    }


def compare_frame(summaries: Sequence[dict[str, Any]]) -> pd.DataFrame:
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


def _number(v: Any) -> float:
    return math.nan if v is None else float(v)


def comparison_table(frame: pd.DataFrame, title: str = "comparison") -> Table:
    """The compare frame as a terminal table: one column per run."""
    t = Table("metric", *(str(s) for s in frame["scenario"]), title=title)
    for column, label in COLUMNS[1:]:
        t.add_row(label, *(formatted(column, v) for v in frame[column].tolist()))
    return t
