"""The body of ``fragsim report`` (its front, ``sim.cli.report``, states the contract):
the report of run folders or of one postmortem folder, written atomically; a user error
(a folder that is not a run, a path that cannot be written) is one ``error:`` line and
exit status 2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from reports import ReportError, ReportOptions, write_report
from reports.postmortem import write_postmortem_report
from sim.cli.common import fail
from sim.errors import clip
from traces.errors import TraceError


def report(*, run_dirs: list[Path], target: Path, top_k: int, postmortem: bool) -> None:
    """Write the report of ``run_dirs`` (one postmortem folder when ``postmortem``) to
    ``target`` and say where it went."""
    if postmortem:
        path = write_postmortem_report_of(run_dirs[0], target)
    else:
        path = write_report_of(run_dirs, target, top_k)
    typer.echo(f"wrote {path}")


def write_report_of(
    run_dirs: Sequence[Path], out: Path, top_k: int = 3, names: Sequence[str] | None = None
) -> Path:
    """Write the report of ``run_dirs`` to ``out`` (``top_k``: worst replicas drawn one by
    one in a fleet's figures; ``names``: the runs' names, default their folders'); a
    user error prints one ``error:`` line and raises the exit-2 exception."""
    try:
        return write_report(run_dirs, out, ReportOptions(top_k=top_k), names)
    except ReportError as e:
        raise fail(clip(str(e))) from None
    except TraceError as e:
        raise fail(str(e)) from None


def write_postmortem_report_of(pm_dir: Path, out: Path) -> Path:
    """Write the report of the postmortem folder ``pm_dir`` to ``out``; user errors as
    :func:`write_report_of`."""
    try:
        return write_postmortem_report(pm_dir, out)
    except ReportError as e:
        raise fail(clip(str(e))) from None
    except TraceError as e:
        raise fail(str(e)) from None
