"""Errors and warnings raised while reading or checking a trace.

Contract: every problem with a user's file surfaces as :class:`TraceError` (a
``ValueError``) naming the file, the row (0-based data row) and/or line (1-based line
in the file, header included), the field, what was expected and what was found. Loaders
never let a parser's own exception (Arrow, JSON, Unicode) escape.
"""

from __future__ import annotations

from pathlib import Path


class TraceWarning(UserWarning):
    """Something was repaired, not rejected: unsorted arrivals sorted, failed rows dropped."""


class TraceError(ValueError):
    """A trace file (or table) that breaks the canonical contract.

    Attributes are kept separately so callers and tests can check them; ``str()`` joins
    them into one line: ``FILE: line L (row R): field 'F': expected E, got G``.
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
    ) -> None:
        self.path = str(path) if path is not None else "<table>"
        self.message = message
        self.row = row
        self.line = line
        self.field = field
        self.expected = expected
        self.got = got
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
            where.append(f"field {self.field!r}")
        text = ": ".join(where) + ": " + self.message
        if self.expected is not None:
            text += f"; expected {self.expected}"
        if self.got is not None:
            text += f", got {self.got!r}"
        return text
