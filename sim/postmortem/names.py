"""The log's replica names on a postmortem's runs (:mod:`sim.postmortem.replay`).

The engine numbers nodes 0..n-1 (fleet ids) and keeps doing so in every file it writes;
everything a user reads names them as the log does. :func:`with_replica_names` adds a
``replica_name`` column beside every ``replica`` column of a run's frames (and
``first_replica_name`` beside ``first_replica``); :func:`replica_table` is the map itself
(``replicas.csv``). A counterfactual's initial nodes carry the log's names; a node its own
autoscaler adds is ``new-1``, ``new-2``, ... in fleet-id order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from sim.postmortem.log import PostmortemLog
from sim.results.io import RunResult

if TYPE_CHECKING:
    from sim.postmortem.script import ReplicaMap

NO_REPLICA = "-"
"""The replica name of a request no node took (refused by the router)."""


def replica_table(log: PostmortemLog, rmap: ReplicaMap) -> pd.DataFrame:
    """``replicas.csv``: one row per replay node: ``fleet_id`` (the engine's id in the
    replay's files), ``replica`` (the log's name), ``pool``, and ``from_s`` / ``until_s``,
    the span during which the log's name meant this node (NaN, an empty CSV cell: from
    before the log start / to its end)."""
    rows = []
    for log_id, spans in rmap.since.items():
        for k, (from_s, fid) in enumerate(spans):
            until_s = spans[k + 1][0] if k + 1 < len(spans) else None
            start = None if math.isinf(from_s) else from_s
            rows.append((fid, log.replica_names[log_id], log.pools[log_id], start, until_s))
    cols = ["fleet_id", "replica", "pool", "from_s", "until_s"]
    return pd.DataFrame(sorted(rows), columns=cols).astype({"from_s": float, "until_s": float})


def counterfactual_names(log: PostmortemLog, rmap: ReplicaMap, nodes: int) -> list[str]:
    """Names of a counterfactual's ``nodes`` fleet ids (module docstring)."""
    first = [log.replica_names[r] for r in rmap.initial]
    return first + [f"new-{k + 1}" for k in range(max(0, nodes - len(first)))]


def with_replica_names(result: RunResult, names: Sequence[str]) -> RunResult:
    """``result`` with ``replica_name`` (and ``first_replica_name``) columns beside its
    frames' replica ids: ``names[id]``, :data:`NO_REPLICA` for -1 (no node)."""

    def named(frame: pd.DataFrame) -> pd.DataFrame:
        out = frame.copy()
        for col in ("replica", "first_replica"):
            if col in out.columns:
                ids = out[col].tolist()
                text = [names[i] if 0 <= i < len(names) else NO_REPLICA for i in ids]
                out.insert(list(out.columns).index(col) + 1, f"{col}_name", text)
        return out

    alerts = None if result.alerts is None else named(result.alerts)
    return replace(
        result,
        requests=named(result.requests),
        timeseries=named(result.timeseries),
        events=named(result.events),
        alerts=alerts,
    )


def nodes_in(result: RunResult) -> int:
    """How many fleet ids a run used (its highest replica id + 1)."""
    ids = [int(f["replica"].max()) for f in (result.requests, result.timeseries) if len(f)]
    return max(ids, default=-1) + 1
