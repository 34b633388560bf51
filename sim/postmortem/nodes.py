"""The nodes of a postmortem log: lifecycle events, from a nodes file's rows
(:mod:`sim.postmortem.log`'s nodes format) or a reader's inference
(:mod:`sim.postmortem.otlp_nodes`), checked against the lifecycle into the log's
:class:`Fleet`.

Each :class:`NodeEvent` carries its own error (its file and line or row), so one check,
:func:`fleet_of`, serves events of any source: sorted by time (ties in list order), each
replica's events must make sense in turn: ``start`` / ``scale_up`` bring up a node that
is not up, ``crash`` needs it up, ``restart`` needs it up or crashed (and leaves it up),
``scale_down`` needs it up or crashed (and leaves it gone). A ``start`` at
``time_s <= 0`` puts the replica in the initial fleet, up for ``-time_s`` seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traces.errors import TraceError
from traces.validate import ReadContext

TEXT = pa.string()
EVENTS: Final = ("start", "restart", "scale_up", "scale_down", "crash")
DEFAULT_POOL: Final = "default"


@dataclass(frozen=True)
class Fleet:
    """The log's nodes, by dense replica id, and their events (what
    :class:`~sim.postmortem.log.PostmortemLog` carries of them)."""

    names: list[str]
    pools: list[str]
    uptime_s: np.ndarray
    """float64: seconds up at the log start (0 where not ``up_at_start``)."""
    up_at_start: np.ndarray
    events: pd.DataFrame
    """``time_s``, ``replica`` (dense id), ``event`` (and ``detail`` where any event has
    one), sorted by time (ties in input order); the initial fleet's starts are not in it."""


@dataclass(frozen=True)
class NodeEvent:
    """One node lifecycle event, from wherever it was read (a nodes file's row, or a
    reader's inference), carrying its own error: :func:`fleet_of` checks the events in
    turn and a problem is that row's one-line error."""

    time_s: float
    """Seconds from the log start; <= 0 only for a ``start`` (the initial fleet)."""
    replica: str
    event: str
    """One of :data:`EVENTS` (lower case)."""
    detail: str | None
    """Free text; None where the source has no detail at all."""
    error: Callable[..., TraceError]
    """``error(message, field=..., expected=..., got=...)``: the error at this event's
    source (its file and line or row)."""
    fields: tuple[str, str] = ("event", "time_s")
    """(event field, time field): the names the source gives the two, for errors."""


_NEXT: Final = {  # event -> (states it may follow, state after it)
    "start": (("gone", "crashed"), "up"),
    "scale_up": (("gone", "crashed"), "up"),
    "restart": (("up", "crashed"), "up"),
    "crash": (("up",), "crashed"),
    "scale_down": (("up", "crashed"), "gone"),
}


def node_events(ctx: ReadContext, t: pa.Table, time_s: np.ndarray) -> list[NodeEvent]:
    """The rows of a nodes table as events, in file order (the table and its times from
    :mod:`sim.postmortem.log`'s ``read_table(path, NODES, "time_s")`` and
    ``node_times``): replica and event present, events known, only a ``start`` before
    the log start. Their order in time is :func:`fleet_of`'s to check."""
    names = text_cells(ctx, t, "replica")
    raw = text_cells(ctx, t, "event")
    events = np.char.lower(raw.astype(str))
    bad = ~np.isin(events, EVENTS)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i, "unknown event", field="event", expected=f"one of {', '.join(EVENTS)}", got=raw[i]
        )
    field = "time_s" if "time_s" in t.column_names else "timestamp"
    bad = (time_s < 0) & (events != "start")
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i,
            f"{events[i]} before the log start",
            field=field,
            expected="a time >= 0 (only a start row may be negative: the node's uptime)",
            got=float(time_s[i]),
            as_written=field == "time_s",
        )
    details = text_cells(ctx, t, "detail", required=False) if "detail" in t.column_names else None
    return [
        NodeEvent(
            float(time_s[i]),
            str(names[i]),
            str(events[i]),
            None if details is None else str(details[i]),
            functools.partial(ctx.error, i),
            ("event", field),
        )
        for i in range(len(names))
    ]


