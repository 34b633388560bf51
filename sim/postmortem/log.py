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
of them into a fleet), and :func:`sim.postmortem.log_requests.index_requests` turns a requests table on a fleet
into the :class:`PostmortemLog`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sim.postmortem.log_requests import PostmortemLog as PostmortemLog  # re-exported
from sim.postmortem.log_requests import index_requests
from sim.postmortem.nodes import TEXT, read_fleet
from traces.bounds import MAX_ARRIVAL_S
from traces.errors import TraceError
from traces.formats import F64, I64, Format, check_columns, read_header
from traces.readers import iter_raw
from traces.timestamps import EXPECTED as TIMESTAMP_EXPECTED
from traces.timestamps import timestamps_ns
from traces.validate import ReadContext, check_arrivals, check_finite

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
