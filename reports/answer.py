"""The report's front panel: a run's verdict in one table, each number with a short
definition beside it, so that counts which overlap ("321 failed: capacity 197,
fragmentation 124; 319 at high free memory") read as what they are; then the seed's
alerts, each with its two counts named (conditions held over the run, firings per scrape
window) and the replicas it fired on.

Pure functions of a :class:`~sim.results.io.RunResult`: :func:`verdict_rows` and
:func:`alert_rows` (tested), :func:`answer_html` (their HTML). Alert names come from the
run's summary and alert log, never from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from reports.aggregate import up_samples, uptime_trend
from reports.common import esc, high_free_share, ratio_thresholds
from reports.fleet import event_times
from reports.timeline import alert_log
from sim.results.io import RunResult
from sim.results.seed_alerts import BY_NAME, UPTIME_CORRELATION, AlertThresholds, condition
from sim.results.summary_model import Fleet
from sim.scenario.builtin import DEMO, builtin_names
from sim.telemetry.diagnosis import DIAGNOSES, diagnose_failures


@dataclass(frozen=True)
class Row:
    """One line of the verdict: what, the number(s), what it means."""

    label: str
    value: str
    meaning: str


def _share(part: float, whole: float) -> str:
    """``part / whole`` as a percentage with two significant digits (0.18 %, 29 %)."""
    if not whole:
        return "—"
    share = 100.0 * part / whole
    if share == 0 or share >= 10:
        return f"{share:.0f} %"
    return f"{share:.2g} %"


def failed_requests(result: RunResult) -> pd.DataFrame:
    """The run's failed requests with their diagnosis (``sim.telemetry.alerts``), read with
    the scenario's thresholds when the summary carries them."""
    severe, alert = ratio_thresholds(result.summary)
    th = AlertThresholds(
        high_free_share=high_free_share(result.summary), ratio_alert=alert, ratio_severe=severe
    )
    return diagnose_failures(result.requests, result.events, th)


def verdict_rows(result: RunResult) -> list[Row]:
    """The verdict: failed requests by diagnosis and at high free memory, allocation
    failures, fragmentation and its uptime trend, and for a fleet the avoidable
    replica-hours and dollars, scale events, restarts and crashes."""
    s = result.summary
    share = high_free_share(s)
    failed = failed_requests(result)
    total = s.requests.total
    counts = failed["diagnosis"].value_counts()
    by = "; ".join(f"{name} {int(n):,}" for name, n in counts.items()) or "none"
    high = failed[failed["at_high_free_memory"].fillna(False).astype(bool)]
    high_by = high["diagnosis"].value_counts()
    high_text = f"{len(high):,} of {len(failed):,}"
    if len(high):
        high_text += " (" + "; ".join(f"{k} {int(v):,}" for k, v in high_by.items()) + ")"
    fails = s.failures
    causes = ", ".join(f"{k} {v:,}" for k, v in fails.by_cause.items()) or "none"
    rows = [
        Row(
            "failed requests",
            f"{len(failed):,} of {total:,} ({_share(len(failed), total)})",
            "requests that ended without an answer: rejected, or failed after the client's retries",
        ),
        Row(
            "  by diagnosis",
            by,
            f"from the allocation failure that ended each: {DIAGNOSES['fragmentation']} = enough "
            "free KV memory in total but no free extent large enough (a restart or a paged "
            f"allocator fixes it, more replicas do not); {DIAGNOSES['capacity']} = less free "
            "memory than the request needed",
        ),
        Row(
            f"  at > {share:.0%} free memory",
            high_text,
            f"the node had more than {share:.0%} of its KV memory free when it failed the request: "
            "a cut across both causes, not a third cause (a request larger than all the free "
            "memory fails for capacity even at 40 % free)",
        ),
        Row(
            "allocation failures",
            f"{fails.allocation_failures:,} ({causes}); {fails.at_high_free_memory:,} at > "
            f"{share:.0%} free",
            "every allocation the allocator refused, a retry's included: one request can fail "
            "more than once, and a failure whose retry succeeded is not a failed request",
        ),
    ]
    rows += _memory_rows(result)
    if s.fleet is not None:
        rows += _fleet_rows(s.fleet, result)
    return rows


