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
* ``print_table(title, columns, rows, fmt="table", *, width=None)`` -- one table on
  stdout:

  - ``table``: a rich table that fits ``width`` (default: stdout's terminal width, else
    ``$COLUMNS``, else 80). When the columns do not fit side by side they are split into
    several tables of consecutive columns, each repeating the first (key) column and
    titled ``TITLE (columns i-j of n)``; a cell is never cut short with "…" (prose
    wraps at spaces; only a single value wider than the whole line folds onto a next
    line).
  - ``csv``: a header row and one row per row (``None``/NaN empty); no title.
  - ``json``: a list of objects keyed by column name (``None``/NaN ``null``); no title.
  - ``markdown``: the title as a ``### TITLE`` line, then a pipe table.
* ``print_tables(tables, fmt)`` -- several ``TableData`` as one document: ``table`` and
  ``markdown`` print them one after the other; ``json`` prints one object
  ``{title: [rows...]}``; ``csv`` prints each table as a ``# TITLE`` line, its rows,
  and a blank line between tables.
* ``terminal_width()`` -- the width ``print_table`` fits to by default.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

import typer

Format = Literal["table", "csv", "json", "markdown"]
FORMATS: tuple[str, ...] = ("table", "csv", "json", "markdown")
FORMAT_HELP = "Output format: table (fits the terminal), csv, json or markdown."

DEFAULT_WIDTH = 80
"""Width of the tables when stdout is not a terminal and ``$COLUMNS`` is unset."""

MIN_WRAP_WIDTH = 16
"""Prose columns are never wrapped narrower than this (or their longest word)."""

PLACEHOLDER = "—"


def format_option(*names: str, help: str = FORMAT_HELP) -> Any:
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


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    fmt: str = "table",
    *,
    width: int | None = None,
) -> None:
    """Print one table on stdout in ``fmt`` (see the module docstring)."""
    _check(columns, rows, fmt)
    if fmt == "table":
        _print_rich(title, columns, rows, width or terminal_width())
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
        for i, t in enumerate(tables):
            if i and fmt == "markdown":
                sys.stdout.write("\n")
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


def cell_value(cell: object) -> object:
    """The value a cell writes in ``csv`` and ``json``: a JSON scalar (NaN is None)."""
    value = _plain(cell.value if isinstance(cell, Cell) else cell)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _plain(value: object) -> object:
    """A numpy scalar as its Python value; NaN and infinities as None."""
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[dict[str, Any]]:
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
        return text.replace("|", "\\|").replace("\n", "<br>")

    texts = [[cell_text(c) for c in row] for row in rows]
    right = [_numeric([r[i] for r in texts]) for i in range(len(columns))]
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(esc(c) for c in columns) + " |")
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines += ["| " + " | ".join(esc(t) for t in row) + " |" for row in texts]
    return "\n".join(lines) + "\n"


_NUMERIC = re.compile(r"[-+−$]?\.?\d")


def _numeric(texts: Sequence[str]) -> bool:
    """Right-align a column whose every shown value starts like a number."""
    shown = [t for t in texts if t.strip() not in ("", PLACEHOLDER, "-")]
    return bool(shown) and all(_NUMERIC.match(t.strip()) for t in shown)


# --- the fitted rich table ---------------------------------------------------------


def _natural(texts: Sequence[str]) -> int:
    """The width a column needs to show every text on its own lines unwrapped."""
    return max((len(line) for t in texts for line in t.split("\n")), default=0)


def _narrowest(texts: Sequence[str]) -> int:
    """The width below which a column's prose would fold inside a word."""
    words = max((len(w) for t in texts for w in t.split()), default=0)
    return max(words, min(_natural(texts), MIN_WRAP_WIDTH))


def _table_width(widths: Sequence[int]) -> int:
    """A rich table's width with the default box: a border and a padding of one on each
    side of every column."""
    return sum(widths) + 3 * len(widths) + 1


def column_groups(natural: Sequence[int], narrowest: Sequence[int], width: int) -> list[list[int]]:
    """Column indices per printed table: all at once when they fit side by side (prose
    wrapped down to ``narrowest``); else consecutive groups, each starting with column
    0, filled greedily while their natural widths fit; a column that fits with column 0
    only through wrapping gets a group of its own."""
    n = len(natural)
    if n <= 1 or _table_width(narrowest) <= width:
        return [list(range(n))]
    groups: list[list[int]] = []
    group = [0]
    for i in range(1, n):
        if len(group) > 1 and _table_width([natural[j] for j in [*group, i]]) > width:
            groups.append(group)
            group = [0]
        group.append(i)
    groups.append(group)
    return groups


def _print_rich(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]], width: int
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    texts = [[cell_text(c) for c in row] for row in rows]
    by_column = [[columns[i], *(r[i] for r in texts)] for i in range(len(columns))]
    natural = [_natural(c) for c in by_column]
    narrowest = [_narrowest(c) for c in by_column]
    right = [_numeric(c[1:]) for c in by_column]
    groups = column_groups(natural, narrowest, width)
    tty = sys.stdout.isatty()  # styled; else plain text without trailing blanks
    buf = io.StringIO()
    console = Console(file=sys.stdout if tty else buf, width=width, highlight=False)
    for k, group in enumerate(groups):
        name = title
        if len(groups) > 1:
            span = f"columns {group[1] + 1}-{group[-1] + 1} of {len(columns)}"
            name = f"{title} ({span})" if title else span
        t = Table(title=None if name is None else Text(name), title_justify="left")
        for i in group:
            t.add_column(Text(columns[i]), justify="right" if right[i] else "left", overflow="fold")
        for row in texts:
            t.add_row(*(Text(row[i]) for i in group))
        if k:
            console.print()
        console.print(t, markup=False)
    if not tty:
        sys.stdout.write("".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()))