def node_pools(ctx: ReadContext, t: pa.Table) -> dict[str, str]:
    """Replica -> pool of a nodes table, for the replicas it gives one (at most one each)."""
    if "pool" not in t.column_names:
        return {}
    names = text_cells(ctx, t, "replica")
    pool = text_cells(ctx, t, "pool", required=False)
    first: dict[str, int] = {}
    for i, p in enumerate(pool):
        if not p:
            continue
        j = first.setdefault(str(names[i]), i)
        if pool[j] != p:
            raise ctx.error(
                i,
                f"replica {names[i]!r} in a second pool",
                field="pool",
                expected=f"one pool per replica ({pool[j]!r}, {row_name(ctx, j)})",
                got=p,
            )
    return {name: str(pool[i]) for name, i in first.items()}


def fleet_of(events: Sequence[NodeEvent], names: Sequence[str], pools: Sequence[str]) -> Fleet:
    """The fleet of ``names`` (dense ids in this order; ``pools`` aligned) from
    ``events``: sorted by time (ties in list order), then each replica's events must
    make sense in turn (the module docstring's lifecycle), else the offending event's
    error. A ``start`` at ``time_s <= 0`` puts its replica in the initial fleet, up for
    ``-time_s`` seconds; a replica without one is not up at the log start."""
    ids = {n: k for k, n in enumerate(names)}
    rows = sorted(range(len(events)), key=lambda i: (events[i].time_s, i))
    state = ["gone"] * len(names)
    uptime_s = np.zeros(len(names))
    up_at_start = np.zeros(len(names), bool)
    keep = []
    since: list[NodeEvent | None] = [None] * len(names)
    for i in rows:
        e = events[i]
        r = ids[e.replica]
        after, to = _NEXT[e.event]
        if state[r] not in after:
            raise e.error(
                f"{e.event} of replica {e.replica!r} at {e.time_s:g} s, when it is {state[r]}"
                + _since(since[r]),
                field=e.fields[0],
                expected=f"{e.event} only when the node is {' or '.join(after)}",
                got=e.event,
            )
        state[r], since[r] = to, e
        if e.event == "start" and e.time_s <= 0:
            up_at_start[r], uptime_s[r] = True, abs(e.time_s)
        else:
            keep.append(e)
    frame: dict[str, np.ndarray] = {
        "time_s": np.array([e.time_s for e in keep], np.float64),
        "replica": np.array([ids[e.replica] for e in keep], np.int64),
        "event": np.array([e.event for e in keep], dtype=object),
    }
    if any(e.detail is not None for e in events):
        frame["detail"] = np.array([e.detail or "" for e in keep], dtype=object)
    return Fleet(list(names), list(pools), uptime_s, up_at_start, pd.DataFrame(frame))


def _since(e: NodeEvent | None) -> str:
    """`` (since its EVENT at T s: FILE line L)``: what put a node in its state."""
    if e is None:
        return ""
    err = e.error("")
    where = Path(err.path).name
    where += f" line {err.line}" if err.line is not None else f" row {err.row}"
    return f" (since its {e.event} at {e.time_s:g} s: {where})"


def read_fleet(ctx: ReadContext, t: pa.Table, time_s: np.ndarray) -> Fleet:
    """A nodes table's fleet alone: :func:`node_events`, :func:`node_pools`, then
    :func:`fleet_of` with the replicas in order of first appearance."""
    events = node_events(ctx, t, time_s)
    pools = node_pools(ctx, t)
    names = list(dict.fromkeys(e.replica for e in events))
    return fleet_of(events, names, [pools.get(n, DEFAULT_POOL) for n in names])


def text_cells(ctx: ReadContext, t: pa.Table, name: str, required: bool = True) -> np.ndarray:
    """Column ``name`` as trimmed str (object array; "" where blank or null); with
    ``required``, a blank cell is the error of its row."""
    col = pc.fill_null(pc.utf8_trim_whitespace(pc.cast(t.column(name), TEXT)), "")
    values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    if required and (values == "").any():
        i = int(np.argmax(values == ""))
        raise ctx.error(i, "missing value", field=name, expected="a non-empty value")
    return values


def row_name(ctx: ReadContext, i: int) -> str:
    """``line L`` (CSV) or ``row R`` (Parquet) of chunk row ``i``, for a message."""
    e = ctx.error(i, "")
    return f"line {e.line}" if e.line is not None else f"row {e.row}"
