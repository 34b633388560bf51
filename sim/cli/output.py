"""Tables on stdout in four formats, and a ``--format/-f`` option for the commands that
print them. Imports only the standard library, typer and rich: commands print tables
without paying for pandas or numpy.

API (stable; other command modules build on it):

* ``FORMATS = ("table", "csv", "json", "markdown")`` and ``Format``, their ``Literal``.
* ``FormatOption`` -- the ``--format/-f`` option (default ``table``), for a command's
  signature: ``fmt: FormatOption = "table"``. ``format_option(*names)`` makes the same
  option under other names (``trace describe``, whose ``-f`` names the input format).
* ``Cell(value, text)`` -- a cell shown as ``text`` in ``table``/``markdown`` and written
  as ``value`` in ``csv``/``json`` (a cost: ``Cell(1234.5, "$1,234.50")``). A plain
  object is its own value; its text is ``str()`` of it, except ``None`` and NaN
  (``—``), ints (``1,234``) and floats (``1,234.57``: six significant digits).
* ``print_table(title, columns, rows, fmt="table", *, width=None, keys=1)`` -- one
  table on stdout (the ``table`` format's layout is ``sim.cli.table_layout``):

  - ``table``: a rich table that fits ``width`` (default: stdout's terminal width, else
    ``$COLUMNS``, else 80). When the columns do not fit side by side they are split into
    several tables of consecutive columns, each repeating the first ``keys`` (key)
    columns and titled ``TITLE (columns i-j of n)``; a cell is never cut short with "…"
    (headers and prose wrap at spaces, and an identifier after an underscore --
    ``fragmentation_driven_`` / ``allocation_failure`` -- so that a row's cells stay in
    one table where they can; numbers never wrap; only a single value wider than the
    whole line folds onto a next line).
  - ``csv``: a header row and one row per row (``None``/NaN empty; texts without the
    indentation a table shows); no title.
  - ``json``: a list of objects keyed by column name (``None``/NaN ``null``); no title.
  - ``markdown``: the title as a ``### TITLE`` line, then a pipe table and a blank line
    (so what follows is not read as a row of it); a cell's indentation is kept as
    ``&nbsp;`` (Markdown drops leading spaces in a cell).
* ``print_tables(tables, fmt)`` -- several ``TableData`` as one document: ``table`` and
  ``markdown`` print them one after the other (a blank line between); ``json`` prints one object
  ``{title: [rows...]}``; ``csv`` prints each table as a ``# TITLE`` line, its rows,
  and a blank line between tables.
* ``terminal_width()`` -- the width ``print_table`` fits to by default.
* ``echo_prose(text, *, err=False, indent="  ", fmt="table")`` -- prose (a note, a
  verdict, an alert's line) on stdout or stderr, each line of ``text`` wrapped at
  spaces to ``terminal_width()`` with its continuation lines indented by ``indent``;
  a word or a number is never broken, and a line's own leading indentation is kept.
  In ``markdown`` each line is a list item (``- ``), unwrapped; in ``csv``/``json``
  (whose stdout is data) stdout prose is not printed.
* ``clock_text(seconds)`` -- a time since the start of a run as ``2d 03:14:05``
  (``0d 00:00:07.5`` with a fraction of a second).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, NamedTuple

import typer
from typer.models import OptionInfo

from sim.cli.table_layout import print_fitted

Format = Literal["table", "csv", "json", "markdown"]
FORMATS: tuple[str, ...] = ("table", "csv", "json", "markdown")
FORMAT_HELP = "Output format: table (fits the terminal), csv, json or markdown."

DEFAULT_WIDTH = 80
"""Width of the tables when stdout is not a terminal and ``$COLUMNS`` is unset."""

PLACEHOLDER = "—"


def format_option(*names: str, help: str = FORMAT_HELP) -> OptionInfo:
    """A ``typer.Option`` choosing one of :data:`FORMATS` (case-insensitive), under
    ``names`` (default ``--format``, ``-f``); annotate it as ``Format``."""
    return typer.Option(*(names or ("--format", "-f")), help=help, case_sensitive=False)


FormatOption = Annotated[Format, format_option()]
"""``fmt: FormatOption = "table"`` in a command's signature."""


class Cell(NamedTuple):
    """A value with the text the ``table`` and ``markdown`` formats show for it."""

    value: object
    text: str


