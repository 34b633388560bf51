"""Conversions between the canonical Arrow table and the canonical pandas DataFrame.

DataFrame dtypes: ``request_id``, ``prompt_tokens``, ``output_tokens``,
``prefix_block_tokens``, ``num_samples``, ``beam_width``: int64; ``arrival_s``: float64;
``prefix_hashes``: ``pd.ArrowDtype(list<int64>)`` (a row reads as a Python list; an
empty list means no hashes); ``session_id``: nullable ``Int64``. Frames built elsewhere
may leave optional columns out or hold hashes as lists / arrays in an object column;
:func:`from_frame` fills defaults and checks every rule of :mod:`traces.validate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from traces.errors import TraceError
from traces.formats import FORMATS
from traces.records import expected_text
from traces.schema import ARROW_SCHEMA
from traces.validate import ReadContext, to_canonical

HASHES_DTYPE = pd.ArrowDtype(pa.list_(pa.int64()))


def to_frame(table: pa.Table) -> pd.DataFrame:
    """Canonical Arrow table -> canonical DataFrame (numeric columns without copies)."""
    data: dict[str, object] = {}
    for f in ARROW_SCHEMA:
        col = table.column(f.name)
        if f.name == "prefix_hashes":
            data[f.name] = pd.arrays.ArrowExtensionArray(col)
        elif f.name == "session_id":
            data[f.name] = col.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get).array
        else:
            data[f.name] = col.to_numpy()
    return pd.DataFrame(data, copy=False)


_CONVERT_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def _first_failing(n: int, converts: Callable[[int], object]) -> int:
    """The row whose value makes ``converts(k)`` (convert the first ``k`` rows) fail
    when ``converts(n)`` does: the last row of the shortest failing prefix (bisection)."""
    lo, hi = 0, n  # converts(lo) succeeds (lo = 0: nothing to convert); converts(hi) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            converts(mid)
            lo = mid
        except _CONVERT_ERRORS:
            hi = mid
    return hi - 1


def _unconvertible(
    name: str | None,
    field: str,
    t: pa.DataType,
    n: int,
    converts: Callable[[int], object],
    values: Sequence[object],
) -> TraceError:
    row = _first_failing(n, converts)
    return TraceError(
        name,
        "cannot convert value",
        row=row,
        field=field,
        expected=expected_text(t),
        got=values[row],
    )


def _column(
    df: pd.DataFrame, name: str, t: pa.DataType, frame: str | None = None
) -> pa.Array | pa.ChunkedArray:
    s = df[name]
    if name == "prefix_hashes" and not isinstance(s.dtype, pd.ArrowDtype):
        items: list[object] = []
        for i, v in enumerate(s):
            if v is None or (isinstance(v, float) and np.isnan(v)):
                items.append(None)
            elif isinstance(v, str | bytes) or not hasattr(v, "__iter__"):
                raise TraceError(
                    frame, "not a list", row=i, field=name, expected=expected_text(t), got=v
                )
            else:
                items.append(list(v))
        try:
            return pa.array(items, type=t)
        except _CONVERT_ERRORS:
            raise _unconvertible(
                frame, name, t, len(items), lambda k: pa.array(items[:k], type=t), items
            ) from None
    if pd.api.types.is_bool_dtype(s.dtype):
        s = s.astype(np.int64)
    try:
        return pa.array(s, from_pandas=True)
    except _CONVERT_ERRORS:
        values = s.tolist()
        raise _unconvertible(
            frame, name, t, len(s), lambda k: pa.array(s.iloc[:k], from_pandas=True), values
        ) from None


def _cast(col: pa.ChunkedArray, field: str, t: pa.DataType, frame: str | None) -> pa.ChunkedArray:
    try:
        return col.cast(t)
    except _CONVERT_ERRORS:
        raise _unconvertible(
            frame, field, t, len(col), lambda k: col.slice(0, k).cast(t), col.to_pylist()
        ) from None


def from_frame(df: pd.DataFrame, *, name: str | None = None) -> pa.Table:
    """Validate a DataFrame against the canonical rules and return the canonical table.

    Missing optional columns get their defaults (without ``request_id``, rows are
    numbered from 0); a missing required column, or any value
    that breaks a rule, raises :class:`TraceError` naming the row and field.
    """
    for col in FORMATS["canonical"].required:  # request_id: rows are numbered without it
        if col not in df.columns:
            raise TraceError(name, "missing column", field=col, expected=f"a {col!r} column")
    fmt = FORMATS["canonical"]
    present = {
        c: _column(df, c, ARROW_SCHEMA.field(c).type, name)
        for c in ARROW_SCHEMA.names
        if c in df.columns
    }
    raw = pa.table(present)
    for c, t in fmt.types.items():
        if c in raw.column_names and c != "prefix_hashes":
            raw = raw.set_column(raw.column_names.index(c), c, _cast(raw.column(c), c, t, name))
    return to_canonical(ReadContext(path=None, line_base=None), fmt, raw)
