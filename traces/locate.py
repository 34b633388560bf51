"""The slow path of a broken text file: where it breaks, and what the file says there.

The fast path (:mod:`traces.readers`, :mod:`traces.validate`) parses with pyarrow and
checks whole columns at once; it knows the data row of a bad value but neither its exact
line (blank lines and quoted newlines shift lines) nor its text as written (a count is
read as float64, so ``-3`` became ``-3.0``). Once a check has failed, this module reads
the file again with Python's ``csv`` / ``json`` modules to find them:

- :func:`record_at`: the line of data row ``r`` and its cells as written;
- :func:`locate`: for an exception of pyarrow's parser, the first cell, record or byte
  it could not read (a field-count mismatch, a value of the wrong type, an integer
  beyond 64 bits, a JSON key given twice, bytes that are not UTF-8), as a
  :class:`TraceError` naming the line, row and field;
- :func:`first_invalid_utf8`: the byte offset and line of the first non-UTF-8 byte.

Each costs one pass over the file up to the place found, and runs at most once per
failed read.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

from traces.errors import TraceError
from traces.formats import Header, KeyTwice, unique_pairs

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*")
ROW_RE = re.compile(r"Row #(\d+)", re.IGNORECASE)
_BLOCK = 1 << 20
T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """One data row of a text file: its first line and its cells, by column name, as
    written (CSV: the cell's text, trimmed; JSONL: the value's JSON text; None for a
    JSON null)."""

    line: int
    cells: dict[str, str | None]


def _csv_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of every non-blank record after the header."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        before = reader.line_num
        for fields in reader:
            if fields:  # a blank line: pyarrow skips it too
                yield before + 1, fields
            before = reader.line_num


def _jsonl_records(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as fh:
        for line, raw in enumerate(fh, start=1):
            if raw.strip():
                yield line, raw


def _json_object(raw: bytes) -> dict[str, object]:
    """Parse one JSONL record; numbers keep their text (``_Number``); a key given twice
    raises :class:`traces.formats.KeyTwice`."""
    return json.loads(
        raw,
        object_pairs_hook=unique_pairs,
        parse_int=_Number,
        parse_float=_Number,
        parse_constant=_Number,
    )


class _Number(str):
    """A JSON number's literal text."""


def json_text(value: object) -> str | None:
    """A value parsed by :func:`_json_object` as JSON text again (numbers as written)."""
    if value is None:
        return None
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(json_text(v) or "null" for v in value) + "]"
    if isinstance(value, dict):
        inner = (f"{json.dumps(k)}: {json_text(v) or 'null'}" for k, v in value.items())
        return "{" + ", ".join(inner) + "}"
    return repr(value)


def record_at(path: Path, container: str, row: int) -> Record | None:
    """Data row ``row`` (0-based, blank lines skipped) of a CSV or JSONL file; None if
    the file has fewer rows or cannot be read."""
    try:
        if container == "csv":
            header = header_names(path)
            for k, (line, fields) in enumerate(_csv_records(path)):
                if k == row:
                    return Record(
                        line, {n: f.strip() for n, f in zip(header, fields, strict=False)}
                    )
        elif container == "jsonl":
            for k, (line, raw) in enumerate(_jsonl_records(path)):
                if k == row:
                    return Record(line, _json_cells(raw))
    except (OSError, csv.Error):
        return None
    return None


def _json_cells(raw: bytes) -> dict[str, str | None]:
    try:
        obj = _json_object(raw)
    except ValueError:
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: json_text(v) for k, v in obj.items()}


