"""What each table of a run folder holds, column by column, and the check that refuses a
table no run could have written: one :class:`RunFolderError` line naming the file, the
column and (for a value) the row.

A table must hold its :data:`REQUIRED` columns (and those a command needs: ``need``);
it may hold more (later versions add columns). Each column of :data:`COLUMNS` present is
checked, for a table with rows:

* its type: numbers (a null is NaN: pandas writes NaN so) (``time``, ``maybe_time``, ``amount``, ``ratio``, ``value``),
  integers (``tokens``, ``count``, ``replica``, ``id``; floats holding whole numbers are
  accepted), text (``text``: strings, none null) or booleans (``flag``);
* its values: a ``time`` is finite and in [0, ``MAX_TIME_S``] (an arrival, a sample's or
  an event's instant); a ``maybe_time`` the same or NaN (never admitted, never
  finished, no replica); an ``amount`` (hours, dollars) finite and >= 0; a ``ratio``
  (a share of a pool) in [0, 1] or NaN (nothing free); ``tokens`` in [0, ``MAX_TOKENS``];
  a ``count`` in [0, ``MAX_COUNT``]; a ``replica`` in [-1, ``MAX_COUNT``] (-1: none);
* in a timeseries row, the used, free and largest-free-extent tokens are at most the
  row's capacity, and the capacity at most the largest the summary records
  (:func:`check_batch`'s ``capacity_tokens``), so memory exported in bytes fits 64 bits.

:func:`scan_table` checks a file a batch at a time (only the columns checked are read:
a command that streams a table keeps streaming); :func:`check_batch` checks a table or
batch already in memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.fields import MAX_COUNT, MAX_TOKENS
from sim.results.folder_errors import RunFolderError
from sim.results.summary_model import MAX_TIME_S

BATCH_ROWS = 65_536
"""Rows checked at a time by :func:`scan_table`."""

COLUMNS: dict[str, dict[str, str]] = {
    "requests": {
        "request_id": "id",
        "replica": "replica",
        "arrival_s": "time",
        "prompt_tokens": "tokens",
        "output_tokens": "tokens",
        "generated_tokens": "tokens",
        "admit_s": "maybe_time",
        "first_token_s": "maybe_time",
        "finish_s": "maybe_time",
        "status": "text",
    },
    "timeseries": {
        "time_s": "time",
        "replica": "replica",
        "trigger": "text",
        "up": "flag",
        "uptime_s": "maybe_time",
        "capacity_tokens": "tokens",
        "used_tokens": "tokens",
        "free_tokens": "tokens",
        "largest_free_extent_tokens": "tokens",
        "free_extent_count": "count",
        "largest_contiguous_free_block_ratio": "ratio",
        "running_requests": "count",
        "waiting_requests": "count",
        "preemptions_total": "count",
    },
    "events": {
        "time_s": "time",
        "replica": "replica",
        "kind": "text",
        "request_id": "id",
        "free_share": "ratio",
        "cause": "text",
        "uptime_s": "maybe_time",
    },
    "fleet": {
        "time_s": "time",
        "trigger": "text",
        "replicas": "count",
        "provisioning": "count",
        "loading": "count",
        "warming": "count",
        "active": "count",
        "draining": "count",
        "down": "count",
        "replica_hours": "amount",
        "cost_usd": "amount",
    },
    "alerts": {
        "time_s": "time",
        "replica": "replica",
        "alert": "text",
        "severity": "text",
        "state": "text",
        "value": "value",
    },
}
"""Each table's columns that are checked, by kind (module docstring)."""

REQUIRED: dict[str, tuple[str, ...]] = {
    "requests": (
        "request_id",
        "replica",
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "generated_tokens",
        "admit_s",
        "first_token_s",
        "finish_s",
        "status",
    ),
    "timeseries": (
        "time_s",
        "replica",
        "trigger",
        "up",
        "uptime_s",
        "capacity_tokens",
        "free_tokens",
        "largest_free_extent_tokens",
        "largest_contiguous_free_block_ratio",
    ),
    "events": ("time_s", "replica", "kind", "request_id", "free_share", "cause"),
    "fleet": ("time_s", "trigger", "replicas", "replica_hours", "cost_usd"),
    "alerts": ("time_s", "replica", "alert", "severity", "state", "value"),
}
"""The columns each table must hold (it may hold more: later versions add columns)."""

_NUMBERS = frozenset({"time", "maybe_time", "amount", "ratio", "value"})
_INTEGERS = frozenset({"tokens", "count", "replica", "id"})
_RANGES: dict[str, tuple[float, float, str]] = {
    "time": (0.0, MAX_TIME_S, "a time in seconds in [0, 1e10]"),
    "maybe_time": (0.0, MAX_TIME_S, "a time in seconds in [0, 1e10] (or NaN: never)"),
    "amount": (0.0, 1e15, "an amount >= 0"),
    "ratio": (0.0, 1.0, "a ratio in [0, 1] (or NaN)"),
    "tokens": (0.0, float(MAX_TOKENS), f"a token count in [0, {MAX_TOKENS:,}]"),
    "count": (0.0, float(MAX_COUNT), f"a count in [0, {MAX_COUNT:,}]"),
    "replica": (-1.0, float(MAX_COUNT), "a replica id >= -1"),
    "id": (-float(2**63), float(2**63), "an integer id"),
}
_MAY_BE_NAN = frozenset({"maybe_time", "ratio", "value"})
_BOUNDED_BY_CAPACITY = ("used_tokens", "free_tokens", "largest_free_extent_tokens")