def _memory_rows(result: RunResult) -> list[Row]:
    s = result.summary
    ratio = s.memory.largest_contiguous_free_block_ratio
    severe, alert = ratio_thresholds(s)
    below = ratio.share_of_samples_below_alert
    value = "—"
    if ratio.min is not None and ratio.mean is not None:
        value = f"min {ratio.min:.2f}, mean {ratio.mean:.2f}"
        if below is not None:
            value += f"; {below:.1%} of samples below {alert:g}"
    trend = uptime_trend(up_samples(result.timeseries))
    rho = "—" if trend.rho is None else f"{trend.rho:+.2f} over {trend.samples:,} samples"
    restarts = s.failures.restarts
    return [
        Row(
            "largest / free ratio",
            value,
            "largest_contiguous_free_block_ratio: the largest free extent one request can use "
            f"/ all free memory; 1 = no fragmentation; alerts below {alert:g} and {severe:g}",
        ),
        Row(
            "uptime trend: Spearman ρ",
            rho,
            "rank correlation of uptime since the last restart with fragmentation (1 − ratio) "
            "over every periodic sample: +1 = fragmentation always grows with uptime (the "
            "statistic the summary and the alerts use)",
        ),
        Row("restarts", f"{restarts:,}", "replicas taken down and brought back with an empty pool"),
    ]


def _fleet_rows(f: Fleet, result: RunResult) -> list[Row]:
    hours, cost = float(f.replica_hours), float(f.cost_usd)
    a_hours, a_cost = float(f.avoidable_replica_hours), float(f.avoidable_cost_usd)
    times = event_times(result.events)
    recorded = result.fleet is not None and "avoidable_cost_usd" in result.fleet
    avoidable_ups = (
        f"{len(times['scale-up (avoidable)']):,} avoidable"
        if recorded
        else "avoidable ones not recorded by this run"
    )
    per_token = f.cost_per_million_output_tokens_usd
    rows = [
        Row(
            "avoidable replica-hours",
            f"{a_hours:,.1f} of {hours:,.1f} ({_share(a_hours, hours)})",
            "hours of replicas bought by scale-ups that only fragmentation failures triggered: "
            "capacity the fleet did not need",
        ),
        Row(
            "avoidable cost",
            f"${a_cost:,.2f} of ${cost:,.2f} ({_share(a_cost, cost)})"
            + (f"; ${per_token:,.2f} per 1M output tokens" if per_token is not None else ""),
            "what those replica-hours cost at the pools' GPU prices",
        ),
        Row(
            "scale-ups / scale-downs",
            f"{f.scale_ups:,} ({avoidable_ups}) / {f.scale_downs:,}",
            "avoidable: every failure that triggered it was a fragmentation failure",
        ),
        Row(
            "replicas initial / mean / peak",
            f"{f.replicas.initial} / {f.replicas.mean:.2f} / {f.replicas.peak}",
            "mean: replica-hours / run hours",
        ),
        Row("crashes", f"{f.crashes:,}", "replicas lost to faults (repaired, then reloaded)"),
    ]
    return rows


