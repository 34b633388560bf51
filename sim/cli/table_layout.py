"""The ``table`` format's layout: a rich table fitted to the terminal's width, over cell
texts already made (``sim.cli.output`` makes them and decides which columns are numeric).

When the columns do not fit side by side they are split into several tables of
consecutive columns (:func:`column_groups`), each repeating the key columns; prose and
identifiers wrap at spaces and after underscores (:func:`wrap_cell`), numbers never; a
cell is never cut short with "…". Imports only the standard library and rich.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

MIN_WRAP_WIDTH = 16
"""Prose columns are never wrapped narrower than this (or their longest word)."""


def _natural(texts: Sequence[str]) -> int:
    """The width a column needs to show every text on its own lines unwrapped."""
    return max((len(line) for t in texts for line in t.split("\n")), default=0)


_PIECE = re.compile(r"[^_/#,=]*[_/#,=]+|[^_/#,=]+")
"""An identifier's (or a path's, a link's, a ``--vary`` list's) pieces, each ending after
its underscores, slashes, ``#``, commas or ``=``: where a cell may wrap."""


def _pieces(word: str) -> list[str]:
    return _PIECE.findall(word) or [word]


def _longest_word(texts: Sequence[str], *, identifiers: bool = False) -> int:
    """The longest unbreakable run: a word (or, with ``identifiers``, a piece of one)."""
    words = (w for t in texts for w in t.split())
    if identifiers:
        words = (p for w in words for p in _pieces(w))
    return max((len(w) for w in words), default=0)


def wrap_cell(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` at spaces and after underscores (never inside a
    word's piece; a piece wider than ``width`` keeps its own line), its own line breaks
    kept."""
    out: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split():
            sep = " " if line else ""
            if len(line) + len(sep) + len(word) <= width:
                line += sep + word
                continue
            pieces = _pieces(word)
            if line and len(line) + 1 + len(pieces[0]) <= width:
                line += " "
            elif line:
                out.append(line)
                line = ""
            for piece in pieces:
                if line and not line.endswith(" ") and len(line) + len(piece) > width:
                    out.append(line)
                    line = ""
                line += piece
        out.append(line)
    return "\n".join(out)


def _narrowest(header: str, cells: Sequence[str], numeric: bool) -> int:
    """The width below which a column would fold inside a word: its header may wrap
    at spaces; numbers never wrap; prose wraps at spaces and identifiers after their
    underscores (:func:`wrap_cell`), not narrower than :data:`MIN_WRAP_WIDTH`."""
    if numeric:
        body = _natural(cells)
    else:
        body = max(_longest_word(cells, identifiers=True), min(_natural(cells), MIN_WRAP_WIDTH))
    return max(_longest_word([header]), body)


def _table_width(widths: Sequence[int]) -> int:
    """A rich table's width with the default box: a border and a padding of one on each
    side of every column."""
    return sum(widths) + 3 * len(widths) + 1


def column_groups(
    natural: Sequence[int], narrowest: Sequence[int], width: int, keys: int = 1
) -> list[list[int]]:
    """Column indices per printed table: all at once when they fit side by side
    (headers and prose wrapped down to ``narrowest``); else as few groups of
    consecutive columns as fit at their natural widths, each led by the ``keys`` key
    columns and balanced (the widest group as narrow as it can be). A column that fits
    beside the keys only by wrapping gets a group of its own."""
    n = len(natural)
    keys = max(1, min(keys, n))
    if n <= keys or _table_width(narrowest) <= width:
        return [list(range(n))]
    most = _pack(natural, width, keys)
    for cap in range(_table_width([*natural[:keys], max(natural[keys:])]), width):
        groups = _pack(natural, cap, keys)
        if len(groups) <= len(most):
            return groups
    return most


def fit_widths(natural: Sequence[int], narrowest: Sequence[int], width: int) -> list[int]:
    """Column widths for a table of ``width``: natural ones when they fit; else the
    widest columns that can wrap are narrowed first, one character at a time, never
    below ``narrowest`` (only a table that does not fit even then is wider)."""
    widths = list(natural)
    excess = _table_width(widths) - width
    while excess > 0:
        slack = [(w, i) for i, w in enumerate(widths) if w > narrowest[i]]
        if not slack:
            break
        _, i = max(slack)
        widths[i] -= 1
        excess -= 1
    return widths


def _pack(natural: Sequence[int], width: int, keys: int) -> list[list[int]]:
    """Greedy groups of consecutive columns, each led by the key columns, in ``width``."""
    lead = list(range(keys))
    groups: list[list[int]] = []
    group = list(lead)
    for i in range(keys, len(natural)):
        if len(group) > keys and _table_width([natural[j] for j in [*group, i]]) > width:
            groups.append(group)
            group = list(lead)
        group.append(i)
    groups.append(group)
    return groups


def print_fitted(
    title: str | None,
    columns: Sequence[str],
    texts: Sequence[Sequence[str]],
    right: Sequence[bool],
    width: int,
    keys: int,
) -> None:
    """Print the rows' cell ``texts`` on stdout as rich tables fitted to ``width`` (see
    the module docstring), the columns flagged in ``right`` right-aligned (numbers) and
    the first ``keys`` columns repeated in each table; without a terminal, plain text
    without trailing blanks."""
    cells = [[r[i] for r in texts] for i in range(len(columns))]
    natural = [_natural([h, *c]) for h, c in zip(columns, cells, strict=True)]
    narrowest = [_narrowest(h, c, r) for h, c, r in zip(columns, cells, right, strict=True)]
    groups = column_groups(natural, narrowest, width, keys)
    tty = sys.stdout.isatty()  # styled; else plain text without trailing blanks
    buf = io.StringIO()
    widest = max(
        _table_width(fit_widths([natural[i] for i in g], [narrowest[i] for i in g], width))
        for g in groups
    )
    # A table that cannot fit even at its narrowest is printed wider, never re-wrapped
    # by rich inside the words it was laid out not to break.
    console = Console(file=sys.stdout if tty else buf, width=max(width, widest), highlight=False)
    for k, group in enumerate(groups):
        name = title
        if len(groups) > 1:
            span = f"columns {group[keys] + 1}-{group[-1] + 1} of {len(columns)}"
            name = f"{title} ({span})" if title else span
        t = Table()
        widths = fit_widths([natural[i] for i in group], [narrowest[i] for i in group], width)
        for i, w in zip(group, widths, strict=True):
            justify: Literal["right", "left"] = "right" if right[i] else "left"
            t.add_column(Text(columns[i]), justify=justify, overflow="fold", width=w)
        wrap = [not right[i] and w < natural[i] for i, w in zip(group, widths, strict=True)]
        for row in texts:
            cells_shown = [row[i] for i in group]
            t.add_row(
                *(
                    Text(wrap_cell(c, w) if fold else c)
                    for c, w, fold in zip(cells_shown, widths, wrap, strict=True)
                )
            )
        if k:
            console.print()
        if name:
            console.print(Text(name))
        console.print(t, markup=False)
    if not tty:
        sys.stdout.write("".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()))
