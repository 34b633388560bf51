"""Result tables from the engine's records: ``frame`` (a table recorded as a list per
column -> DataFrame, fast) and ``request_frame`` (the requests table from the request
records). Compiled with the engine (``sim/build.py``).

Every table's columns are defined once: the timeseries and the event log are dataclasses
with a list per column in ``sim.engine.recorder`` (:func:`columns_of` reads their fields,
in order), and the requests table is :data:`REQUEST_FIELDS`. The frame builders, the
column lists of docs/scenarios.md (checked by a test) and the tests read those definitions."""

# fragsim: compiled
from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sim.engine.batch import Group

REQUEST_FIELDS: tuple[tuple[str, str], ...] = (
    ("request_id", "int64"),
    ("replica", "int64"),  # the replica it ended on (-1: unfinished); not a Group field
    ("arrival_s", "float64"),
    ("prompt_tokens", "int64"),
    ("output_tokens", "int64"),  # as the trace said
    ("generated_tokens", "int64"),  # emitted per sequence (see Group.target_tokens)
    ("num_seqs", "int64"),
    ("admit_s", "float64"),
    ("first_token_s", "float64"),
    ("finish_s", "float64"),
    ("status", "str"),
    ("preemptions", "int64"),
    ("retries", "int64"),
    ("peak_reserved_tokens", "int64"),
    ("cached_tokens", "int64"),
)
"""The requests table, in column order: (name, dtype). Every column is the request
record's (``Group``'s) field of that name, except ``replica``; ``str`` columns take the
dtype pandas infers for them."""
REQUEST_COLUMNS: tuple[str, ...] = tuple(name for name, _ in REQUEST_FIELDS)
PREFIX_CACHE_FIELDS: tuple[tuple[str, str], ...] = (
    ("prefix_queried_tokens", "int64"),
    ("prefix_hit_tokens", "int64"),
    ("preempted_queried_tokens", "int64"),
    ("preempted_hit_tokens", "int64"),
)
"""Columns the requests table adds after :data:`REQUEST_FIELDS` where a replica caches
prefixes: vLLM's prefix-cache accounting, per request (``Group``'s fields of these
names; docs/vllm.md says which vLLM figure each is)."""
PREFIX_CACHE_COLUMNS: tuple[str, ...] = tuple(name for name, _ in PREFIX_CACHE_FIELDS)


def columns_of(table: Any) -> tuple[str, ...]:
    """A table dataclass's (or instance's) field names, in order: its columns."""
    return tuple(f.name for f in dataclasses.fields(table))


def start_columns(table: Any) -> None:
    """Give each of the table's columns an empty list."""
    for name in columns_of(table):
        setattr(table, name, [])


def frame(table: Any) -> pd.DataFrame:
    """The DataFrame of a table recorded as a list per column (a dataclass whose fields,
    in order, are the columns): the frame ``pd.DataFrame.from_records`` makes of its
    rows, faster.

    A column of only bools, or only ints and floats, is converted by numpy in one C loop
    (bool, int64 or float64: the dtypes pandas infers too); any other column (strings,
    None, mixtures) goes through pandas' own inference, as ``from_records`` would."""
    names = columns_of(table)
    columns: list[list[object]] = [getattr(table, name) for name in names]
    rows = len(columns[0])
    ragged = [name for name, values in zip(names, columns, strict=True) if len(values) != rows]
    assert not ragged, f"columns {ragged} do not have the {rows} rows of {names[0]}"
    if not rows:
        return _empty(names)
    data: dict[str, Any] = {}
    for name, values in zip(names, columns, strict=True):
        types = set(map(type, values))
        if types == {str}:
            data[name] = _strings(name, values)
            continue
        array = _numeric(values, types)
        data[name] = _inferred(name, values) if array is None else array
    return pd.DataFrame(data, columns=list(names))


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame.from_records([], columns=list(columns))