def alert_rows(result: RunResult) -> list[dict[str, Any]]:
    """One row per alert of the run (the summary's, in its order, then any other in the
    alert log): ``alert, severity, condition, held, firings, replicas`` (strings). The
    log is :func:`reports.timeline.alert_log`'s: a fleet's ``alerts.parquet``, a single
    replica's evaluated as ``fragsim alerts show`` does (the alerts panel's)."""
    s = result.summary
    log: pd.DataFrame | None = alert_log(result)[0]
    firing = log[log["state"] == "firing"] if log is not None else None
    names = [a.alert for a in s.alerts]
    if firing is not None:
        names += sorted(set(firing["alert"].astype(str)) - set(names))
    entries = {a.alert: a for a in s.alerts}
    run_wide = s.memory.node_uptime_vs_fragmentation_correlation.spearman_rho
    rows = []
    for name in names:
        a = entries.get(name)
        held = []
        if a is not None and a.matching_failures is not None:
            held.append(f"{a.matching_failures:,} failures")
        if a is not None and a.matching_samples is not None:
            held.append(f"{a.matching_samples:,} samples")
        if a is not None and a.spearman_rho is not None:
            held.append(f"ρ {a.spearman_rho:+.2f}")
        elif (
            a is not None and not held and name == UPTIME_CORRELATION.name and run_wide is not None
        ):
            # the run-wide statistic the summary keeps under the alert's name
            held.append(f"not over the whole run (ρ {run_wide:+.2f})")
        mine = firing[firing["alert"] == name] if firing is not None else None
        held_on = len(a.replicas) if a is not None and a.replicas is not None else None
        if mine is not None:
            fires = f"{len(mine):,}"
            on = f"fired on {mine['replica'].nunique():,}"
            if held_on is not None and held_on != mine["replica"].nunique():
                on += f", held on {held_on:,}"
        else:
            fires = f"{a.firings:,}" if a is not None and a.firings is not None else "—"
            on = "—" if held_on is None else f"held on {held_on:,}"
        severity = a.severity if a is not None else None
        if severity is None and mine is not None and len(mine):
            severity = mine["severity"].iloc[0]
        rows.append(
            {
                "alert": name,
                "severity": str(severity or ""),
                "condition": (a.condition if a is not None else "") or _condition(result, name),
                "held": "; ".join(held) or ("not over the whole run" if a is not None else "—"),
                "firings": fires,
                "replicas": on,
            }
        )
    return rows


def _condition(result: RunResult, name: str) -> str:
    """The condition of a seed alert the summary does not list (one the log has), with
    the run's thresholds; "—" for an alert that is not the seed's."""
    spec = BY_NAME.get(name)
    if spec is None:
        return "—"
    severe, alert = ratio_thresholds(result.summary)
    th = AlertThresholds(
        high_free_share=high_free_share(result.summary), ratio_alert=alert, ratio_severe=severe
    )
    return condition(spec, th)


HELD_NOTE = (
    "<b>held</b>: the allocation failures (or periodic samples) that met the condition over "
    "the whole run (summary.json). "
)
FIRINGS_NOTE = (
    "<b>firings</b>: how many times the alert fired, evaluated every scrape as Prometheus "
    "evaluates it, with its rule's for: (a fleet's alerts.parquet; a single replica's "
    "evaluated the same way, as fragsim alerts show does): several failures in one scrape "
    "window, or in consecutive ones, are one firing; a condition that held shorter than "
    "the for: does not fire. <b>replicas</b>: how many replicas it fired "
    "on, and held on where that differs."
)


COMPARE_COLUMNS = ("run", "rank", "verdict", "baseline")
"""What :func:`fix_sentence` reads of a comparison (``compare.csv``'s columns)."""


def fix_sentence(comparison: pd.DataFrame) -> str | None:
    """The fix that pays, from a comparison (``sim.results.compare.with_deltas``'s frame or
    a ``compare.csv`` read back; its :data:`COMPARE_COLUMNS`): the verdict of the run
    ranked 1, or that no alternative beats the baseline when the baseline is. None for
    a frame without those columns or rows."""
    if not set(COMPARE_COLUMNS) <= set(comparison.columns) or len(comparison) < 2:
        return None
    ranks = pd.to_numeric(comparison["rank"], errors="coerce")
    if not (ranks == 1).any():
        return None
    top = comparison[ranks == 1].iloc[0]
    base = str(comparison["baseline"].iloc[0])
    others = len(comparison) - 1
    if str(top["run"]) == base:
        alternatives = "the alternative" if others == 1 else f"any of the {others} alternatives"
        return f"No fix pays: {base}, the baseline, ranks first, ahead of {alternatives}."
    return f"The fix that pays: {top['verdict']} (rank 1 of {len(comparison)})."


