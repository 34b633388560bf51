"""Progress of long work on stderr, whatever stdout is (a terminal, a file, a pipe).
Imports only the standard library at module level (rich once a terminal bar is shown).

API (stable; other command modules build on it)::

    with progress("run seed-postmortem", total=end_s, what="simulated time",
                  amounts=sim_time_amounts, quiet=quiet) as p:
        ...
        p.update(now_s)                 # whatever the caller counts
        p.update(done, total=n, note="3 running, 1 failed")

* stderr is a terminal: a rich bar (label, bar, percentage, amounts, note, elapsed),
  left on screen at the end unless ``transient=True``.
* stderr is not a terminal (a CI log, ``2> file``): one plain line every
  ``interval_s`` of wall time (default 10 s, or ``$FRAGSIM_PROGRESS_INTERVAL_S``), from a background thread so that a line comes
  even while no update arrives, and one line at the end -- only when the work took at
  least ``interval_s``, so quick commands print nothing::

      run seed-postmortem: 41 % of simulated time (2.5 of 6.0 d), 1m12s
      sweep: 30 % of runs (12 of 40), 3 running, 1 failed, 4m05s
      run seed-postmortem: 100 % of simulated time (6.0 of 6.0 d), done in 5m24s

  Without a total: ``LABEL: DONE WHAT, NOTE, ELAPSED``.
* ``quiet=True``: nothing at all.

``amounts(done, total) -> str`` words the amounts: :func:`count_amounts` (``12 of
40``, the default) or :func:`sim_time_amounts` (simulated seconds in s, min, h or d,
chosen from the total). :func:`elapsed_text` formats wall time (``5s``, ``1m12s``,
``2h03m``).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

INTERVAL_S = 10.0
"""Seconds between two plain progress lines, unless ``$FRAGSIM_PROGRESS_INTERVAL_S``
says otherwise."""
INTERVAL_ENV = "FRAGSIM_PROGRESS_INTERVAL_S"

Amounts = Callable[[float, float | None], str]


def count_amounts(done: float, total: float | None) -> str:
    """``12 of 40`` (``12`` without a total)."""
    return f"{done:,.0f}" if total is None else f"{done:,.0f} of {total:,.0f}"


def sim_time_amounts(done_s: float, total_s: float | None) -> str:
    """Simulated seconds in the unit the total reads best in: ``2.5 of 6.0 d``."""
    scale = total_s if total_s is not None else done_s
    units = (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0))
    unit, size = next(((u, z) for u, z in units if scale >= 2 * z), ("s", 1.0))
    if total_s is None:
        return f"{done_s / size:,.1f} {unit}"
    return f"{done_s / size:,.1f} of {total_s / size:,.1f} {unit}"


def elapsed_text(seconds: float) -> str:
    """Wall time as ``5s``, ``1m12s`` or ``2h03m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """The state of one piece of work and its display (made by :func:`progress`)."""

    def __init__(
        self,
        label: str,
        total: float | None,
        what: str,
        amounts: Amounts,
        stream: TextIO,
        interval_s: float,
    ) -> None:
        self.label = label
        self.total = total
        self.what = what
        self.amounts = amounts
        self.done = 0.0
        self.note = ""
        self.updated = False
        self._stream = stream
        self._interval_s = interval_s
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._listener: Callable[[], None] | None = None

    def update(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Record ``done`` (and a new ``total``, a new ``note``); cheap to call often."""
        with self._lock:
            self.done = done
            self.updated = True
            if total is not None:
                self.total = total
            if note is not None:
                self.note = note
        if self._listener is not None:
            self._listener()

    def line(self, *, final: bool = False) -> str:
        """The plain progress line for the state now."""
        with self._lock:
            done, total, note = self.done, self.total, self.note
        elapsed = elapsed_text(time.monotonic() - self._start)
        of = f" of {self.what}" if self.what else ""
        if total:
            text = f"{100 * min(done / total, 1.0):.0f} %{of} ({self.amounts(done, total)})"
        else:
            text = f"{self.amounts(done, None)}{' ' + self.what if self.what else ''}"
        parts = [f"{self.label}: {text}", *([note] if note else [])]
        parts.append(f"done in {elapsed}" if final else elapsed)
        return ", ".join(parts)

    def elapsed_s(self) -> float:
        return time.monotonic() - self._start

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # a closed pipe: progress is not worth failing for
            pass


@contextmanager
def progress(
    label: str,
    total: float | None = None,
    *,
    what: str = "",
    amounts: Amounts = count_amounts,
    quiet: bool = False,
    transient: bool = False,
    interval_s: float | None = None,
    stream: TextIO | None = None,
    terminal: bool | None = None,
) -> Iterator[Progress]:
    """Show the progress of the work in the block (module docstring). ``stream``
    defaults to stderr; ``terminal`` to whether it is one; ``interval_s`` to
    :func:`default_interval_s`."""
    if interval_s is None:
        interval_s = default_interval_s()
    out = sys.stderr if stream is None else stream
    p = Progress(label, total, what, amounts, out, interval_s)
    if quiet:
        yield p
    elif terminal if terminal is not None else _isatty(out):
        with _bar(p, out, transient):
            yield p
    else:
        with _lines(p, interval_s):
            yield p


def default_interval_s() -> float:
    """``$FRAGSIM_PROGRESS_INTERVAL_S`` when it is a number > 0, else :data:`INTERVAL_S`."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return INTERVAL_S
    return value if math.isfinite(value) and value > 0 else INTERVAL_S


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def _lines(p: Progress, interval_s: float) -> Iterator[None]:
    """A line every ``interval_s`` from a daemon thread; a last one at the end when the
    work took that long (also when it ends by an exception: the state it reached)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(interval_s):
            if p.updated:  # nothing to say before the first update
                p._write(p.line())

    thread = threading.Thread(target=tick, name="fragsim-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        thread.join()
        if p.updated and p.elapsed_s() >= interval_s:
            p._write(p.line(final=ok))


@contextmanager
def _bar(p: Progress, stream: TextIO, transient: bool) -> Iterator[None]:
    bar = RichProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[text]}"),
        TimeElapsedColumn(),
        console=Console(file=stream, stderr=stream is sys.stderr),
        transient=transient,
    )
    task = bar.add_task(p.label, total=p.total, text="")

    def refresh() -> None:
        with p._lock:
            done, total, note = p.done, p.total, p.note
        what = f"{p.what} " if p.what else ""
        text = f"{what}{p.amounts(done, total or None)}" + (f", {note}" if note else "")
        bar.update(task, completed=done, total=total or None, text=text)

    p._listener = refresh
    with bar:
        refresh()
        try:
            yield
        finally:
            p._listener = None
            refresh()