def _numeric(values: list[object], types: set[type]) -> Any:
    """``values`` (of the ``types``) as a 1-D numpy array when they are all bools, or all
    ints and floats (the dtypes ``from_records`` infers for those); None otherwise. A
    column of one type is converted to its dtype directly (no dtype discovery)."""
    if types == {bool}:
        return np.array(values, dtype=np.bool_)
    if types == {float}:
        return np.array(values, dtype=np.float64)
    if not types or not types <= {int, float}:
        return None
    if types == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64 (uint64, objects): pandas' inference decides
            return None
    try:
        array = np.array(values)
    except (ValueError, OverflowError):
        return None
    return array if array.ndim == 1 and array.dtype.kind in "bif" else None


def _strings(name: str, values: list[object]) -> Any:
    """A column of only ``str`` values with the dtype ``from_records`` infers for them,
    read off the distinct values (the inference depends on them only)."""
    distinct = sorted(set(values), key=str)
    return pd.Series(values, dtype=_inferred(name, distinct).dtype, name=name)


RECORD_FIELDS: tuple[tuple[str, str], ...] = (
    tuple((name, dtype) for name, dtype in REQUEST_FIELDS if name != "replica")
    + PREFIX_CACHE_FIELDS
)
"""The request record's fields (every column but ``replica``, the prefix-cache ones
too), in order."""
REQUEST_RECORD = np.dtype(
    [(name, object if dtype == "str" else dtype) for name, dtype in RECORD_FIELDS]
)
"""A numpy record of one request (``str`` fields as objects)."""
record_of = attrgetter(*(name for name, _ in RECORD_FIELDS))
"""A group's record fields as a tuple (a row of :data:`REQUEST_RECORD`)."""


def request_frame(
    groups: list[Group], replicas: list[int], prefix_cache: bool = False
) -> pd.DataFrame:
    """The requests table, one row per group sorted by request id (stable), with the
    columns of :data:`REQUEST_FIELDS` (and :data:`PREFIX_CACHE_FIELDS` with
    ``prefix_cache``): the frame ``from_records`` would make of the
    groups' record fields, sorted (ended groups are not touched again, so reading them at the end
    equals reading them when they ended).

    One pass over the groups into a numpy record array (a group's fields read together),
    then :func:`records_frame` on its columns. A run's own records are columnar from the
    start (``sim.simulate.records``)."""
    if not groups:
        return _empty(_columns(prefix_cache))
    records = np.fromiter(map(record_of, groups), dtype=REQUEST_RECORD, count=len(groups))
    columns = {name: records[name] for name, _ in RECORD_FIELDS}
    return records_frame(columns, np.array(replicas, dtype=np.int64), prefix_cache)


def _fields(prefix_cache: bool) -> tuple[tuple[str, str], ...]:
    return REQUEST_FIELDS + PREFIX_CACHE_FIELDS if prefix_cache else REQUEST_FIELDS


def _columns(prefix_cache: bool) -> tuple[str, ...]:
    return tuple(name for name, _ in _fields(prefix_cache))


def records_frame(
    columns: dict[str, Any], replicas: Any, prefix_cache: bool = False
) -> pd.DataFrame:
    """The requests table from one numpy array per record field (``columns``, by the
    names of :data:`RECORD_FIELDS`; ``str`` fields as object arrays) and each row's
    replica, one entry per request, sorted by request id (stable); with
    ``prefix_cache``, :data:`PREFIX_CACHE_FIELDS` too."""
    if not len(replicas):
        return _empty(_columns(prefix_cache))
    order = np.argsort(columns["request_id"], kind="stable")
    data: dict[str, Any] = {}
    for name, dtype in _fields(prefix_cache):
        column: Any = replicas if name == "replica" else columns[name]
        column = column[order]
        if dtype == "str":
            # The dtype pandas infers for these strings, read off the distinct ones.
            inferred = _inferred(name, sorted(set(column), key=str)).dtype
            column = pd.Series(column, dtype=inferred)
        data[name] = column
    # The columns are fresh copies owned here: the frame takes them as they are (no
    # second copy into consolidated blocks at a million-request run's memory peak).
    return pd.DataFrame(data, columns=list(_columns(prefix_cache)), copy=False)


def _inferred(name: str, values: list[object]) -> pd.Series:
    """A column with the dtype ``from_records`` infers for ``values``."""
    return pd.DataFrame.from_records([(v,) for v in values], columns=[name])[name]
