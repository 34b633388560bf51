"""``fragsim sweep SWEEP.yaml -o OUT/``: run a base scenario under a grid or list of
overrides, with replications over seeds, on a local process pool (``--workers``) or a
Dask cluster (``--scheduler tcp://HOST:PORT``); each run lands in ``OUT/runs/ID/`` as it
finishes, a rerun resumes, and the tables ``OUT/summary.{parquet,csv}`` and
``OUT/runs.parquet`` are written at the end (``sim.sweep``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.cli import interrupt
from sim.cli.run import fail
from sim.errors import clip
from sim.scenario.schema import ScenarioError
from sim.sweep.execute import Progress as ProgressFn
from traces.errors import TraceError

SWEEP_ENTRIES = {"runs", "failed", "runs.parquet", "summary.parquet", "summary.csv"}
PLAN_ENTRIES = {"plan.parquet", "plan.csv", "plan_points.parquet"}

WorkersOption = Annotated[
    int | None,
    typer.Option(min=1, max=1024, help="Local worker processes (default: all cores)."),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(help="Dask scheduler address (tcp://HOST:PORT): run on that cluster."),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or table.")]


def check_sweep_dir(out: Path) -> None:
    """OUT is absent, empty, or an earlier sweep's (or plan's) folder, which is resumed."""
    try:
        if not out.exists():
            out.mkdir(parents=True)
            return
        if not out.is_dir():
            raise fail(f"{clip(str(out))}: exists and is not a directory")
        entries = {p.name for p in out.iterdir()}
        others = sorted(entries - SWEEP_ENTRIES - PLAN_ENTRIES - {"report.html"})
        others = [n for n in others if not n.startswith(".")]  # stale temporaries
        if others:
            raise fail(
                f"{clip(str(out))}: holds other files ({', '.join(others[:3])}); a sweep "
                f"writes into a new or empty folder, or resumes its own"
            )
    except OSError as e:
        raise fail(f"{clip(str(out))}: output directory: {e.strerror or e}") from None


@contextmanager
def progress_bar(quiet: bool, what: str) -> Iterator[ProgressFn]:
    """A rich bar on stderr: runs done of all, running, failed."""
    bar = Progress(
        TextColumn(f"{what} [progress.description]{{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet,
        transient=False,
    )
    task = bar.add_task("", total=None)

    def update(done: int, running: int, failed: int, total: int) -> None:
        bar.update(
            task,
            completed=done + failed,
            total=total,
            description=f"{running} running, {failed} failed",
        )

    with bar:
        yield update


def sweep_command(
    sweep_file: Annotated[Path, typer.Argument(help="The sweep YAML file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    quiet: QuietOption = False,
) -> None:
    """Run a sweep: a base scenario x a grid or list of overrides x replications."""
    from sim.sweep.run import run_sweep
    from sim.sweep.spec import load_sweep

    try:
        sweep = load_sweep(sweep_file)
    except ScenarioError as e:
        raise fail(str(e)) from None
    check_sweep_dir(out)
    try:
        with progress_bar(quiet, "sweep") as update:
            result = run_sweep(sweep, out, workers=workers, scheduler=scheduler, progress=update)
    except (TraceError, OSError) as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e}") from None
    except KeyboardInterrupt:
        note_kept(out)
        raise
    interrupt.note_written(clip(str(out)))
    report = write_report(result.summary, sweep.params, out, sweep.tasks[0].scenario.name)
    if not quiet:
        skipped = sum(o.skipped for o in result.outcomes)
        typer.echo(
            f"wrote {out}/ ({len(result.outcomes)} runs: {skipped} from an earlier sweep, "
            f"{len(result.failed)} failed; summary.parquet, summary.csv, runs.parquet"
            f"{', report.html' if report else ''})"
        )
    for o in result.failed:
        last = (o.error or "").strip().splitlines()[-1:] or [""]
        typer.echo(f"warning: run {o.task.id} failed: {clip(last[0])}", err=True)


def note_kept(out: Path) -> None:
    """For the line an interrupt prints: the finished runs an interrupted sweep (or plan)
    keeps under OUT/runs/, and that the same command resumes it."""
    from sim.sweep.execute import kept_runs

    kept = kept_runs(out)
    if kept:
        interrupt.note_written(
            f"{clip(str(out))}/runs/ ({kept:,} finished run{'s' if kept > 1 else ''} kept; "
            "rerun the same command to resume)"
        )


def write_report(summary: pd.DataFrame, params: list[str], out: Path, title: str) -> bool:
    """OUT/report.html (``reports.sweep``: results table, heatmaps or bars with their
    intervals); False while the ``reports`` package (plotly) is not installed."""
    try:
        from reports.sweep import write_sweep_report
    except ImportError:
        return False
    write_sweep_report(summary, params, out / "report.html", title)
    return True
