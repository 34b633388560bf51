"""The modelled baseline of ``fragsim postmortem`` and counterfactuals that change one
thing against it.

Three kinds of run. The *replay* (:func:`sim.postmortem.replay.replay`) follows the log:
recorded routes, recorded restarts, crashes and scale events, no policy of its own. The
*modelled baseline* is the BASE scenario's own policies (router, retries, restart policy,
autoscaler, lifecycle, allocator, hardware, scheduler) simulated on the log's traffic
from the log's initial fleet, built exactly as a counterfactual is
(:func:`sim.postmortem.replay.counterfactual_scenario`: recorded crashes of initial nodes
kept, recorded restarts and scale events left to the policies). How well it models the
log is stated beside the replay (:func:`agreement_rows`: failures, restarts and scale
events of the log, the replay and the baseline, and the baseline's failures matched
against the recorded ones by the replay's rule). A *counterfactual* is a scenario run the
same way; it is judged against the modelled baseline, never against the replay, so the
difference is the counterfactual's change and nothing else.

What a counterfactual changes (:func:`policy_changes`): the two built scenarios are
compared field by field (``name``, ``workload`` and ``duration_s`` do not count: the
traffic is the log's); differing fields are grouped into one change per top-level field
(``allocator``, ``hardware``, ``scheduler``, ``metrics``, ``seed``) or per fleet field
(``fleet.router``, ``fleet.restart``, ``fleet.autoscaler``, ``fleet.pools``, ...). A
counterfactual with more than one change is run but flagged: its verdict says "N changes
at once" and lists them (the saving cannot be credited to one policy), and the CLI warns
on stderr. One with none saves exactly 0 (it is the baseline's run, byte for byte).

Ranks (:func:`ranked`): the modelled baseline and the counterfactuals are ranked by
:func:`sim.results.compare.with_deltas` against the baseline (so a baseline ranked 1 means
no change pays); the replay is the record, not an option, and has no rank. The CLI, the
report and ``compare.csv`` all carry these ranks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from sim.fields import JsonObject, JsonValue
from sim.results.compare import COLUMNS, verdict, with_deltas
from sim.scenario.schema import Scenario

if TYPE_CHECKING:
    from sim.postmortem.matching import MatchReport
    from sim.results.summary_model import Summary

BASELINE = "baseline"
"""The modelled baseline's run name (its folder, ``OUT/baseline/``)."""
REPLAY = "replay"
IGNORED = frozenset({"name", "workload", "duration_s"})
"""Scenario fields a postmortem run does not use (the log gives the traffic)."""
LABELS = {
    "fleet.router": "router",
    "fleet.retry": "client retry",
    "fleet.restart": "restart policy",
    "fleet.autoscaler": "autoscaler",
    "fleet.lifecycle": "lifecycle",
    "fleet.faults": "faults",
    "fleet.pools": "pools",
    "fleet.max_replicas": "replica ceiling",
    "fleet.min_replicas": "replica floor",
}
ROLE_TEXT = {
    REPLAY: "the replay: the log's recorded routes and node events (not ranked)",
    BASELINE: "the modelled baseline: the BASE scenario's policies on the log's traffic",
}


@dataclass(frozen=True)
class Change:
    """One thing a counterfactual changes: ``field`` (``fleet.restart``), and ``text``
    (``restart policy none → fragmentation``)."""

    field: str
    text: str


class AgreementRow(TypedDict):
    """One measure of ``postmortem.json``'s ``agreement``: the log's value, the replay's
    and the modelled baseline's (None where the measure is not defined for one)."""

    measure: str
    log: float | None
    replay: float | None
    baseline: float | None


def _flat(value: JsonValue, prefix: str) -> JsonObject:
    if isinstance(value, Mapping):
        out: JsonObject = {}
        for k, v in value.items():
            out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: value}


def _group(path: str) -> str:
    parts = path.split(".")
    return ".".join(parts[:2]) if parts[0] == "fleet" and len(parts) > 1 else parts[0]


def _show(value: JsonValue) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def policy_changes(baseline: Scenario, cf: Scenario) -> list[Change]:
    """What ``cf`` changes against ``baseline`` (both as built for the log: module
    docstring), one :class:`Change` per changed field group, in field order."""
    a = _flat(baseline.model_dump(mode="json", exclude=set(IGNORED)), "")
    b = _flat(cf.model_dump(mode="json", exclude=set(IGNORED)), "")
    differing = [p for p in dict.fromkeys([*a, *b]) if a.get(p, "—") != b.get(p, "—")]
    groups: dict[str, list[str]] = {}
    for path in differing:
        groups.setdefault(_group(path), []).append(path)
    changes = []
    for group, paths in groups.items():
        label = LABELS.get(group, group)
        kind = f"{group}.kind"
        if kind in paths:
            text = f"{label} {_show(a.get(kind))} → {_show(b.get(kind))}"
        elif paths == [group]:
            text = f"{label} {_show(a.get(group))} → {_show(b.get(group))}"
        else:
            leaves = [
                f"{p[len(group) + 1 :]} {_show(a.get(p, None))} → {_show(b.get(p, None))}"
                for p in paths
            ]
            text = f"{label} " + ", ".join(leaves)
        changes.append(Change(group, text))
    return changes


