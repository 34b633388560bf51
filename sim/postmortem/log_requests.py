"""A postmortem log's requests, indexed on its fleet: :class:`PostmortemLog`, the replay's
inputs, and :func:`index_requests`, which builds it from a requests table (the CSV/Parquet
log's, :mod:`sim.postmortem.log`, or the OTLP spans', :mod:`sim.postmortem.otlp_log`)
after checking its counts, replicas, statuses, ids and retries. The rules are those of
:mod:`sim.postmortem.log`'s docstring; errors name the table's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa

from sim.postmortem.nodes import Fleet, row_name, text_cells
from traces.validate import ReadContext, counts

STATUSES: Final = {
    "ok": "ok",
    "oom": "failed",
    "rejected": "failed",
    "failed": "failed",
    "error": "failed",
    "timeout": "timed-out",
    "timed-out": "timed-out",
}
"""Status as logged (lower case) -> normalised status."""


@dataclass(frozen=True)
class PostmortemLog:
    """A loaded log. Requests are ordered by arrival (ties in file order); ``routes``,
    ``recorded_status`` and the rows of ``requests`` are aligned. Per-replica sequences
    are indexed by dense replica id."""

    requests: pd.DataFrame
    """Canonical trace columns (``request_id``, ``arrival_s``, ``prompt_tokens``,
    ``output_tokens``, and ``session_id`` as nullable Int64 where logged), one row per
    original request (its first attempt), plus ``attempts`` (rows logged for it)."""
    routes: np.ndarray
    """int64: the replica of each request's first attempt."""
    recorded_status: np.ndarray
    """str: each request's final status (that of its last attempt): ok / failed / timed-out."""
    replica_names: list[str]
    pools: list[str]
    initial_uptime_s: np.ndarray
    """float64 per replica: seconds up at the log start (0 where not ``up_at_start``)."""
    up_at_start: np.ndarray
    """bool per replica: in the initial fleet (a ``start`` at ``time_s <= 0``)."""
    node_events: pd.DataFrame
    """``time_s``, ``replica`` (dense id), ``event`` (and ``detail`` where logged), sorted
    by time (ties in file order); the initial fleet's ``start`` rows are not events."""
    attempts: pd.DataFrame
    """Every logged attempt: ``request_id``, ``attempt``, ``arrival_s``, ``replica``,
    ``status`` (normalised), sorted by arrival (ties in file order)."""

    def recorded_failures(self) -> pd.DataFrame:
        """The ``recorded`` frame of :func:`sim.postmortem.matching.match_failures`: one row per
        request whose final status is not ok, with its last attempt's replica (where it
        finally failed) and its first attempt's arrival (the request's arrival, as the
        simulated side has it: the two times compare in ``by_window``)."""
        tries = self.attempts.sort_values(["request_id", "attempt"], kind="stable")
        first = tries.drop_duplicates("request_id", keep="first").set_index("request_id")
        last = tries.drop_duplicates("request_id", keep="last")
        failed = last[last["status"] != "ok"].copy()
        failed["arrival_s"] = first.loc[failed["request_id"], "arrival_s"].to_numpy()
        failed = failed.sort_values(["arrival_s", "request_id"], kind="stable")
        cols = ["request_id", "replica", "status", "arrival_s"]
        return failed[cols].reset_index(drop=True)


def index_requests(
    ctx: ReadContext, t: pa.Table, arrival_s: np.ndarray, fleet: Fleet, nodes_file: str
) -> PostmortemLog:
    """The :class:`PostmortemLog` of a requests table (``read_table(path, REQUESTS,
    "arrival_s")``, or a table of the same columns) with ``arrival_s`` per row (seconds
    from the log start) on ``fleet``: counts, replicas (names of ``fleet``, else an error
    naming ``nodes_file``), statuses, ids and retries checked; errors name ``ctx``'s rows."""
    n = t.num_rows
    prompt = counts(ctx, t, "prompt_tokens", minimum=1)
    output = counts(ctx, t, "output_tokens", minimum=0)
    replica = _replicas(ctx, t, fleet.names, nodes_file)
    status = _statuses(ctx, t)
    rid, attempt = _ids(ctx, t)
    time_field = "arrival_s" if "arrival_s" in t.column_names else "timestamp"
    _check_retries(ctx, rid, attempt, arrival_s, time_field)
    log = pd.DataFrame(
        {
            "request_id": rid,
            "attempt": attempt,
            "arrival_s": arrival_s,
            "replica": replica,
            "status": status,
            "row": np.arange(n),
        }
    )
    if "session_id" in t.column_names:
        log["session_id"] = _sessions(ctx, t)
    by_try = log.sort_values(["request_id", "attempt"], kind="stable")
    first = by_try.drop_duplicates("request_id", keep="first")
    last = by_try.drop_duplicates("request_id", keep="last").set_index("request_id")
    first = first.sort_values(["arrival_s", "row"], kind="stable").reset_index(drop=True)
    rows = first["row"].to_numpy()
    requests = pd.DataFrame(
        {
            "request_id": first["request_id"].to_numpy(np.int64),
            "arrival_s": first["arrival_s"].to_numpy(np.float64),
            "prompt_tokens": prompt[rows],
            "output_tokens": output[rows],
        }
    )
    if "session_id" in log.columns:
        requests["session_id"] = first["session_id"]  # both indexed 0..n-1; Int64 kept
    tries = by_try.groupby("request_id", sort=False).size()
    requests["attempts"] = tries.loc[requests["request_id"]].to_numpy(np.int64)
    final = last.loc[requests["request_id"], "status"].to_numpy(object)
    attempts = log.sort_values(["arrival_s", "row"], kind="stable").drop(columns="row")
    return PostmortemLog(
        requests=requests,
        routes=first["replica"].to_numpy(np.int64),
        recorded_status=final,
        replica_names=list(fleet.names),
        pools=fleet.pools,
        initial_uptime_s=fleet.uptime_s,
        up_at_start=fleet.up_at_start,
        node_events=fleet.events,
        attempts=attempts.drop(columns=[c for c in ("session_id",) if c in attempts]).reset_index(
            drop=True
        ),
    )


