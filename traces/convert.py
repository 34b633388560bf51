"""Convert a trace file of any readable format to canonical CSV / JSONL / Parquet.

Streams chunk by chunk (bounded memory) and writes atomically (:mod:`traces.writers`).
If chunks turn out to overlap in time (an unsorted file), streaming cannot sort them:
under ``strict`` that is a :class:`TraceError`; otherwise the file is re-read whole,
sorted, and written, with a :class:`TraceWarning`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from traces.arrivals import ArrivalSpec
from traces.errors import TraceError, TraceWarning
from traces.loaders import DEFAULT_CHUNK_ROWS, ChunksOverlap, iter_tables, load_table
from traces.writers import output_container, write_tables


def convert(
    src: str | Path,
    dst: str | Path,
    *,
    format: str | None = None,
    strict: bool = False,
    keep_failed: bool = False,
    arrivals: ArrivalSpec | None = None,
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> int:
    """Read ``src`` (format detected unless given) and write it canonically to ``dst``,
    whose extension picks the container. Returns the number of rows written."""
    output_container(dst)
    stream = iter_tables(
        src,
        format=format,
        strict=strict,
        keep_failed=keep_failed,
        arrivals=arrivals,
        seed=seed,
        chunk_rows=chunk_rows,
        overlap="raise",
    )
    try:
        return write_tables(stream, dst)
    except ChunksOverlap as exc:
        if strict:
            raise TraceError(
                exc.path,
                "arrivals are not sorted",
                row=exc.row,
                field=exc.field,
                expected=exc.expected,
                got=exc.got,
            ) from None
    warnings.warn(
        f"{src}: arrivals not sorted across chunks; sorting in memory", TraceWarning, stacklevel=2
    )
    table = load_table(src, format=format, keep_failed=keep_failed, arrivals=arrivals, seed=seed)
    return write_tables([table], dst)
