"""The slow path of a broken text file: where it breaks, and what the file says there.

The fast path (:mod:`traces.readers`, :mod:`traces.validate`) parses with pyarrow and
checks whole columns at once; it knows the data row of a bad value but neither its exact
line (blank lines and quoted newlines shift lines) nor its text as written (a count is
read as float64, so ``-3`` became ``-3.0``). Once a check has failed, this module reads
the file again with Python's ``csv`` / ``json`` modules to find them:

- :func:`locate`: for an exception of pyarrow's parser, the first record, cell or byte
  it could not read, as a :class:`TraceError` naming the line, row and field: a
  field-count mismatch; a quote left open (named by the line where it opens, also when
  it runs to the end of the file) and a quoted value that spans lines where a number
  is due; a value pyarrow cannot convert (judged as pyarrow does: its null markers,
  spaces and tabs trimmed, its own casts); an integer beyond 64 bits or with too many
  digits; a JSON number beyond a double, a JSON key given twice; a byte-order mark
  anywhere but the start of the file; bytes that are not UTF-8.

CSV is located here; JSON Lines in :mod:`traces.locate_jsonl`; reading records again
(:func:`~traces.records.record_at`, UTF-8 and integer-text checks) in
:mod:`traces.records`.

Each streams the file once, up to the place found, in bounded memory (CSV cells are
checked :data:`BATCH_ROWS` records at a time; one CSV field or JSON line is held whole,
up to :data:`FIELD_LIMIT` characters); :func:`locate` runs at most once per failed read.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traces.errors import TraceError, reader_says
from traces.formats import Header
from traces.locate_jsonl import locate_jsonl
from traces.records import (
    BATCH_ROWS,
    BOM_TEXT,
    BREAK_RE,
    CSV_NULLS,
    FIELD_LIMIT,
    ROW_RE,
    T,
    _csv_text,
    _long_fields,
    _names,
    bom_error,
    expected_text,
    int64_problem,
    record_at,
    utf8_error,
)

# -- pyarrow's parser failed: find the first thing it could not read ---------------------


def locate(
    path: Path, header: Header, types: dict[str, pa.DataType], exc: BaseException, rows_before: int
) -> TraceError:
    """The :class:`TraceError` for an exception of pyarrow's CSV/JSON parser: the first
    record, cell or byte it could not read, with its line. If none is found (the two
    parsers disagree), pyarrow's reason, bounded, at the first line of the rows it could
    not read."""
    found = _guard(
        lambda: _locate_csv(path, types) if header.container == "csv" else locate_jsonl(path, types)
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
            return bom_error(self.path, row, line, name, text)
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