def check_schema(schema: pa.Schema, shown: str, name: str, need: Iterable[str] = ()) -> None:
    """Refuse a table without its required columns (or those in ``need``), or whose
    checked columns have the wrong type; a table copied over another is named as such."""
    present = set(schema.names)
    wanted = list(dict.fromkeys((*REQUIRED[name], *need)))
    missing = [c for c in wanted if c not in present]
    if missing:
        others = [n for n, cols in REQUIRED.items() if n != name and set(cols) <= present]
        what = f" (it holds the {others[0]} table's columns)" if others else ""
        raise RunFolderError(
            f"{shown}: not the {name} table: no column {', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}{what}"
        )
    for column, kind in COLUMNS[name].items():
        if column not in present:
            continue
        kind_of = schema.field(column).type
        if pa.types.is_dictionary(kind_of):
            kind_of = kind_of.value_type
        if pa.types.is_null(kind_of):
            continue  # an empty table's columns (checked per row: no value may be null)
        ok = (
            (kind in _NUMBERS | _INTEGERS and (_numeric(kind_of)))
            or (
                kind == "text"
                and (pa.types.is_string(kind_of) or pa.types.is_large_string(kind_of))
            )
            or (kind == "flag" and pa.types.is_boolean(kind_of))
        )
        if not ok:
            expected = {"text": "text", "flag": "booleans"}.get(kind, "numbers")
            raise RunFolderError(
                f"{shown}: column {column}: holds {kind_of} values; expected {expected}: the "
                "run folder is damaged"
            )


def _numeric(kind_of: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind_of) or pa.types.is_floating(kind_of))


def scan_table(
    path: Path, name: str, need: Iterable[str] = (), capacity_tokens: int | None = None
) -> pa.Schema:
    """Check table ``name`` in the file ``path`` (module docstring) a batch of
    :data:`BATCH_ROWS` rows at a time, reading only the checked columns; its schema."""
    shown = str(path)
    try:
        with pq.ParquetFile(path) as f:
            schema = f.schema_arrow
            check_schema(schema, shown, name, need)
            columns = [c for c in COLUMNS[name] if c in schema.names]
            offset = 0
            for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                check_batch(batch, shown, name, offset, capacity_tokens)
                offset += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise unreadable(shown, e) from None
    return schema


def unreadable(shown: str, error: Exception) -> RunFolderError:
    """The error for a file Arrow cannot read as Parquet."""
    reason = re.sub(r"^Could not open Parquet input source '.*?':\s*", "", str(error))
    reason = " ".join(reason.split()).split(". ")[0]
    if len(reason) > 200:
        reason = reason[:197] + "..."
    return RunFolderError(f"{shown}: not a readable Parquet file (damaged or truncated): {reason}")


def check_batch(
    data: pa.Table | pa.RecordBatch,
    shown: str,
    name: str,
    offset: int = 0,
    capacity_tokens: int | None = None,
) -> None:
    """Check the values of ``data`` (a whole table, or the batch starting at row
    ``offset``); ``capacity_tokens``: the largest capacity the summary records (None:
    it records none)."""
    if not data.num_rows:
        return
    present = set(data.schema.names)
    for column, kind in COLUMNS[name].items():
        if column not in present:
            continue
        array = data.column(column)
        if kind in ("text", "flag"):
            if array.null_count:  # text and flags are never missing
                nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
                _refuse(shown, column, offset + int(np.flatnonzero(nulls)[0]), "null", kind)
            continue
        # a missing number is NaN (Parquet writes a NaN from pandas as null)
        values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=float)
        low, high, _ = _RANGES.get(kind, (-math.inf, math.inf, ""))
        with np.errstate(invalid="ignore"):
            good = (values >= low) & (values <= high)
            if kind in _MAY_BE_NAN:
                good |= np.isnan(values)
            if kind == "value":
                good = ~np.isinf(values)
            if kind in _INTEGERS:
                good &= values == np.floor(values)
        if not good.all():
            row = int(np.flatnonzero(~good)[0])
            _refuse(shown, column, offset + row, _shown(values[row]), kind)
        if column == "capacity_tokens" and capacity_tokens is not None:
            over = values > capacity_tokens
            if over.any():
                row = int(np.flatnonzero(over)[0])
                raise RunFolderError(
                    f"{shown}: column capacity_tokens: row {offset + row} holds "
                    f"{values[row]:.0f}; the summary records at most {capacity_tokens:,} "
                    "tokens: the run folder is damaged"
                )
    if name == "timeseries":
        _within_capacity(data, shown, offset)


def _within_capacity(data: pa.Table | pa.RecordBatch, shown: str, offset: int) -> None:
    if "capacity_tokens" not in data.schema.names:
        return
    capacity = np.asarray(data.column("capacity_tokens").to_numpy(), dtype=float)
    for column in _BOUNDED_BY_CAPACITY:
        if column not in data.schema.names:
            continue
        values = np.asarray(data.column(column).to_numpy(), dtype=float)
        over = values > capacity
        if over.any():
            row = int(np.flatnonzero(over)[0])
            raise RunFolderError(
                f"{shown}: column {column}: row {offset + row} holds {values[row]:.0f}, more "
                f"than the row's capacity_tokens {capacity[row]:.0f}: the run folder is damaged"
            )


def _shown(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:g}"


def _refuse(shown: str, column: str, row: int, got: str, kind: str) -> None:
    expected = (
        _RANGES[kind][2]
        if kind in _RANGES
        else {
            "text": "text",
            "flag": "true or false",
            "value": "a number (or NaN)",
        }[kind]
    )
    raise RunFolderError(
        f"{shown}: column {column}: row {row} holds {got}; expected {expected}: the run "
        "folder is damaged"
    )