def _replicas(ctx: ReadContext, t: pa.Table, names: list[str], nodes_file: str) -> np.ndarray:
    ids = {name: k for k, name in enumerate(names)}
    text = text_cells(ctx, t, "replica")
    out = np.array([ids.get(str(v), -1) for v in text], np.int64)
    if (out < 0).any():
        i = int(np.argmax(out < 0))
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ctx.error(
            i,
            "unknown replica",
            field="replica",
            expected=f"a replica of {nodes_file} ({shown})",
            got=str(text[i]),
        )
    return out


def _statuses(ctx: ReadContext, t: pa.Table) -> np.ndarray:
    raw = text_cells(ctx, t, "status")
    text = np.char.lower(raw.astype(str))
    bad = ~np.isin(text, list(STATUSES))
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i,
            "unknown status",
            field="status",
            expected=f"one of {', '.join(STATUSES)}",
            got=str(raw[i]),
        )
    return np.array([STATUSES[s] for s in text], dtype=object)


def _ids(ctx: ReadContext, t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(request_id, attempt) per row, checked unique."""
    n = t.num_rows
    if "request_id" not in t.column_names:
        if "attempt" in t.column_names:
            raise ctx.error(
                None, "attempt without request_id", field="attempt", expected="a request_id column"
            )
        return np.arange(n, dtype=np.int64), np.zeros(n, np.int64)
    col = t.column("request_id")
    if col.null_count:
        i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
        raise ctx.error(i, "missing request id", field="request_id", expected="an integer")
    rid = np.asarray(col.to_numpy(), np.int64)
    has_attempt = "attempt" in t.column_names
    attempt = counts(ctx, t, "attempt", minimum=0) if has_attempt else np.zeros(n, np.int64)
    dup = pd.DataFrame({"r": rid, "a": attempt}).duplicated().to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        j = int(np.argmax((rid == rid[i]) & (attempt == attempt[i])))
        what = f"attempt {attempt[i]} of request {rid[i]}" if has_attempt else "request id"
        raise ctx.error(
            i,
            f"duplicate {what}",
            field="attempt" if has_attempt else "request_id",
            expected=f"each once (first at {row_name(ctx, j)})",
            got=int(attempt[i] if has_attempt else rid[i]),
        )
    return rid, attempt


def _check_retries(
    ctx: ReadContext, rid: np.ndarray, attempt: np.ndarray, arrival_s: np.ndarray, field: str
) -> None:
    """A later attempt of a request may not arrive before an earlier one."""
    order = np.lexsort((attempt, rid))
    same = rid[order][1:] == rid[order][:-1]
    early = same & (arrival_s[order][1:] < arrival_s[order][:-1])
    if early.any():
        k = int(np.argmax(early))
        i, j = int(order[k + 1]), int(order[k])
        raise ctx.error(
            i,
            f"attempt {attempt[i]} of request {rid[i]} arrives before attempt {attempt[j]}",
            field=field,
            expected=f"a time >= {arrival_s[j]:g} s ({row_name(ctx, j)})",
            got=float(arrival_s[i]),
            as_written=False,
        )


def _sessions(ctx: ReadContext, t: pa.Table) -> pd.arrays.IntegerArray:
    """Integers as written; any other text numbered 0.. in order of first appearance."""
    text = text_cells(ctx, t, "session_id", required=False)
    blank = text == ""
    try:
        values = np.array([int(v) if v else 0 for v in text], np.int64)
    except (ValueError, OverflowError):
        codes = {v: k for k, v in enumerate(dict.fromkeys(text[~blank]))}
        values = np.array([codes.get(v, 0) for v in text], np.int64)
    return pd.arrays.IntegerArray(values, blank)