def find_out_sentence(result: RunResult, name: str) -> str:
    """For a run without a comparison: the command that finds the fix that pays -- the
    run folder ``name`` compared with its built-in counterfactuals (built-in scenarios
    named after its scenario, ``seed-postmortem-paged`` for ``seed-postmortem``; the
    demo's for the worked example), or with a scenario file of the user's that changes
    one policy."""
    scenario = result.summary.scenario
    others = [n for n in builtin_names() if scenario and n.startswith(f"{scenario}-")]
    if scenario == DEMO[0]:
        others = [n for n in DEMO[1:] if n not in others] + others
    runs = " ".join(others) if others else "CHANGED.yaml"
    command = f"fragsim compare {name} {runs} -o {name}-compare"
    text = f"Which fix pays is not in this run: `{command}`, from the folder that holds {name}/, "
    if others:
        return text + "runs its counterfactuals and ranks them by dollars saved."
    return (
        text + "ranks a copy of its scenario with one policy changed (CHANGED.yaml: "
        "allocator, restart policy, router or autoscaler) against it by dollars saved."
    )


def headline(result: RunResult, next_step: str | None = None) -> str:
    """The verdict in two or three sentences, from the same numbers as the table, then
    ``next_step`` (the fix that pays, or how to find it) where given."""
    s = result.summary
    failed = failed_requests(result)
    total = s.requests.total
    frag = int((failed["diagnosis"] == DIAGNOSES["fragmentation"]).sum())
    high = int(failed["at_high_free_memory"].fillna(False).astype(bool).sum())
    share = high_free_share(s)
    text = (
        f"{len(failed):,} of {total:,} requests failed ({_share(len(failed), total)}): "
        f"{frag:,} for fragmentation on a capable node, and {high:,} with more than "
        f"{share:.0%} of the node's KV memory free."
    )
    f = s.fleet
    if f is not None:
        hours, a_hours = float(f.replica_hours), float(f.avoidable_replica_hours)
        text += (
            f" {a_hours:,.1f} of {hours:,.1f} replica-hours ({_share(a_hours, hours)}, "
            f"${float(f.avoidable_cost_usd):,.2f}) went to replicas bought for "
            "fragmentation failures only."
        )
    trend = uptime_trend(up_samples(result.timeseries))
    if trend.rho is not None:
        grows = "grows" if trend.rho >= 0.1 else "does not grow"
        text += f" Fragmentation {grows} with uptime (Spearman ρ {trend.rho:+.2f})."
    return text if next_step is None else f"{text} {next_step}"


def _code(text: str) -> str:
    """Escaped ``text`` with each `command` between backquotes set as code."""
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def answer_html(result: RunResult, next_step: str | None = None) -> str:
    """The headline (with ``next_step``: :func:`fix_sentence` or
    :func:`find_out_sentence`), the verdict table and the alerts table, as HTML (every
    value escaped)."""
    body = []
    for row in verdict_rows(result):
        cls = ' class="sub"' if row.label.startswith(" ") else ""
        body.append(
            f"<tr><td{cls}>{esc(row.label.strip())}</td><td>{esc(row.value)}</td>"
            f'<td class="def">{esc(row.meaning)}</td></tr>'
        )
    verdict = (
        f'<p class="verdict">{_code(esc(headline(result, next_step)))}</p>'
        '<table class="answer"><tr><th>what</th><th>this run</th><th>what it means</th></tr>'
        + "".join(body)
        + "</table>"
    )
    alerts = alert_rows(result)
    if not alerts:
        return verdict + '<p class="alerts">no alert of the seed held or fired</p>'
    keys = ["alert", "severity", "condition", "held", "firings", "replicas"]
    head = "".join(f"<th>{k}</th>" for k in keys)
    lines = []
    for a in alerts:
        cells = "".join(f"<td>{esc(a[k])}</td>" for k in keys)
        lines.append(f'<tr class="{esc(a["severity"])}">{cells}</tr>')
    table = f'<table class="alerts-table"><tr>{head}</tr>{"".join(lines)}</table>'
    note = HELD_NOTE + FIRINGS_NOTE
    return verdict + "<h3>the seed's alerts</h3>" + table + f'<p class="def">{note}</p>'