def change_text(changes: Sequence[Change]) -> str:
    """The change a verdict names: one change's text, ``no change``, or ``N changes at
    once (a; b)`` (flagged: module docstring)."""
    if not changes:
        return "no change"
    if len(changes) == 1:
        return changes[0].text
    return f"{len(changes)} changes at once ({'; '.join(c.text for c in changes)})"


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """``compare.csv``'s rows (:func:`sim.results.compare.compare_frame` columns plus
    ``role`` (replay, baseline, counterfactual) and ``change``; the replay first, then
    the baseline) in display order, with ``run``, the deltas against the baseline, and
    ``rank`` (missing for the replay) and ``verdict``: the replay, the baseline, then the
    counterfactuals by rank."""
    roles = frame["role"].astype(str).tolist()
    keep = [c for c, _ in COLUMNS]
    options = frame[[r != REPLAY for r in roles]].reset_index(drop=True)
    names = [str(s) for s in options["scenario"]]
    table = with_deltas(options[keep], names, baseline=0)  # the baseline: the first option
    role = dict(zip(names, options["role"].astype(str), strict=True))
    change = dict(zip(names, options["change"].fillna("").astype(str), strict=True))
    table["role"] = [role[r] for r in table["run"]]
    table["change"] = [change[r] for r in table["run"]]
    rows = [{str(k): v for k, v in r.items()} for r in table.to_dict("records")]
    texts = []
    for row in rows:
        if row["role"] == BASELINE:
            texts.append(ROLE_TEXT[BASELINE])
        else:
            texts.append(verdict({**row, "run": f"{row['change']}:"}, {"run": "the baseline"}))
    table["verdict"] = texts
    replay_rows = frame[[r == REPLAY for r in roles]]
    if replay_rows.empty:
        return table
    top = replay_rows[keep].copy().reset_index(drop=True)
    top.insert(0, "run", REPLAY)
    top["role"], top["change"], top["rank"] = REPLAY, "", math.nan
    top["verdict"] = ROLE_TEXT[REPLAY]
    return pd.concat([top, table], ignore_index=True)


def agreement_rows(
    log_counts: Mapping[str, int],
    replay_summary: Summary,
    baseline_summary: Summary,
) -> list[tuple[str, float | None, float | None, float | None]]:
    """(measure, the log, the replay, the baseline) for the failures, restarts and scale
    events; the log's ``log_counts`` are the recorded ``failures``, ``restart``,
    ``scale_up`` and ``scale_down`` (NaN: the log does not say)."""

    def scale_ups(s: Summary) -> float:
        return math.nan if s.fleet is None else float(s.fleet.scale_ups)

    def scale_downs(s: Summary) -> float:
        return math.nan if s.fleet is None else float(s.fleet.scale_downs)

    def failed(s: Summary) -> float:
        by = s.requests.by_status
        return float(sum(v for k, v in by.items() if k.startswith(("failed", "rejected"))))

    def nan(key: str) -> float:
        return float(log_counts[key]) if key in log_counts else math.nan

    return [
        ("failed requests", nan("failures"), failed(replay_summary), failed(baseline_summary)),
        (
            "restarts",
            nan("restart"),
            float(replay_summary.failures.restarts),
            float(baseline_summary.failures.restarts),
        ),
        (
            "scale-ups",
            nan("scale_up"),
            scale_ups(replay_summary),
            scale_ups(baseline_summary),
        ),
        (
            "scale-downs",
            nan("scale_down"),
            scale_downs(replay_summary),
            scale_downs(baseline_summary),
        ),
    ]


def agreement(
    replay: MatchReport,
    script: Mapping[str, int],
    replay_summary: Summary,
    baseline: MatchReport,
    baseline_summary: Summary,
) -> list[AgreementRow]:
    """``postmortem.json``'s ``agreement``: per measure, the log's value, the replay's and
    the modelled baseline's (None: not defined): failed requests, restarts, scale-ups and
    scale-downs (:func:`agreement_rows`; the log's restarts and scale events are the
    replay's scripted ones, ``script``), then recorded failures reproduced, precision and
    recall (both matched by the replay's rule)."""
    log_counts = {"failures": replay.recorded_failures} | {
        k: script[k] for k in ("restart", "scale_up", "scale_down")
    }
    rows = agreement_rows(log_counts, replay_summary, baseline_summary)
    rows += [
        ("recorded failures reproduced", None, replay.matched, baseline.matched),
        ("precision", None, replay.precision, baseline.precision),
        ("recall", None, replay.recall, baseline.recall),
    ]

    def num(v: float | None) -> float | None:
        return None if v is None or math.isnan(v) else float(v)

    return [
        AgreementRow(measure=k, log=num(a), replay=num(b), baseline=num(c)) for k, a, b, c in rows
    ]
