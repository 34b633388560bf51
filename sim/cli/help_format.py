"""``--help`` as plain text that never breaks inside a word or a number.

typer's rich help panels fit their columns by folding and cutting: at 60 columns ``run
--help`` printed ``[0<=x<=922337203685477`` / ``5807]``, ``markdo`` / ``wn`` and
``summary.js…``. fragsim prints click's plain help instead (``rich_markup_mode=None``),
with a formatter whose wrapping keeps every word whole (no break inside a long word or
at a hyphen: ``--no-autoscale`` stays one piece) and rejoins a docstring's paragraphs
before wrapping them to the terminal. The one adapter for typer's help internals:
:class:`HelpContext` (the context class each command gets, :func:`plain_help`) and
:class:`WholeWordsFormatter` (its formatter; ``typer._click`` is the click typer
vendors, whose ``HelpFormatter`` wraps with ``textwrap``'s defaults). ``Command`` and
``Context`` are click's classes from the same place, for the type hints of
:mod:`sim.cli` (typer 0.29 exports no public name for a click command or a formatter).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TypeVar

import typer
from typer._click.core import Command as Command
from typer._click.core import Context as Context
from typer._click.formatting import HelpFormatter as HelpFormatter
from typer._click.formatting import iter_rows, measure_table, term_len
from typer.core import TyperCommand, TyperGroup


def wrap_whole_words(text: str, width: int, indent: str = "") -> str:
    """``text``'s paragraphs (blank-line separated; a paragraph led by a ``\\b`` line is
    kept as written) each rejoined and wrapped to ``width`` at spaces only."""
    wrapper = textwrap.TextWrapper(
        max(width, 10),
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    out = []
    for para in text.expandtabs().split("\n\n"):
        lines = para.strip("\n").splitlines()
        if not lines:
            continue
        if lines[0].strip() == "\b":
            out.append("\n".join(indent + line for line in lines[1:]))
        else:
            out.append(wrapper.fill(" ".join(line.strip() for line in lines)))
    return "\n\n".join(out)


class WholeWordsFormatter(HelpFormatter):
    """click's help formatter, wrapping text and definition lists at spaces only."""

    def write_text(self, text: str) -> None:
        self.write(wrap_whole_words(text, self.width, " " * self.current_indent))
        self.write("\n")

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        rows = list(rows)
        widths = measure_table(rows)
        first_col = min(widths[0], col_max) + col_spacing
        for first, second in iter_rows(rows, len(widths)):
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            column = first_col
            longest = max((term_len(w) for w in second.split()), default=0)
            if longest > self.width - first_col - 2:  # a word too long for the column:
                column = max(self.width - 2 - longest, 4)  # this row's text starts left
            if term_len(first) <= column - col_spacing:
                self.write(" " * (column - term_len(first)))
            else:
                self.write("\n" + " " * (column + self.current_indent))
            text_width = max(self.width - column - 2, 10)
            lines = wrap_whole_words(second, text_width).splitlines() or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{column + self.current_indent}}{line}\n")


C = TypeVar("C", bound=Command)
"""A click command (or group) handed through :func:`plain_help`."""


class HelpContext(typer.Context):
    """typer's context, formatting help with :class:`WholeWordsFormatter`."""

    formatter_class = WholeWordsFormatter


def plain_help(command: C) -> C:
    """``command`` (and every subcommand it holds) printing plain, whole-word help, and
    listed by its help's whole first paragraph (click would cut it at 45 characters);
    returns it."""
    command.context_class = HelpContext
    if isinstance(command, TyperCommand | TyperGroup):  # typer's own (every command here)
        command.rich_markup_mode = None
    if not command.short_help and command.help:
        command.short_help = " ".join(command.help.split("\n\n")[0].split())
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            plain_help(sub)
    return command
