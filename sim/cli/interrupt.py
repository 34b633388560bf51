"""Ctrl-C in the ``fragsim`` command: one true line, exit status 130, no traceback.

Python's default handler raises ``KeyboardInterrupt`` wherever the program is. The
command line handles it in three phases:

* **startup** -- importing the command line (typer, rich) before any command runs.
  ``sim.cli`` installs :func:`exit_at_once` first thing, so an interrupt there prints
  the line and ends the process at once (nothing was written, nothing needs cleaning
  up);
* **a command** -- ``sim.cli``'s group restores Python's default handler before the
  command's module is loaded (commands load on demand, and import pandas, pyarrow and
  the engine inside their functions); the ``KeyboardInterrupt`` unwinds the command (a
  results writer removes its temporaries on the way) and the group prints
  :func:`message`;
* **the exit** -- once the command has returned, an interrupt is ignored: there is
  nothing left to stop.

:func:`message` is true whenever it is printed: a command that completed writing a run
(``RunResult.write``'s ``on_commit``) records it with :func:`note_written`, and the line
then says where the results are instead of ``nothing written``.

This module imports only the standard library: it must be usable before the heavy
imports it guards.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""

_written: list[str] = []


def note_written(path: object) -> None:
    """Record that this command has completed writing results to ``path``."""
    _written.append(str(path))


def forget_written() -> None:
    """A new command starts: nothing written yet."""
    _written.clear()


def message() -> str:
    """The line printed for an interrupt: what the command had written by then."""
    if _written:
        return f"interrupted; results written to {', '.join(_written)}"
    return "interrupted; nothing written"


def exit_at_once(signum: int, frame: FrameType | None) -> None:
    """A SIGINT handler: print :func:`message` and end the process with status 130,
    without unwinding (``os._exit``: for moments with nothing to clean up)."""
    os.write(2, (message() + "\n").encode())
    os._exit(INTERRUPTED)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def guard_startup() -> None:
    """Make an interrupt during the imports that follow print the line and exit 130.
    Only where Python's own handler is in place (not under a host that set its own)."""
    if _main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, exit_at_once)


def end_startup() -> None:
    """Back to Python's default handler (``KeyboardInterrupt``), if the startup guard
    is in place: a command is about to run."""
    if _main_thread() and signal.getsignal(signal.SIGINT) is exit_at_once:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def is_entry_point() -> bool:
    """Is this process the ``fragsim`` command (its console script, or ``python -m
    sim``), rather than a program that imports ``sim.cli`` (tests, a notebook)?"""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in ("sim", "sim.__main__"):
        return True
    return os.path.basename(sys.argv[0]) == "fragsim" if sys.argv else False


def ignore_from_now() -> None:
    """The command has ended: an interrupt while the interpreter exits is ignored."""
    if _main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
