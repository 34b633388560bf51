"""The slow path of a broken text file: where it breaks, and what the file says there.

The fast path (:mod:`traces.readers`, :mod:`traces.validate`) parses with pyarrow and
checks whole columns at once; it knows the data row of a bad value but neither its exact
line (blank lines and quoted newlines shift lines) nor its text as written (a count is
read as float64, so ``-3`` became ``-3.0``). Once a check has failed, this module reads
the file again with Python's ``csv`` / ``json`` modules to find them:

- :func:`record_at`: the line of data row ``r`` and its cells as written;
- :func:`locate`: for an exception of pyarrow's parser, the first record, cell or byte
  it could not read, as a :class:`TraceError` naming the line, row and field: a
  field-count mismatch; a quote left open (named by the line where it opens, also when
  it runs to the end of the file) and a quoted value that spans lines where a number
  is due; a value pyarrow cannot convert (judged as pyarrow does: its null markers,
  spaces and tabs trimmed, its own casts); an integer beyond 64 bits or with too many
  digits; a JSON number beyond a double, a JSON key given twice; a byte-order mark
  anywhere but the start of the file; bytes that are not UTF-8;
- :func:`first_invalid_utf8`: the byte offset and line of the first non-UTF-8 byte.

Each streams the file once, up to the place found, in bounded memory (CSV cells are
checked :data:`BATCH_ROWS` records at a time; one CSV field or JSON line is held whole,
up to :data:`FIELD_LIMIT` characters); :func:`locate` runs at most once per failed read.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from traces.errors import TraceError, reader_says
from traces.formats import BOM, Header, KeyTwice, unique_pairs

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


def expected_text(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "a timestamp like 2023-11-16 18:15:46.6805900"
    if pa.types.is_integer(t):
        return f"an integer in [{INT64_MIN}, {INT64_MAX}]"
    if pa.types.is_list(t):
        return "a list of integers"
    return "a number"


# -- pyarrow's parser failed: find the first thing it could not read ---------------------


def locate(
    path: Path, header: Header, types: dict[str, pa.DataType], exc: BaseException, rows_before: int
) -> TraceError:
    """The :class:`TraceError` for an exception of pyarrow's CSV/JSON parser: the first
    record, cell or byte it could not read, with its line. If none is found (the two
    parsers disagree), pyarrow's reason, bounded, at the first line of the rows it could
    not read."""
    found = _guard(
        lambda: (
            _locate_csv(path, types) if header.container == "csv" else _locate_jsonl(path, types)
        )
    )
    if found is not None:
        return found
    bad_bytes = utf8_error(path)
    if bad_bytes is not None:
        return bad_bytes
    m = ROW_RE.search(str(exc))
    line: int | None = int(m.group(1)) if m else None
    if line is None:
        rec = _guard(lambda: record_at(path, header.container, rows_before))
        line = rec.line if rec is not None else None
    kind = header.container.upper()
    return TraceError(
        path,
        f"cannot read the {kind} records from this line on ({reader_says(exc)})",
        row=rows_before if line is not None and m is None else None,
        line=line,
        expected=f"well-formed {kind}",
    )


def _guard(find: Callable[[], T]) -> T | None:
    """Run a locator; a locator that itself fails (unreadable bytes) finds nothing."""
    try:
        return find()
    except (
        pa.ArrowException,
        ValueError,
        UnicodeError,
        OSError,
        OverflowError,
        RecursionError,
        csv.Error,
    ):
        return None


def _converts(text: pa.Array, t: pa.DataType) -> bool:
    try:
        pc.cast(text, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def first_unconvertible(cells: list[str], t: pa.DataType) -> int | None:
    """Index of the first CSV cell pyarrow's reader cannot convert to ``t`` (as it does:
    its null markers are nulls, spaces and tabs around a value are trimmed), or None.
    One cast per batch; a failing batch is bisected (log2 of its length more casts)."""
    arr = pa.array(cells, pa.string())
    text = pc.if_else(pc.is_in(arr, value_set=CSV_NULLS), "0", pc.utf8_trim(arr, " \t"))
    if _converts(text, t):
        return None
    lo, hi = 0, len(text)  # text[:lo] converts; text[lo:hi] holds a cell that does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _converts(text.slice(lo, mid - lo), t):
            lo = mid
        else:
            hi = mid
    return lo


def _converted(t: pa.DataType) -> bool:
    """pyarrow converts a CSV cell to ``t`` (text columns are read as they are)."""
    return not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_list(t))


def _lines(path: Path, start: int, end: int) -> str:
    """Lines ``start`` to ``end`` of a CSV file, as its text (a second pass up to them,
    taken only to word an error)."""
    out: list[str] = []
    with _csv_text(path) as fh:
        for n, line in enumerate(fh, start=1):
            if n >= start:
                out.append(line)
            if n >= end:
                break
    return "".join(out)


def _break_at(fields: list[str]) -> int | None:
    """The first field holding a line break (a quoted value that spans lines)."""
    return next((k for k, f in enumerate(fields) if "\n" in f or "\r" in f), None)


@dataclass
class _CsvScan:
    """One pass over a CSV file: its columns, the converted ones, and the records
    (row, first line, fields) whose cells are not yet checked."""

    path: Path
    types: dict[str, pa.DataType]
    columns: list[str]
    checks: tuple[tuple[int, str, pa.DataType], ...] = ()

    def __post_init__(self) -> None:
        self.checks = tuple(
            (i, name, self.types[name])
            for i, name in enumerate(self.columns)
            if name in self.types and _converted(self.types[name])
        )

    def check(self, pending: list[tuple[int, int, list[str]]]) -> TraceError | None:
        """The first cell of ``pending`` pyarrow cannot convert (lowest row, then
        column); empties ``pending``."""
        if not pending or not self.checks:
            pending.clear()
            return None
        best: tuple[int, int] | None = None  # (index in pending, index in checks)
        for j, (i, _, t) in enumerate(self.checks):
            k = first_unconvertible([fields[i] for _, _, fields in pending], t)
            if k is not None and (best is None or k < best[0]):
                best = (k, j)
        found = None
        if best is not None:
            row, line, fields = pending[best[0]]
            i, name, t = self.checks[best[1]]
            found = self.cell_error(row, line, name, t, fields[i])
        pending.clear()
        return found

    def cell_error(self, row: int, line: int, name: str, t: pa.DataType, text: str) -> TraceError:
        if "\ufffd" in text:  # a byte that is not UTF-8, replaced on reading
            bad = utf8_error(self.path)
            if bad is not None:
                return bad
        if BOM_TEXT in text:
            return _bom_error(self.path, row, line, name, text)
        return TraceError(
            self.path,
            int64_problem(text) if pa.types.is_integer(t) else "cannot parse value",
            row=row,
            line=line,
            field=name,
            expected=expected_text(t),
            written=text.strip(),
        )

    def record_error(
        self, row: int, start: int, end: int, fields: list[str], rest: Iterator[str]
    ) -> TraceError | None:
        """A record over several lines where a number is due or that leaves the wrong
        number of fields (a quote opened and not closed where it should be), or a
        one-line record with the wrong number of fields; None for a record that fits.
        ``rest``: the file after the record (nothing left: a quote left open may have
        run to its end)."""
        columns = self.columns
        broken = [k for k, f in enumerate(fields) if "\n" in f or "\r" in f]
        numbers = [
            k
            for k in broken
            if k < len(columns) and _converted(self.types.get(columns[k], pa.string()))
        ]
        if numbers or (broken and len(fields) != len(columns)):
            k = (numbers or broken)[0]
            t = self.types[columns[k]] if numbers else None
            at_end = next(rest, None) is None  # an error follows: the line taken is moot
            return self.quote_error(row, start, end, fields, k, at_end, t)
        if len(fields) == len(columns):
            return None
        short = len(fields) < len(columns)
        return TraceError(
            self.path,
            f"row has {len(fields)} field{'' if len(fields) == 1 else 's'} "
            f"under a {len(columns)}-column header",
            row=row,
            line=start,
            field=columns[len(fields)] if short else "<record>",
            expected=f"{len(columns)} comma-separated fields, one per header column",
            got=",".join(fields)[:120],
        )

    def quote_error(
        self,
        row: int,
        start: int,
        end: int,
        fields: list[str],
        k: int,
        at_end: bool,
        number: pa.DataType | None,
    ) -> TraceError:
        """Field ``k`` of the record on lines ``start``-``end`` holds a line break: named
        at the line where its quote opens; a quote still open at the end of the file
        (an odd number of quote characters in the record) is said to be."""
        opened = start + sum(len(BREAK_RE.findall(f)) for f in fields[:k])
        name = self.columns[k] if k < len(self.columns) else "<record>"
        if at_end and _lines(self.path, start, end).count('"') % 2 == 1:
            return TraceError(
                self.path,
                f"quote not closed: the value quoted on this line runs to the end of the "
                f"file (line {end})",
                row=row,
                line=opened,
                field=name,
                expected='a closing quote (") on the same line',
            )
        closes = opened + len(BREAK_RE.findall(fields[k]))
        return TraceError(
            self.path,
            f"a quoted value runs over lines {opened}-{closes}",
            row=row,
            line=opened,
            field=name,
            expected=(
                expected_text(number)
                if number is not None
                else f"{len(self.columns)} comma-separated fields on one line"
            ),
            got=fields[k],
        )

    def too_long(self, row: int, start: int, at: int) -> TraceError:
        """Python's csv module stopped at line ``at`` in a field of the record that
        starts on line ``start``: longer than :data:`FIELD_LIMIT`, a quote not closed."""
        try:
            cells = next(csv.reader([_lines(self.path, start, start).rstrip("\r\n")]), [])
        except csv.Error:
            cells = []
        k = max(len(cells) - 1, 0)
        return TraceError(
            self.path,
            f"quote not closed: the value quoted on this line runs on past "
            f"{FIELD_LIMIT >> 20} MiB (to line {at} at least)",
            row=row,
            line=start,
            field=self.columns[k] if k < len(self.columns) else "<record>",
            expected='a closing quote (") on the same line',
        )


def _bom_error(path: Path, row: int | None, line: int, name: str, text: str) -> TraceError:
    return TraceError(
        path,
        "byte-order mark (U+FEFF) inside the file (files joined together?)",
        row=row,
        line=line,
        field=name,
        expected="a byte-order mark only at the very start of the file",
        got=text,
    )


def _locate_csv(path: Path, types: dict[str, pa.DataType]) -> TraceError | None:
    """One streamed pass with Python's csv module (so lines are exact with quoted
    newlines): the first record with the wrong field count or a quote left open, or the
    first cell pyarrow cannot convert, whichever comes first in the file."""
    with _long_fields(), _csv_text(path) as fh:
        reader = csv.reader(fh)
        scan: _CsvScan | None = None
        pending: list[tuple[int, int, list[str]]] = []
        row = before = 0
        spans: tuple[int, int, int, list[str]] | None = None  # the last record, if over lines
        try:
            for fields in reader:
                start, before = before + 1, reader.line_num
                if not fields:
                    continue
                if scan is None:
                    scan = _CsvScan(path, types, _names(fields))
                    width = len(scan.columns)
                    continue
                spans = None
                if before != start or len(fields) != width:
                    found = scan.check(pending) or scan.record_error(row, start, before, fields, fh)
                    if found is not None:
                        return found
                    spans = (row, start, before, fields)
                pending.append((row, start, fields))
                row += 1
                if len(pending) >= BATCH_ROWS:
                    found = scan.check(pending)
                    if found is not None:
                        return found
        except csv.Error as exc:
            if scan is None:
                return None
            found = scan.check(pending)
            if found is not None:
                return found
            if "field larger than field limit" in str(exc):
                return scan.too_long(row, before + 1, reader.line_num)
            return TraceError(
                path,
                "cannot read this record as CSV",
                row=row,
                line=before + 1,
                expected="comma-separated fields",
            )
    if scan is None:
        return None
    found = scan.check(pending)
    if found is None and spans is not None:
        # the file may end inside a quote that Python's csv module closed for it
        row, start, end, fields = spans
        k = _break_at(fields)
        assert k is not None
        at_end = scan.quote_error(row, start, end, fields, k, True, None)
        if at_end.message.startswith("quote not closed"):
            return at_end
    return found


def _locate_jsonl(path: Path, types: dict[str, pa.DataType]) -> TraceError | None:
    for row, (line, raw) in enumerate(_jsonl_records(path)):
        if raw.lstrip(b" \t").startswith(BOM):
            return _bom_error(path, row, line, "<record>", raw[:40].decode("utf-8", "replace"))
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
        except UnicodeDecodeError:
            bad = utf8_error(path)
            if bad is not None:
                return bad
            return _not_json(path, row, line, raw, "not UTF-8 text")
        except json.JSONDecodeError as exc:
            return _not_json(
                path, row, line, raw, f"not valid JSON: {exc.msg} at column {exc.colno}"
            )
        except RecursionError:
            return _not_json(path, row, line, raw, "not valid JSON: nested too deeply")
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
        huge = next(((k, v) for k, v in obj.items() if not _json_doubles_ok(v)), None)
        if huge is not None:  # pyarrow's parser refuses it in any field, read or not
            return TraceError(
                path,
                "number beyond the range of a double (about 1.8e308)",
                row=row,
                line=line,
                field=huge[0],
                expected="a number within a double's range",
                written=json_text(huge[1]),
            )
        for name, t in types.items():
            value = obj.get(name)
            if not _json_ok(value, t):
                text = json_text(value)
                message = "cannot parse value"
                if isinstance(value, _Number) and pa.types.is_integer(t):
                    message = int64_problem(value)
                elif isinstance(value, list) and pa.types.is_list(t):
                    bad = next(v for v in value if not _json_int(v))
                    if isinstance(bad, _Number) and int64_problem(bad) != message:
                        message = f"list element {bad[:20]}: {int64_problem(bad)}"
                return TraceError(
                    path,
                    message,
                    row=row,
                    line=line,
                    field=name,
                    expected=expected_text(t),
                    written=text,
                )
    return None


def _not_json(path: Path, row: int, line: int, raw: bytes, message: str) -> TraceError:
    return TraceError(
        path,
        message,
        row=row,
        line=line,
        field="<record>",
        expected="one JSON object per line",
        written=raw[:200].decode("utf-8", "replace").strip(),
    )


def _json_int(value: object) -> bool:
    if not isinstance(value, _Number):
        return False
    return int64_text_ok(str(value))


def _json_double_ok(text: str) -> bool:
    """pyarrow's JSON parser (RapidJSON) reads ``text`` without "Number too big": a
    positive exponent may exceed 308 only by the fraction digits it reads (at most 17
    significant ones, leading zeros of ``0.000...`` counted). Other numbers too big for
    a double are read as infinite (and refused later, with their row)."""
    m = DECIMAL_RE.fullmatch(text)
    if m is None or m.group(3) is None or m.group(3).startswith("-"):
        return True
    whole, frac = m.group(1), m.group(2) or ""
    exponent = m.group(3).lstrip("+").lstrip("0") or "0"
    if len(exponent) > 6:
        return False
    sig_whole = _significant(whole)
    lead = len(frac) - len(frac.lstrip("0")) if sig_whole == 0 else 0
    read = min(len(frac), lead + max(0, 17 - sig_whole))
    return int(exponent) <= 308 + read


def _json_doubles_ok(value: object) -> bool:
    """Every number in ``value`` (nested) passes :func:`_json_double_ok`."""
    if isinstance(value, _Number):
        return _json_double_ok(value)
    if isinstance(value, list):
        return all(_json_doubles_ok(v) for v in value)
    if isinstance(value, dict):
        return all(_json_doubles_ok(v) for v in value.values())
    return True


def _json_ok(value: object, t: pa.DataType) -> bool:
    if value is None:
        return True  # missing values are reported by validation, with the row
    if pa.types.is_list(t):
        return isinstance(value, list) and all(_json_int(v) for v in value)
    if pa.types.is_integer(t):
        return _json_int(value)
    if pa.types.is_floating(t):
        return isinstance(value, _Number) and _json_double_ok(value)
    return True
