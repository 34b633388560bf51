"""``fragsim report DIR... [-o report.html]``: one self-contained HTML report (plotly,
opens offline) over one or more written runs, or over one postmortem folder (written by
``fragsim postmortem``: :mod:`reports.postmortem`). ``fragsim run``, ``demo``,
``compare`` and ``postmortem`` write one too unless told ``--no-report``
(:func:`write_report_of`, :func:`write_postmortem_report_of`).

Without ``-o`` the report of one folder goes to ``DIR/report.html``; several run folders
need ``-o``. A postmortem folder is reported alone. Module-level imports stay light
(plotly and pandas are imported by the functions that write).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from sim.cli.common import fail
from sim.errors import clip


def write_report_of(
    run_dirs: Sequence[Path], out: Path, top_k: int = 3, names: Sequence[str] | None = None
) -> Path:
    """Write the report of ``run_dirs`` to ``out`` (``top_k``: worst replicas drawn one by
    one in a fleet's figures; ``names``: the runs' names, default their folders'); a user error (a folder that is not a run, a path that
    cannot be written) prints one ``error:`` line and raises the exit-2 exception.
    plotly is imported here, only by the commands that report."""
    from reports import ReportError, ReportOptions, write_report
    from traces.errors import TraceError

    try:
        return write_report(run_dirs, out, ReportOptions(top_k=top_k), names)
    except ReportError as e:
        raise fail(clip(str(e))) from None
    except TraceError as e:
        raise fail(str(e)) from None


def write_postmortem_report_of(pm_dir: Path, out: Path) -> Path:
    """Write the report of the postmortem folder ``pm_dir`` to ``out``; user errors as
    :func:`write_report_of`."""
    from reports.html import ReportError
    from reports.postmortem import write_postmortem_report
    from traces.errors import TraceError

    try:
        return write_postmortem_report(pm_dir, out)
    except ReportError as e:
        raise fail(clip(str(e))) from None
    except TraceError as e:
        raise fail(str(e)) from None


def is_postmortem_dir(path: Path) -> bool:
    """A folder ``fragsim postmortem`` wrote (it holds ``postmortem.json``; what else
    it needs, :func:`reports.postmortem.read_postmortem` checks)."""
    return (path / "postmortem.json").is_file()


def report_command(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (fragsim run / compare), or one postmortem folder "
            "(fragsim postmortem)."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="The HTML file to write (default: DIR/report.html)."),
    ] = None,
    top_k: Annotated[
        int,
        typer.Option(
            "--top-k",
            min=0,
            max=50,
            help="Worst replicas a fleet's figures draw one by one over the fleet's bands.",
        ),
    ] = 3,
) -> None:
    """Build one self-contained HTML report over RUN_DIR... or one postmortem folder."""
    postmortems = [d for d in run_dirs if is_postmortem_dir(d)]
    if postmortems and len(run_dirs) > 1:
        raise fail(f"{postmortems[0]}: a postmortem folder is reported alone (one DIR)")
    if out is None and len(run_dirs) > 1:
        raise fail("several run directories: give the report's file with -o/--out")
    target = out if out is not None else run_dirs[0] / "report.html"
    if postmortems:
        path = write_postmortem_report_of(run_dirs[0], target)
    else:
        path = write_report_of(run_dirs, target, top_k)
    typer.echo(f"wrote {path}")
