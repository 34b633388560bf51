"""``fragsim report RUN_DIR... -o report.html``: one self-contained HTML report (plotly,
opens offline) over one or more written runs; ``fragsim run``, ``demo`` and ``compare``
write one too unless told ``--no-report`` (:func:`write_report_of`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from sim.errors import clip


def write_report_of(run_dirs: Sequence[Path], out: Path) -> Path:
    """Write the report of ``run_dirs`` to ``out``; a user error (a folder that is not a
    run, a path that cannot be written) prints one ``error:`` line and raises the exit-2
    exception. plotly is imported here, only by the commands that report."""
    from reports import ReportError, write_report
    from sim.cli.run import fail
    from traces.errors import TraceError

    try:
        return write_report(run_dirs, out)
    except ReportError as e:
        raise fail(clip(str(e))) from None
    except TraceError as e:
        raise fail(str(e)) from None


def report_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories (written by fragsim run / compare).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")],
) -> None:
    """Build one self-contained HTML report (figures, summary, alerts) over RUN_DIR..."""
    path = write_report_of(run_dirs, out)
    typer.echo(f"wrote {path}")
