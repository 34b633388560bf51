"""``fragsim report DIR... [-o report.html]``: one self-contained HTML report (plotly,
opens offline) over one or more written runs, or over one postmortem folder (written by
``fragsim postmortem``: :mod:`reports.postmortem`). ``fragsim run``, ``demo``,
``compare`` and ``postmortem`` write one too unless told ``--no-report``.

Without ``-o`` the report of one folder goes to ``DIR/report.html``; several run folders
need ``-o``. A postmortem folder is reported alone. This module is the front (options,
the checks on the folders given); the report is written by
:func:`sim.cli.bodies.report.report` (:mod:`sim.cli.lazy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.common import fail


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
    lazy.call(
        "sim.cli.bodies.report:report",
        run_dirs=run_dirs,
        target=target,
        top_k=top_k,
        postmortem=bool(postmortems),
    )