def header_names(path: Path) -> list[str]:
    """A CSV file's column names, trimmed (as :func:`traces.formats.read_header` gives them)."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
        first = next(csv.reader(fh), [])
    return [c.strip().strip('"').strip() for c in first]


def first_invalid_utf8(path: Path) -> tuple[int, int, int] | None:
    """(byte offset, line, byte) of the first byte that is not UTF-8 text; None if all is."""
    offset, line, carry = 0, 1, b""
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(_BLOCK)
            data = carry + chunk
            if not data:
                return None
            try:
                data.decode("utf-8")
                good, carry = len(data), b""
            except UnicodeDecodeError as exc:
                if chunk and exc.end == len(data) and "end of data" in exc.reason:
                    good, carry = exc.start, data[exc.start :]  # a character split by the block
                else:
                    at = exc.start
                    return offset + at, line + data.count(b"\n", 0, at), data[at]
            line += data.count(b"\n", 0, good)
            offset += good
            if not chunk:
                return None


def utf8_error(path: Path) -> TraceError | None:
    """The TraceError for the first non-UTF-8 byte of ``path``, if there is one."""
    try:
        found = first_invalid_utf8(path)
    except OSError:
        return None
    if found is None:
        return None
    offset, line, byte = found
    return TraceError(
        path,
        f"not UTF-8 text (byte 0x{byte:02x} at byte offset {offset})",
        line=line,
        expected="UTF-8 text",
    )


# -- pyarrow's parser failed: find the first thing it could not read ---------------------

_Bad = tuple[int, str, str | None, str]  # row, field, value as written, expected


def locate(
    path: Path, header: Header, types: dict[str, pa.DataType], exc: BaseException, rows_before: int
) -> TraceError:
    """The :class:`TraceError` for an exception of pyarrow's CSV/JSON parser: the first
    record, cell or byte it could not read, with its line; pyarrow's own message (with
    the line where it names one) only if none is found."""
    if header.container == "csv" and "CSV parse error" in str(exc):
        ragged = _guard(lambda: _locate_csv_structure(path))
        if ragged is not None:
            return ragged
    found = _guard(
        lambda: (
            _locate_csv(path, header, types)
            if header.container == "csv"
            else _locate_jsonl(path, types)
        )
    )
    if isinstance(found, TraceError):
        return found
    if found is not None:
        row, name, value, expected = found
        rec = _guard(lambda: record_at(path, header.container, row))
        line = rec.line if rec is not None else row + (2 if header.container == "csv" else 1)
        return TraceError(
            path,
            "cannot parse value",
            row=row,
            line=line,
            field=name,
            expected=expected,
            written=value,
        )
    bad_bytes = utf8_error(path)
    if bad_bytes is not None:
        return bad_bytes
    message = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    m = ROW_RE.search(str(exc))
    at: int | None = int(m.group(1)) if m else None
    if at is None and rows_before and header.container == "csv":
        at = rows_before + 2
    return TraceError(path, f"cannot parse file as {header.container.upper()} ({message})", line=at)


def _guard(find: Callable[[], T]) -> T | None:
    """Run a locator; a locator that itself fails (unreadable bytes) finds nothing."""
    try:
        return find()
    except (pa.ArrowException, ValueError, UnicodeError, OSError, OverflowError, csv.Error):
        return None


def _locate_csv_structure(path: Path) -> TraceError | None:
    """The first data row whose field count differs from the header's (Python's csv
    module, so the line is exact even with quoted newlines); None if every row fits."""
    columns = header_names(path)
    for row, (line, record) in enumerate(_csv_records(path)):
        if len(record) == len(columns):
            continue
        short = len(record) < len(columns)
        return TraceError(
            path,
            f"row has {len(record)} field{'' if len(record) == 1 else 's'} "
            f"under a {len(columns)}-column header",
            row=row,
            line=line,
            field=columns[len(record)] if short else "<record>",
            expected=f"{len(columns)} comma-separated fields, one per header column",
            got=",".join(record)[:120],
        )
    return None


def expected_text(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "a timestamp like 2023-11-16 18:15:46.6805900"
    if pa.types.is_integer(t):
        return f"an integer in [{INT64_MIN}, {INT64_MAX}]"
    if pa.types.is_list(t):
        return "a list of integers"
    return "a number"


def int64_text_ok(text: object) -> bool:
    """``text`` is an integer, written in decimal, that fits in 64 bits."""
    if not isinstance(text, str) or not INT_RE.fullmatch(text):
        return False
    return INT64_MIN <= int(text) <= INT64_MAX


def _locate_csv(path: Path, header: Header, types: dict[str, pa.DataType]) -> _Bad | None:
    raw = header.raw_names()
    as_text = {raw[name]: pa.string() for name in types}
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
            text = pd.Series(batch.column(raw[name]).to_pylist(), dtype=object)
            blank = (text.isna() | (text.astype(str).str.strip() == "")).to_numpy()
            if pa.types.is_timestamp(t):
                bad = pd.to_datetime(text, errors="coerce", format="ISO8601").isna().to_numpy()
            elif pa.types.is_integer(t):
                bad = ~np.array([int64_text_ok(v) for v in text], dtype=bool)
            else:
                bad = pd.to_numeric(text, errors="coerce").isna().to_numpy()
            bad = bad & ~blank
            if bad.any():
                i = int(np.argmax(bad))
                if best is None or rows + i < best[0]:
                    best = (rows + i, name, str(text.iloc[i]).strip(), expected_text(t))
        if best is not None:
            return best
        rows += batch.num_rows
    return None


def _locate_jsonl(path: Path, types: dict[str, pa.DataType]) -> _Bad | TraceError | None:
    for row, (line, raw) in enumerate(_jsonl_records(path)):
        try:
            obj = _json_object(raw)
        except KeyTwice as exc:
            return TraceError(
                path,
                "key given twice in one object",
                row=row,
                line=line,
                field=exc.key,
                expected="each key once per JSON object",
            )
        except (json.JSONDecodeError, UnicodeDecodeError):
            return TraceError(
                path,
                "not a JSON object",
                row=row,
                line=line,
                field="<record>",
                expected="one JSON object per line",
                written=raw[:200].decode("utf-8", "replace").strip(),
            )
        if not isinstance(obj, dict):
            return TraceError(
                path,
                "not a JSON object",
                row=row,
                line=line,
                field="<record>",
                expected="one JSON object per line",
                written=json_text(obj),
            )
        for name, t in types.items():
            if not _json_ok(obj.get(name), t):
                return (row, name, json_text(obj.get(name)), expected_text(t))
    return None


def _json_int(value: object) -> bool:
    if not isinstance(value, _Number):
        return False
    return int64_text_ok(str(value))


def _json_ok(value: object, t: pa.DataType) -> bool:
    if value is None:
        return True  # missing values are reported by validation, with the row
    if pa.types.is_list(t):
        return isinstance(value, list) and all(_json_int(v) for v in value)
    if pa.types.is_integer(t):
        return _json_int(value)
    if pa.types.is_floating(t):
        return isinstance(value, _Number)
    return True
