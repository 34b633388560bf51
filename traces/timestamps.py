"""Parse text timestamps (Azure's ``TIMESTAMP`` column) to UTC nanoseconds, vectorised.

Accepted: ISO-8601 date-times as pyarrow parses them (``2023-11-16 18:15:46.6805900``,
``T`` or space, up to 9 fractional digits), optionally followed by a zone offset
(``Z``, ``+HH:MM``, ``-HHMM``), which is converted to UTC. Values without an offset are
taken as UTC (the Azure 2023 traces carry none; the 2024 ones end in ``+00:00``), so a
file may mix both. Blank cells are "missing"; anything else that does not parse is
reported with its row. The fast path is one Arrow cast; the per-kind split and the
search for the first bad value run only when that cast fails.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NAIVE: Final = pa.timestamp("ns")
ZONED: Final = pa.timestamp("ns", tz="UTC")
OFFSET_RE: Final = r"(Z|z|[+-]\d\d(:?\d\d)?)$"
EXPECTED: Final = "a timestamp like 2023-11-16 18:15:46.6805900 (optionally +HH:MM or Z)"


def _cast_ns(arr: pa.Array, t: pa.DataType) -> np.ndarray | None:
    try:
        return np.asarray(pc.cast(pc.cast(arr, t), pa.int64()).to_numpy(), dtype=np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _first_bad(arr: pa.Array, t: pa.DataType) -> int:
    """Index of the first value of ``arr`` that does not cast to ``t`` (binary search over
    prefixes: O(n log n), used only once a cast has failed)."""
    lo, hi = 0, len(arr)  # arr[:lo] casts; arr[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _cast_ns(arr.slice(0, mid), t) is None:
            hi = mid
        else:
            lo = mid
    return hi - 1


def timestamps_ns(
    col: pa.Array | pa.ChunkedArray,
) -> tuple[np.ndarray, int | None, str | None]:
    """UTC nanoseconds of text timestamps.

    Returns ``(ns, i, why)``: on success ``i`` and ``why`` are None; otherwise ``i`` is
    the index of the first bad value (``ns`` is then undefined) and ``why`` is
    ``"missing timestamp"`` or ``"cannot parse timestamp"``; the caller raises the
    :class:`traces.errors.TraceError` naming the row and line.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
        if pa.types.is_timestamp(arr.type):  # Parquet or Arrow input already typed
            arr = pc.cast(arr, NAIVE if arr.type.tz is None else ZONED)
            missing = arr.is_null().to_numpy(zero_copy_only=False)
            if missing.any():
                return np.zeros(0, np.int64), int(np.argmax(missing)), "missing timestamp"
            return np.asarray(pc.cast(arr, pa.int64()).to_numpy(), np.int64), None, None
        arr = pc.cast(arr, pa.string())
    text = pc.utf8_trim_whitespace(arr)
    if len(text) == 0:
        return np.zeros(0, np.int64), None, None
    blank = pc.fill_null(pc.equal(text, ""), True).to_numpy(zero_copy_only=False)
    if blank.any():
        return np.zeros(0, np.int64), int(np.argmax(blank)), "missing timestamp"
    first_zoned = re.search(OFFSET_RE, str(text[0].as_py())) is not None
    for t in (ZONED, NAIVE) if first_zoned else (NAIVE, ZONED):  # one kind: the usual case
        ns = _cast_ns(text, t)
        if ns is not None:
            return ns, None, None
    zoned = pc.match_substring_regex(text, OFFSET_RE).to_numpy(zero_copy_only=False)
    ns = np.zeros(len(text), dtype=np.int64)
    first: int | None = None
    for mask, t in ((~zoned, NAIVE), (zoned, ZONED)):
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            continue
        part = text.take(pa.array(idx))
        got = _cast_ns(part, t)
        if got is None:
            k = int(idx[_first_bad(part, t)])
            first = k if first is None else min(first, k)
        else:
            ns[idx] = got
    if first is not None:
        return ns, first, "cannot parse timestamp"
    return ns, None, None
