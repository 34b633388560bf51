"""Errors and warnings raised while reading or checking a trace.

Contract: every problem with a user's file surfaces as :class:`TraceError` (a
``ValueError``) naming the file, the row (0-based data row) and/or line (1-based line
in the file, header included), the field, what was expected and what was found. Loaders
never let a parser's own exception (Arrow, JSON, Unicode) escape. The message is one
line, and quotes at most :data:`GOT_LIMIT` characters of the value found: the value as
the file wrote it (``-3``, not ``-3.0``) where the file is text and the cell is known.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Final

GOT_LIMIT: Final = 80


class TraceWarning(UserWarning):
    """Something was repaired, not rejected: unsorted arrivals sorted, failed rows dropped."""


def quote(value: object, limit: int = GOT_LIMIT) -> str:
    """``value`` for a message, by ``repr``: one line, at most ``limit`` characters."""
    return _bounded(repr(value), limit)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control or invisible format character (NUL, ESC, U+200B...)."""
    return any(unicodedata.category(c) in ("Cc", "Cf") for c in text)


def shown(text: str, limit: int = GOT_LIMIT) -> str:
    """Text as the file wrote it, for a message: verbatim when it is plain, else quoted by
    :func:`quote` so that control characters appear escaped (``'5\\x00'``), never raw."""
    if not text:
        return repr("")
    return quote(text, limit) if has_control(text) else _bounded(text, limit)


def reader_says(exc: BaseException, limit: int = 160) -> str:
    """A library's reason for failing, for a message where nothing better is known: its
    first line, bounded, labelled as the reader's (``pyarrow: ...``)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return "pyarrow: " + _bounded(text, limit)


def _bounded(text: str, limit: int = GOT_LIMIT) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str) -> str:
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


class TraceError(ValueError):
    """A trace file (or table) that breaks the canonical contract.

    Attributes are kept separately so callers and tests can check them: ``got`` is the
    value as read (a number, for a number), ``written`` the same value's text as the
    file wrote it (CSV: the cell, trimmed; JSONL: the JSON text), where known; the
    message shows ``written`` verbatim, else ``repr(got)``. ``str()`` joins them into
    one line:
    ``FILE: line L (row R): field 'F': MESSAGE; expected E, got G``.
    """

    def __init__(
        self,
        path: str | Path | None,
        message: str,
        *,
        row: int | None = None,
        line: int | None = None,
        field: str | None = None,
        expected: str | None = None,
        got: object = None,
        written: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else "<table>"
        self.message = message
        self.row = row
        self.line = line
        self.field = field
        self.expected = expected
        self.got = got
        self.written = written
        super().__init__(self._format())

    def _format(self) -> str:
        where = [self.path]
        loc = []
        if self.line is not None:
            loc.append(f"line {self.line}")
        if self.row is not None:
            loc.append(f"row {self.row}" if not loc else f"(row {self.row})")
        if loc:
            where.append(" ".join(loc))
        if self.field is not None:
            where.append(f"field {_one_line(repr(self.field))[:200]}")
        text = ": ".join(where) + ": " + self.message
        if self.expected is not None:
            text += f"; expected {self.expected}"
        if self.written is not None:
            text += f", got {shown(self.written)}"
        elif self.got is not None:
            text += f", got {quote(self.got)}"
        return _one_line(text)
