"""Stream raw Arrow tables out of a CSV, JSONL or Parquet file, typed per format.

Parsing is pyarrow's (multi-megabyte blocks, no Python per row). When pyarrow rejects a
value, the file is re-read with the offending columns as text to find the first bad
cell, so the :class:`TraceError` can name its row, line, column and value; that slow path
runs only on a broken file. A row with too many or too few fields is found the same
way (a rescan with Python's csv module), so its line is named too.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from traces.errors import TraceError
from traces.formats import Format, Header

_Bad = tuple[int, str, object, str, int]  # row, field, value, expected, line
ROW_RE = re.compile(r"Row #(\d+)", re.IGNORECASE)
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
        _csv(path, types, chunk_rows)
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


def _csv(path: Path, types: dict[str, pa.DataType], chunk_rows: int) -> Iterator[pa.RecordBatch]:
    reader = pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(block_size=_block_bytes(chunk_rows)),
        convert_options=pcsv.ConvertOptions(column_types=types, include_columns=list(types)),
    )
    yield from reader


def _jsonl(path: Path, types: dict[str, pa.DataType], chunk_rows: int) -> Iterator[pa.RecordBatch]:
    reader = pjson.open_json(
        path,
        read_options=pjson.ReadOptions(block_size=_block_bytes(chunk_rows)),
        parse_options=pjson.ParseOptions(
            explicit_schema=pa.schema(list(types.items())), unexpected_field_behavior="ignore"
        ),
    )
    yield from reader


def _parquet(path: Path, types: dict[str, pa.DataType], chunk_rows: int) -> Iterator[pa.Table]:
    rows = 0
    try:
        pf = pq.ParquetFile(path)
        batches = pf.iter_batches(batch_size=chunk_rows, columns=list(types))
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for name, t in types.items():
                col = table.column(name)
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
        raise TraceError(path, f"unreadable Parquet data ({exc})", row=rows) from None


def locate(
    path: Path, header: Header, types: dict[str, pa.DataType], exc: BaseException, rows_before: int
) -> TraceError:
    """Find the first cell pyarrow could not convert; fall back to pyarrow's own message."""
    line_base = 2 if header.container == "csv" else 1  # line of data row 0
    if header.container == "csv" and "CSV parse error" in str(exc):
        try:
            ragged = _locate_csv_structure(path)
        except (OSError, csv.Error):
            ragged = None
        if ragged is not None:
            return ragged
    try:
        found = (
            _locate_csv(path, types) if header.container == "csv" else _locate_jsonl(path, types)
        )
    except PARSE_ERRORS:
        found = None
    if found is not None:
        row, name, value, expected, line = found
        return TraceError(
            path,
            "cannot parse value",
            row=row,
            line=line,
            field=name,
            expected=expected,
            got=value,
        )
    message = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    m = ROW_RE.search(str(exc))
    at: int | None = int(m.group(1)) if m else None
    if at is None and rows_before and header.container == "csv":
        at = rows_before + line_base
    return TraceError(path, f"cannot parse file as {header.container.upper()} ({message})", line=at)


def _locate_csv_structure(path: Path) -> TraceError | None:
    """The first data row whose field count differs from the header's (Python's csv
    module, so the line is exact even with quoted newlines); None if every row fits."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        columns = next(reader, [])
        row = -1
        for record in reader:
            if not record:  # a blank line: pyarrow skips it too
                continue
            row += 1
            if len(record) == len(columns):
                continue
            short = len(record) < len(columns)
            return TraceError(
                path,
                f"row has {len(record)} field{'' if len(record) == 1 else 's'} "
                f"under a {len(columns)}-column header",
                row=row,
                line=reader.line_num,
                field=columns[len(record)].strip() if short else "<record>",
                expected=f"{len(columns)} comma-separated fields, one per header column",
                got=",".join(record)[:120],
            )
    return None


def _expected(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "a timestamp like 2023-11-16 18:15:46.6805900"
    if pa.types.is_integer(t):
        return "an integer"
    if pa.types.is_list(t):
        return "a list of integers"
    return "a number"


def _locate_csv(path: Path, types: dict[str, pa.DataType]) -> _Bad | None:
    as_text = {name: pa.string() for name in types}
    reader = pcsv.open_csv(
        path,
        convert_options=pcsv.ConvertOptions(column_types=as_text, include_columns=list(as_text)),
    )
    rows = 0
    for batch in reader:
        best: _Bad | None = None
        for name, t in types.items():
            if pa.types.is_string(t) or pa.types.is_list(t):
                continue
            text = pd.Series(batch.column(name).to_pylist(), dtype=object)
            blank = text.isna() | (text.astype(str).str.strip() == "")
            if pa.types.is_timestamp(t):
                parsed = pd.to_datetime(text, errors="coerce", format="ISO8601")
            else:
                parsed = pd.to_numeric(text, errors="coerce")
            bad = np.array(parsed.isna() & ~blank, dtype=bool)
            if pa.types.is_integer(t) and not pa.types.is_timestamp(t):
                with np.errstate(invalid="ignore"):
                    vals = parsed.to_numpy(dtype=float, na_value=np.nan)
                    bad = bad | (~blank.to_numpy() & (vals % 1 != 0))
            if bad.any():
                i = int(np.argmax(bad))
                if best is None or rows + i < best[0]:
                    best = (rows + i, name, text.iloc[i], _expected(t), rows + i + 2)
        if best is not None:
            return best
        rows += batch.num_rows
    return None


def _locate_jsonl(path: Path, types: dict[str, pa.DataType]) -> _Bad | None:
    row = -1
    with path.open("rb") as fh:
        for line, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            row += 1
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return (
                    row,
                    "<record>",
                    raw[:80].decode("utf-8", "replace"),
                    "one JSON object per line",
                    line,
                )
            if not isinstance(obj, dict):
                return (row, "<record>", type(obj).__name__, "one JSON object per line", line)
            for name, t in types.items():
                if _json_ok(obj.get(name), t):
                    continue
                return (row, name, obj.get(name), _expected(t), line)
    return None


def _json_ok(value: object, t: pa.DataType) -> bool:
    if value is None:
        return True  # missing values are reported by validation, with the row
    if pa.types.is_list(t):
        return isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63)
            for v in value
        )
    if pa.types.is_integer(t):
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and -(1 << 63) <= value < (1 << 63)
        )
    if pa.types.is_floating(t):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True
