"""``fragsim sweep SWEEP.yaml -o OUT/``: run a base scenario under a grid or list of
overrides, with replications over seeds, on a local process pool (``--workers``) or a
Dask cluster (``--scheduler tcp://HOST:PORT``); each run lands in ``OUT/runs/ID/`` as it
finishes, a rerun resumes, and the tables ``OUT/summary.{parquet,csv}`` and
``OUT/runs.parquet`` are written at the end (``sim.sweep``).

stdout: the summary, one row per point of the sweep with each headline metric's mean
± the half-width of its 95 % interval over the replications (``--format``; csv and
json print the whole summary table, every column of ``summary.csv``). stderr: progress
(runs done of all, running, failed: ``sim.cli.progress``), warnings and the output
path (also with ``--quiet``).

This module is the front (its options, shared with ``fragsim plan``); the work is
:func:`sim.cli.bodies.sweep.sweep` (:mod:`sim.cli.lazy`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.output import FormatOption

WorkersOption = Annotated[
    int | None,
    typer.Option(min=1, max=1024, help="Local worker processes (default: all cores)."),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(help="Dask scheduler address (tcp://HOST:PORT): run on that cluster."),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress or table (the output path still).")
]


def sweep_command(
    sweep_file: Annotated[Path, typer.Argument(help="The sweep YAML file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    quiet: QuietOption = False,
    fmt: FormatOption = "table",
) -> None:
    """Run a sweep: a base scenario x a grid or list of overrides x replications."""
    lazy.call(
        "sim.cli.bodies.sweep:sweep",
        sweep_file=sweep_file,
        out=out,
        workers=workers,
        scheduler=scheduler,
        quiet=quiet,
        fmt=fmt,
    )
