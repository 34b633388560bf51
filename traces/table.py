"""Conversions between the canonical Arrow table and the canonical pandas DataFrame.

DataFrame dtypes: ``request_id``, ``prompt_tokens``, ``output_tokens``,
``prefix_block_tokens``, ``num_samples``, ``beam_width``: int64; ``arrival_s``: float64;
``prefix_hashes``: ``pd.ArrowDtype(list<int64>)`` (a row reads as a Python list; an
empty list means no hashes); ``session_id``: nullable ``Int64``. Frames built elsewhere
may leave optional columns out or hold hashes as lists / arrays in an object column;
:func:`from_frame` fills defaults and checks every rule of :mod:`traces.validate`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from traces.errors import TraceError
from traces.formats import FORMATS
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


def _column(df: pd.DataFrame, name: str, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    s = df[name]
    if name == "prefix_hashes" and not isinstance(s.dtype, pd.ArrowDtype):
        items = [
            None if v is None or (isinstance(v, float) and np.isnan(v)) else list(v) for v in s
        ]
        return pa.array(items, type=t)
    if pd.api.types.is_bool_dtype(s.dtype):
        s = s.astype(np.int64)
    try:
        return pa.array(s, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TraceError(
            None, f"column cannot be converted ({exc})", field=name, expected=str(t)
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
        c: _column(df, c, ARROW_SCHEMA.field(c).type) for c in ARROW_SCHEMA.names if c in df.columns
    }
    raw = pa.table(present)
    for c, t in fmt.types.items():
        if c in raw.column_names and c != "prefix_hashes":
            try:
                raw = raw.set_column(raw.column_names.index(c), c, raw.column(c).cast(t))
            except (pa.ArrowException, ValueError) as exc:
                raise TraceError(
                    name, f"column cannot be read ({exc})", field=c, expected=str(t)
                ) from None
    return to_canonical(ReadContext(path=None, line_base=None), fmt, raw)
