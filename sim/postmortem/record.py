"""``postmortem.json``: what one ``fragsim postmortem`` found, as one typed record
(:class:`PostmortemRecord`, written by :func:`postmortem_record`; the command's tables
and the report read it by these keys)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from sim.postmortem.baseline import AgreementRow, agreement
from sim.postmortem.log import PostmortemLog
from sim.postmortem.matching import MatchReport, Rule
from sim.postmortem.replay import Replay
from sim.results.summary_model import Summary


class NodeEventRecord(TypedDict):
    """One recorded node event, its replica by the log's name."""

    time_s: float
    replica: str
    event: str
    detail: str


class BaselineMatch(TypedDict):
    """The modelled baseline's match against the log's recorded failures."""

    simulated_failures: int
    matched: int
    precision: float | None
    recall: float | None


class PostmortemRecord(TypedDict):
    """``postmortem.json``'s keys (:func:`postmortem_record` says what each holds)."""

    log: str
    scenario: str
    requests: int
    replicas: list[str]
    pools: list[str]
    initial_uptime_s: list[float]
    span_s: list[float]
    node_events: list[NodeEventRecord]
    rule: Rule
    tolerance_s: float | None
    recorded_failures: int
    simulated_failures: int
    matched: int
    precision: float | None
    recall: float | None
    router: dict[str, int]
    router_fallbacks: int
    script: dict[str, int]
    counterfactuals: list[str]
    baseline: BaselineMatch | None
    agreement: list[AgreementRow]
    changes: dict[str, list[str]]


def postmortem_record(
    done: Replay,
    log: PostmortemLog,
    counterfactuals: Sequence[str],
    *,
    log_name: str = "",
    scenario: str = "",
    baseline: MatchReport | None = None,
    baseline_summary: Summary | None = None,
    changes: Mapping[str, Sequence[str]] | None = None,
) -> PostmortemRecord:
    """``postmortem.json``: the log's folder name and the BASE scenario's name (as the
    caller gives them), the match's counts and scores, the routing and script counts,
    and the log's span, nodes and node events by name (what the report draws); with a
    modelled baseline, its match (``baseline``) and each counterfactual's ``changes``."""
    m = done.match
    events = log.node_events
    details = events["detail"].tolist() if "detail" in events else [""] * len(events)
    node_events = [
        NodeEventRecord(time_s=t, replica=log.replica_names[r], event=e, detail=d)
        for t, r, e, d in zip(
            events["time_s"].tolist(),
            events["replica"].tolist(),
            events["event"].tolist(),
            details,
            strict=True,
        )
    ]
    return {  # a PostmortemRecord: each key checked against it
        "log": log_name,
        "scenario": scenario,
        "requests": len(log.requests),
        "replicas": log.replica_names,
        "pools": log.pools,
        "initial_uptime_s": log.initial_uptime_s.tolist(),
        "span_s": [float(log.attempts["arrival_s"].min()), float(log.attempts["arrival_s"].max())],
        "node_events": node_events,
        "rule": m.rule,
        "tolerance_s": m.tolerance_s,
        "recorded_failures": m.recorded_failures,
        "simulated_failures": m.simulated_failures,
        "matched": m.matched,
        "precision": m.precision,
        "recall": m.recall,
        "router": done.router,
        "router_fallbacks": done.router["fallbacks"],
        "script": done.script,
        "counterfactuals": list(counterfactuals),
        "baseline": None
        if baseline is None
        else BaselineMatch(
            simulated_failures=baseline.simulated_failures,
            matched=baseline.matched,
            precision=baseline.precision,
            recall=baseline.recall,
        ),
        "agreement": []
        if baseline is None or baseline_summary is None
        else agreement(done.match, done.script, done.result.summary, baseline, baseline_summary),
        "changes": {k: list(v) for k, v in (changes or {}).items()},
    }
