"""Stream raw Arrow tables out of a CSV, JSONL or Parquet file, typed per format.

Parsing is pyarrow's (multi-megabyte blocks, no Python per row). When pyarrow rejects a
file, :func:`traces.locate.locate` re-reads it to find the first record, cell or byte it
could not read, so the :class:`TraceError` can name its line, row, column and value;
that slow path runs only on a broken file. CSV columns are selected by their names as
written (``" arrival_s"``) and renamed to the trimmed names the header reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from traces.errors import TraceError, reader_says
from traces.formats import Format, Header
from traces.locate import locate

PARSE_ERRORS = (pa.ArrowException, ValueError, UnicodeError, OSError, OverflowError)


def read_types(fmt: Format, header: Header) -> dict[str, pa.DataType]:
    """Arrow read type per present column; list columns are text in CSV."""
    types: dict[str, pa.DataType] = {}
    for name in (*fmt.required, *fmt.optional):
        if name in header.columns and name in fmt.types:
            t = fmt.types[name]
            types[name] = pa.string() if header.container == "csv" and pa.types.is_list(t) else t
    return types


def iter_raw(path: Path, fmt: Format, header: Header, chunk_rows: int) -> Iterator[pa.Table]:
    """Yield tables of at most ``chunk_rows`` rows, in file order, with read types."""
    types = read_types(fmt, header)
    if header.container == "parquet":
        yield from _parquet(path, types, chunk_rows)
        return
    source = (
        _csv(path, header, types, chunk_rows)
        if header.container == "csv"
        else _jsonl(path, types, chunk_rows)
    )
    rows = 0
    try:
        for table in _rechunk(source, chunk_rows):
            rows += table.num_rows
            yield table
    except TraceError:
        raise
    except PARSE_ERRORS as exc:
        raise locate(path, header, types, exc, rows) from None


def _rechunk(batches: Iterator[pa.RecordBatch], chunk_rows: int) -> Iterator[pa.Table]:
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        while count >= chunk_rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, chunk_rows)
            rest = table.slice(chunk_rows)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)


def _block_bytes(chunk_rows: int) -> int:
    return int(min(64 << 20, max(1 << 20, chunk_rows * 48)))


def _csv(
    path: Path, header: Header, types: dict[str, pa.DataType], chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    raw = header.raw_names()
    reader = pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(block_size=_block_bytes(chunk_rows)),
        convert_options=pcsv.ConvertOptions(
            column_types={raw[n]: t for n, t in types.items()},
            include_columns=[raw[n] for n in types],
        ),
    )
    names = list(types)
    renamed = any(raw[n] != n for n in names)
    for batch in reader:
        yield pa.RecordBatch.from_arrays(batch.columns, names=names) if renamed else batch


def _jsonl(path: Path, types: dict[str, pa.DataType], chunk_rows: int) -> Iterator[pa.RecordBatch]:
    reader = pjson.open_json(
        path,
        read_options=pjson.ReadOptions(block_size=_block_bytes(chunk_rows)),
        parse_options=pjson.ParseOptions(
            explicit_schema=pa.schema(list(types.items())), unexpected_field_behavior="ignore"
        ),
    )
    yield from reader


INT64_MAX = (1 << 63) - 1


def check_parquet_column(
    path: Path, name: str, col: pa.ChunkedArray, t: pa.DataType, first_row: int
) -> None:
    """Refuse a Parquet column that cannot hold what ``t`` asks for, before any cast
    could turn it into something else: a number column (``t`` an integer or a float)
    stored as text, flags or times (pyarrow would parse text as numbers without a
    word), and an unsigned 64-bit value beyond a signed one (a cast would wrap
    2**64 - 1 to -1): its row and the value as the file holds it."""
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return
    kind = col.type
    if not (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_null(kind)
    ):
        what = "text" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else kind
        raise TraceError(
            path,
            f"the Parquet column holds {what} ({kind}), not numbers",
            field=name,
            expected=f"a numeric column ({t})",
        )
    if pa.types.is_uint64(kind) and len(col) and pc.max(col).as_py() > INT64_MAX:
        over = pc.greater(col, pa.scalar(INT64_MAX, pa.uint64()))
        row = pc.index(over, True).as_py()
        raise TraceError(
            path,
            "out of range",
            row=first_row + row,
            field=name,
            expected=f"an integer at most {INT64_MAX} (a signed 64-bit integer)",
            written=str(col[row].as_py()),
        )


def _parquet(path: Path, types: dict[str, pa.DataType], chunk_rows: int) -> Iterator[pa.Table]:
    rows = 0
    try:
        pf = pq.ParquetFile(path)
        batches = pf.iter_batches(batch_size=chunk_rows, columns=list(types))
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for name, t in types.items():
                col = table.column(name)
                check_parquet_column(path, name, col, t, rows)
                keep_int = pa.types.is_floating(t) and pa.types.is_integer(
                    col.type
                )  # checked as ints
                if col.type != t and not keep_int:
                    try:
                        col = pc.cast(col, t)
                    except PARSE_ERRORS:
                        raise TraceError(
                            path,
                            f"column of type {col.type} cannot be read",
                            row=rows,
                            field=name,
                            expected=str(t),
                        ) from None
                    table = table.set_column(table.column_names.index(name), name, col)
            rows += table.num_rows
            yield table
    except TraceError:
        raise
    except PARSE_ERRORS as exc:
        raise TraceError(
            path,
            f"cannot read the Parquet data from this row on ({reader_says(exc)})",
            row=rows,
            expected="a Parquet file written whole",
        ) from None
