"""A text trace read again record by record, for the slow path of a broken file
(:mod:`traces.locate`) and for naming a bad value's line and text as written
(:mod:`traces.validate`):

- :func:`record_at`: the line of data row ``r`` and its cells as written;
- :func:`header_names`: a CSV file's column names;
- :func:`first_invalid_utf8` / :func:`utf8_error`: the first byte that is not UTF-8;
- integer text checks (:func:`int64_text_ok`, :func:`int64_problem`,
  :func:`overflow_problem`) and :func:`expected_text`, what a column's type expects.

Each streams the file once, up to the place found, in bounded memory (one CSV field or
JSON line is held whole, up to :data:`FIELD_LIMIT` characters).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, TypeVar

import pyarrow as pa
import pyarrow.csv as pcsv

from traces.errors import TraceError
from traces.formats import BOM, unique_pairs

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*")
DECIMAL_RE = re.compile(r"\s*[+-]?([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?\s*")
ROW_RE = re.compile(r"Row #(\d+)", re.IGNORECASE)
BREAK_RE = re.compile(r"\r\n|\r|\n")
INT64_DIGITS: Final = 19
FIELD_LIMIT: Final = 64 << 20  # characters of one CSV field / bytes of one JSON line held
BATCH_ROWS: Final = 1 << 15
CSV_NULLS: Final = pa.array(pcsv.ConvertOptions().null_values, pa.string())
BOM_TEXT: Final = "\ufeff"
_BLOCK = 1 << 20
T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """One data row of a text file: its first line and its cells, by column name, as
    written (CSV: the cell's text, trimmed; JSONL: the value's JSON text; None for a
    JSON null)."""

    line: int
    cells: dict[str, str | None]


@contextmanager
def _long_fields() -> Iterator[None]:
    """Let Python's csv module hold fields up to :data:`FIELD_LIMIT` characters (its
    default, 128 Ki, is shorter than a long prefix-hash list)."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, FIELD_LIMIT))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _csv_text(path: Path) -> IO[str]:
    return path.open(encoding="utf-8-sig", errors="replace", newline="")


def _csv_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of every non-blank record after the header (the first
    non-blank record)."""
    with _long_fields(), _csv_text(path) as fh:
        reader = csv.reader(fh)
        before, header = 0, False
        for fields in reader:
            if fields:  # a blank line: pyarrow skips it too
                if header:
                    yield before + 1, fields
                header = True
            before = reader.line_num


def _jsonl_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line, bytes) of every non-blank line; the file's leading byte-order mark is
    dropped, and a line longer than :data:`FIELD_LIMIT` bytes is cut there."""
    with path.open("rb") as fh:
        line = 0
        while raw := fh.readline(FIELD_LIMIT):
            line += 1
            if line == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if len(raw) == FIELD_LIMIT and not raw.endswith(b"\n"):
                while (rest := fh.readline(FIELD_LIMIT)) and not rest.endswith(b"\n"):
                    pass
            if raw.strip():
                yield line, raw


def _json_object(raw: bytes) -> object:
    """Parse one JSONL record (UTF-8); numbers keep their text (``_Number``); a key
    given twice raises :class:`traces.formats.KeyTwice`."""
    return json.loads(
        raw.decode("utf-8"),
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
    except (ValueError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: json_text(v) for k, v in obj.items()}


def _names(fields: list[str]) -> list[str]:
    return [c.strip().strip('"').strip() for c in fields]


def header_names(path: Path) -> list[str]:
    """A CSV file's column names, trimmed (as :func:`traces.formats.read_header` gives them)."""
    with _long_fields(), _csv_text(path) as fh:
        first = next((r for r in csv.reader(fh) if r), [])
    return _names(first)


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


# -- numbers as written ------------------------------------------------------------------


def _significant(digits: str) -> int:
    return len(digits.lstrip("0"))


def int64_text_ok(text: object) -> bool:
    """``text`` is an integer, written in decimal, that fits in 64 bits."""
    if not isinstance(text, str) or not INT_RE.fullmatch(text):
        return False
    if _significant(text.strip().lstrip("+-")) > INT64_DIGITS:
        return False  # decided without int(): Python refuses to convert 4,300+ digits
    return INT64_MIN <= int(text) <= INT64_MAX


def int64_problem(text: str) -> str:
    """Why ``text``, refused by :func:`int64_text_ok`, is not a 64-bit integer."""
    if INT_RE.fullmatch(text):
        digits = _significant(text.strip().lstrip("+-"))
        if digits > INT64_DIGITS:
            return f"too many digits ({digits:,})"
        if not INT64_MIN <= int(text) <= INT64_MAX:
            return "integer beyond 64 bits"
    return "cannot parse value"


def overflow_problem(text: str | None) -> str | None:
    """Why a number written as ``text`` was read as infinite: too many digits, or an
    exponent beyond a double's; None if ``text`` is no decimal number (``inf``)."""
    m = DECIMAL_RE.fullmatch(text or "")
    if m is None or not (m.group(1) or m.group(2)):
        return None
    if m.group(3) is None:
        return f"too many digits ({_significant(m.group(1)):,})"
    return "number beyond the range of a double (about 1.8e308)"


def bom_error(path: Path, row: int | None, line: int, name: str, text: str) -> TraceError:
    return TraceError(
        path,
        "byte-order mark (U+FEFF) inside the file (files joined together?)",
        row=row,
        line=line,
        field=name,
        expected="a byte-order mark only at the very start of the file",
        got=text,
    )


def expected_text(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "a timestamp like 2023-11-16 18:15:46.6805900"
    if pa.types.is_integer(t):
        return f"an integer in [{INT64_MIN}, {INT64_MAX}]"
    if pa.types.is_list(t):
        return "a list of integers"
    return "a number"
