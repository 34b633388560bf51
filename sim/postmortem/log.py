"""A production log for ``fragsim postmortem``: its two files, how they are read, checked
and turned into the replay's inputs (:class:`PostmortemLog`).

A LOG_DIR holds exactly one requests file (``requests.csv`` or ``requests.parquet``) and
exactly one nodes file (``nodes.csv`` or ``nodes.parquet``); both or neither is refused.

Requests (one row per attempt; a retried request has one row per attempt)
    ``arrival_s`` (seconds from the log start, >= 0) *or* ``timestamp`` (ISO-8601, as
    :mod:`traces.timestamps` parses it; converted to seconds from the earliest request
    timestamp, which is then the log start); ``prompt_tokens`` (whole, >= 1);
    ``output_tokens`` (whole, >= 0); ``replica`` (a name or id from the nodes file);
    ``status``: ``ok``; ``oom`` / ``rejected`` / ``failed`` / ``error`` -> ``failed``;
    ``timeout`` / ``timed-out`` -> ``timed-out`` (case-insensitive). Optional:
    ``request_id`` (integer; data rows are numbered 0..n-1 in file order without it),
    ``attempt`` (retry number, whole >= 0; needs ``request_id``: the attempts of one
    request share it), ``session_id`` (integers kept; other text numbered 0.. in order of
    first appearance). ``(request_id, attempt)`` is unique; a retry may not arrive before
    an earlier attempt.
Nodes (one row per lifecycle event)
    ``time_s`` (seconds from the log start) *or* ``timestamp`` (only when the requests
    file gives timestamps too: same origin); ``replica``; ``event`` in ``start``,
    ``restart``, ``scale_up``, ``scale_down``, ``crash``. Optional: ``pool`` (one per
    replica; ``default`` where none is given), ``detail`` (free text, kept).
    Replicas get dense ids 0..n-1 in order of first appearance in the nodes file.
    A ``start`` at ``time_s <= 0`` puts the replica in the initial fleet, up for
    ``-time_s`` seconds at the log start (its initial uptime: a node started five days
    before the log has ``time_s = -432000``). Only ``start`` rows may be negative. Events
    out of time order are sorted (ties keep file order), then each replica's events must
    make sense in turn: ``start`` / ``scale_up`` bring up a node that is not up,
    ``crash`` needs it up, ``restart`` needs it up or crashed (and leaves it up),
    ``scale_down`` needs it up or crashed (and leaves it gone).

Errors: every problem is one :class:`LogError` (a :class:`traces.errors.TraceError`, so
a ``ValueError``) naming the file, the line (CSV: 1-based, the header is line 1) or row
(Parquet: 0-based data row), the field, what was expected and what was found. The
traces readers do the reading (:func:`traces.readers.iter_raw`: a CSV pyarrow cannot
parse is located by :mod:`traces.locate`), and the checks are those of
:mod:`traces.validate`.

Building blocks, for readers of other formats (:mod:`sim.postmortem.otlp_log`):
:func:`read_table` reads a file of either format, :func:`node_times` its node times
(:mod:`sim.postmortem.nodes` turns its rows into node events and checks any list
of them into a fleet), and :func:`index_requests` turns a requests table on a fleet into
the :class:`PostmortemLog`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sim.postmortem.nodes import TEXT, Fleet, read_fleet, row_name, text_cells
from traces.bounds import MAX_ARRIVAL_S
from traces.errors import TraceError
from traces.formats import F64, I64, Format, check_columns, read_header
from traces.readers import iter_raw
from traces.timestamps import EXPECTED as TIMESTAMP_EXPECTED
from traces.timestamps import timestamps_ns
from traces.validate import ReadContext, check_arrivals, check_finite, counts

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
EXPECTED: Final = {
    "prompt_tokens": "a whole number >= 1",
    "output_tokens": "a whole number >= 0",
    "attempt": "a whole number >= 0",
    "request_id": "an integer",
    "arrival_s": "seconds from the log start, >= 0",
    "time_s": "seconds from the log start",
}
"""What a number column expects, for a cell that is no number at all."""
CHUNK_ROWS: Final = 1 << 16

REQUESTS: Final = Format(
    "postmortem requests",
    ("csv", "parquet"),
    ("prompt_tokens", "output_tokens", "replica", "status"),
    ("arrival_s", "timestamp", "request_id", "attempt", "session_id"),
    {
        "arrival_s": F64,
        "timestamp": TEXT,
        "prompt_tokens": F64,
        "output_tokens": F64,
        "replica": TEXT,
        "status": TEXT,
        "request_id": I64,
        "attempt": F64,
        "session_id": TEXT,
    },
    "a production request log, one row per attempt",
)
NODES: Final = Format(
    "postmortem nodes",
    ("csv", "parquet"),
    ("replica", "event"),
    ("time_s", "timestamp", "pool", "detail"),
    {
        "time_s": F64,
        "timestamp": TEXT,
        "replica": TEXT,
        "event": TEXT,
        "pool": TEXT,
        "detail": TEXT,
    },
    "node lifecycle events",
)


class LogError(TraceError):
    """A postmortem log that cannot be replayed; ``str()`` is one line naming the file,
    line or row, field, what was expected and what was got."""


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


def find_log_files(log_dir: str | Path) -> tuple[Path, Path]:
    """(requests file, nodes file) of ``log_dir``; refuses both formats or neither."""
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        raise LogError(log_dir, "not a directory", expected="a LOG_DIR with requests and nodes")
    found = []
    for stem in ("requests", "nodes"):
        present = [log_dir / f"{stem}.{ext}" for ext in ("csv", "parquet")]
        present = [p for p in present if os.path.lexists(p)]  # a dangling link: named
        if len(present) != 1:
            raise LogError(
                log_dir,
                f"{'both' if present else 'neither'} {stem}.csv and {stem}.parquet",
                expected=f"exactly one of {stem}.csv, {stem}.parquet",
            )
        found.append(present[0])
    return found[0], found[1]


def load_postmortem_log(log_dir: str | Path) -> PostmortemLog:
    """Read, check and index a LOG_DIR (see the module docstring for the rules)."""
    try:
        req_path, node_path = find_log_files(log_dir)
        req_ctx, req = read_table(req_path, REQUESTS, "arrival_s")
        node_ctx, nodes = read_table(node_path, NODES, "time_s")
        arrival_s, origin_ns = _arrivals(req_ctx, req)
        fleet = read_fleet(node_ctx, nodes, node_times(node_ctx, nodes, origin_ns))
        return index_requests(req_ctx, req, arrival_s, fleet, node_path.name)
    except LogError:
        raise
    except TraceError as exc:
        raise _log_error(exc, exc.expected) from None


def _log_error(exc: TraceError, expected: str | None) -> LogError:
    return LogError(
        exc.path,
        exc.message,
        row=exc.row,
        line=exc.line,
        field=exc.field,
        expected=expected,
        got=exc.got,
        written=exc.written,
    )


def read_table(path: Path, fmt: Format, time_col: str) -> tuple[ReadContext, pa.Table]:
    """A whole CSV/Parquet file of ``fmt`` (the requests or nodes format) and the context
    its errors are located by: columns checked, exactly one of ``time_col`` and
    ``timestamp``, at least one data row."""
    header = read_header(path)
    if header.container not in fmt.containers:
        raise TraceError(path, f"a {header.container} file", expected="CSV or Parquet")
    check_columns(path, fmt, header)
    line = 1 if header.container == "csv" else None
    has = [c for c in (time_col, "timestamp") if c in header.columns]
    if len(has) != 1:
        raise TraceError(
            path,
            "both time columns" if has else "missing column",
            line=line,
            field=time_col,
            expected=f"exactly one of {time_col!r}, 'timestamp'",
        )
    try:
        tables = list(iter_raw(path, fmt, header, CHUNK_ROWS))
    except TraceError as exc:
        if exc.field not in EXPECTED:
            raise
        raise _log_error(exc, EXPECTED[exc.field]) from None
    table = pa.concat_tables(tables) if tables else None
    if table is None or table.num_rows == 0:
        raise TraceError(path, "no data rows", line=line, expected="at least one row")
    csv = header.container == "csv"
    ctx = ReadContext(path, line_base=2 if csv else None, container="csv" if csv else None)
    return ctx, table


def _arrivals(ctx: ReadContext, t: pa.Table) -> tuple[np.ndarray, int | None]:
    """Seconds from the log start per request row, and the log start in UTC ns where the
    file gives timestamps (the earliest is the log start)."""
    if "arrival_s" in t.column_names:
        return check_arrivals(ctx, _floats(t, "arrival_s"), "arrival_s"), None
    ns = _timestamps(ctx, t)
    origin = int(ns.min())
    return (ns - origin) / 1e9, origin


def node_times(ctx: ReadContext, t: pa.Table, origin_ns: int | None) -> np.ndarray:
    """Seconds from the log start per node row (negative: before it), each within
    ``MAX_ARRIVAL_S`` of the log start (an uptime or a span the fleet accepts)."""
    if "time_s" in t.column_names:
        time_s = check_finite(ctx, _floats(t, "time_s"), "time_s")
    elif origin_ns is None:
        raise ctx.error(
            None,
            "timestamps here need timestamps in the requests file (the log start)",
            field="timestamp",
            expected="time_s, seconds from the log start",
        )
    else:
        time_s = (_timestamps(ctx, t) - origin_ns) / 1e9
    bad = np.abs(time_s) > MAX_ARRIVAL_S
    if bad.any():
        i = int(np.argmax(bad))
        field = "time_s" if "time_s" in t.column_names else "timestamp"
        raise ctx.error(
            i,
            "time out of range",
            field=field,
            expected=f"within {MAX_ARRIVAL_S:.0e} s of the log start (about 31.7 years)",
            got=float(time_s[i]) if field == "time_s" else t.column(field)[i].as_py(),
        )
    return time_s


def _timestamps(ctx: ReadContext, t: pa.Table) -> np.ndarray:
    col = t.column("timestamp")
    ns, i, why = timestamps_ns(col)
    if i is not None:
        got = col[i].as_py()
        raise ctx.error(i, why or "", field="timestamp", expected=TIMESTAMP_EXPECTED, got=got)
    return ns


def _floats(t: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.cast(t.column(name), F64).to_numpy(zero_copy_only=False), np.float64)


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