@dataclass(frozen=True)
class TableData:
    """One table for :func:`print_tables`."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[object]]


def terminal_width() -> int:
    """stdout's terminal width; else ``$COLUMNS``; else :data:`DEFAULT_WIDTH`."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def wrap_prose(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text``'s lines wrapped at spaces to ``width`` (never inside a word or a
    number), each continuation indented by ``indent`` past the line's own indentation."""
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))]
        wrapped = textwrap.wrap(
            line,
            max(width, 10),
            subsequent_indent=lead + indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += wrapped or [""]
    return lines


def echo_prose(text: str, *, err: bool = False, indent: str = "  ", fmt: str = "table") -> None:
    """Print prose wrapped to the terminal (see the module docstring)."""
    if fmt == "markdown":
        lines = [f"- {line.strip()}" if line.strip() else "" for line in text.splitlines()]
    elif fmt in ("csv", "json") and not err:
        return
    else:
        lines = wrap_prose(text, terminal_width(), indent)
    typer.echo("\n".join(lines), err=err)


def clock_text(seconds: float) -> str:
    """Seconds since a run's start as days and a clock: ``2d 03:14:05``; a fraction of
    a second is kept to the millisecond (``0d 00:00:07.5``); negative times get a
    ``-``; NaN is a dash."""
    if not math.isfinite(seconds):
        return PLACEHOLDER
    sign = "-" if seconds < 0 else ""
    ms = round(abs(seconds) * 1000)
    whole, frac = divmod(ms, 1000)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{days}d {hours:02d}:{minutes:02d}:{secs:02d}"
    return text + (f".{frac:03d}".rstrip("0") if frac else "")


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    fmt: str = "table",
    *,
    width: int | None = None,
    keys: int = 1,
) -> None:
    """Print one table on stdout in ``fmt`` (see the module docstring)."""
    _check(columns, rows, fmt)
    if fmt == "table":
        texts = [[cell_text(c) for c in row] for row in rows]
        right = [_numeric([r[i] for r in texts]) for i in range(len(columns))]
        print_fitted(title, columns, texts, right, width or terminal_width(), keys)
    elif fmt == "csv":
        sys.stdout.write(_csv(columns, rows))
    elif fmt == "json":
        sys.stdout.write(json.dumps(_records(columns, rows), indent=2) + "\n")
    else:
        sys.stdout.write(_markdown(title, columns, rows))
    sys.stdout.flush()


def print_tables(tables: Sequence[TableData], fmt: str = "table") -> None:
    """Print several tables as one document in ``fmt`` (see the module docstring)."""
    if fmt == "json":
        for t in tables:
            _check(t.columns, t.rows, fmt)
        doc = {t.title: _records(t.columns, t.rows) for t in tables}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif fmt == "csv":
        for i, t in enumerate(tables):
            _check(t.columns, t.rows, fmt)
            sys.stdout.write(("\n" if i else "") + f"# {t.title}\n" + _csv(t.columns, t.rows))
    else:
        for t in tables:
            print_table(t.title, t.columns, t.rows, fmt)
    sys.stdout.flush()


def _check(columns: Sequence[str], rows: Sequence[Sequence[object]], fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"a row of {len(row)} cells for {len(columns)} columns")


# --- cell values and texts ---------------------------------------------------------


def cell_text(cell: object) -> str:
    """The text a cell shows in the ``table`` and ``markdown`` formats."""
    if isinstance(cell, Cell):
        return cell.text
    value = _plain(cell)
    if value is None:
        return PLACEHOLDER
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e15 else f"{value:.6g}"
    return str(value)


def number_cell(value: float | None, spec: str) -> Cell:
    """A number shown with ``spec``; ``None``, NaN and infinities (a statistic with
    nothing to count) as :data:`PLACEHOLDER` in ``table``/``markdown``, empty in ``csv``
    and ``null`` in ``json``."""
    plain = _plain(value)
    return Cell(value, PLACEHOLDER if plain is None else format(plain, spec))


def cell_value(cell: object) -> object:
    """The value a cell writes in ``csv`` and ``json``: a JSON scalar (NaN is None)."""
    value = _plain(cell.value if isinstance(cell, Cell) else cell)
    if isinstance(value, str):
        return value.strip()  # no indentation the table shows
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value).strip()


def _plain(value: object) -> object:
    """A numpy scalar as its Python value; NaN and infinities as None."""
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[dict[str, object]]:
    return [{c: cell_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]


def _csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow(["" if v is None else v for v in (cell_value(c) for c in row)])
    return buf.getvalue()


def _markdown(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def esc(text: str) -> str:
        indent = len(text) - len(text.lstrip(" "))
        text = "&nbsp;" * indent + text[indent:]
        return text.replace("|", "\\|").replace("\n", "<br>")

    texts = [[cell_text(c) for c in row] for row in rows]
    right = [_numeric([r[i] for r in texts]) for i in range(len(columns))]
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(esc(c) for c in columns) + " |")
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines += ["| " + " | ".join(esc(t) for t in row) + " |" for row in texts]
    return "\n".join(lines) + "\n\n"


_NUMERIC = re.compile(r"[-+−$]?\.?\d")


def _numeric(texts: Sequence[str]) -> bool:
    """Right-align a column whose every shown value starts like a number."""
    shown = [t for t in texts if t.strip() not in ("", PLACEHOLDER, "-")]
    return bool(shown) and all(_NUMERIC.match(t.strip()) for t in shown)
