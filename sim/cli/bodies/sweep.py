"""The body of ``fragsim sweep`` (its front, ``sim.cli.sweep``, states the contract): load
the sweep, check OUT, run every task with progress (resuming what an earlier sweep
finished), write the tables and the report, print the summary; and what ``fragsim
plan`` shares with it (the output folder, the kept runs, the variant columns)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import typer

from sim.cli import interrupt
from sim.cli.common import fail
from sim.cli.output import Cell, print_table
from sim.cli.progress import progress
from sim.errors import clip
from sim.scenario.schema import ScenarioError
from sim.sweep.execute import kept_runs
from sim.sweep.labels import mean_ci_cell, param_label
from sim.sweep.run import run_sweep
from sim.sweep.spec import load_sweep
from traces.errors import TraceError

SWEEP_ENTRIES = {"runs", "failed", "runs.parquet", "summary.parquet", "summary.csv"}
PLAN_ENTRIES = {"plan.parquet", "plan.csv", "plan_points.parquet"}

ProgressFn = Callable[[int, int, int, int], None]
"""``progress(done, running, failed, total)`` (``sim.sweep.execute.Progress``)."""


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
def progress_bar(quiet: bool, what: str, noun: str = "runs") -> Iterator[ProgressFn]:
    """Progress on stderr (``sim.cli.progress``): runs done of all, running, failed."""
    with progress(what, what=noun, quiet=quiet) as p:

        def update(done: int, running: int, failed: int, total: int) -> None:
            p.update(done + failed, total, note=f"{running} running, {failed} failed")

        yield update


def sweep(
    *,
    sweep_file: Path,
    out: Path,
    workers: int | None,
    scheduler: str | None,
    quiet: bool,
    fmt: str,
) -> None:
    """The work of ``sim.cli.sweep.sweep_command``, on the options it parsed."""
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
        print_summary(result.summary, sweep.params, fmt)
    skipped = sum(o.skipped for o in result.outcomes)
    typer.echo(
        f"wrote {out}/ ({len(result.outcomes)} runs: {skipped} from an earlier sweep, "
        f"{len(result.failed)} failed; summary.parquet, summary.csv, runs.parquet"
        f"{', report.html' if report else ''})",
        err=True,
    )
    for o in result.failed:
        last = (o.error or "").strip().splitlines()[-1:] or [""]
        typer.echo(f"warning: run {o.task.id} failed: {clip(last[0])}", err=True)


def note_kept(out: Path) -> None:
    """For the line an interrupt prints: the finished runs an interrupted sweep (or plan)
    keeps under OUT/runs/, and that the same command resumes it."""
    kept = kept_runs(out)
    if kept:
        interrupt.note_written(
            f"{clip(str(out))}/runs/ ({kept:,} finished run{'s' if kept > 1 else ''} kept; "
            "rerun the same command to resume)"
        )


SHOWN_METRICS: tuple[tuple[str, str], ...] = (
    ("failure_rate", "failure rate"),
    ("allocation_failures", "alloc. failures"),
    ("failures_at_high_free", "at > 25 % free"),
    ("replica_hours", "replica-hours"),
    ("cost_usd", "cost ($)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
    ("e2e_p99_s", "e2e p99 (s)"),
)
"""The metrics the terminal summary shows (summary.csv has every one), with labels."""


def print_summary(summary: pd.DataFrame, params: list[str], fmt: str) -> None:
    """The sweep's summary on stdout: with ``table``/``markdown`` one row per point
    (its parameters as ``path=value``), the runs that finished and
    :data:`SHOWN_METRICS` as ``mean ± half-width of the 95 % interval`` (a metric no
    run has is left out); with ``csv``/``json`` every column of ``summary.csv``."""
    if fmt in ("csv", "json"):
        print_table(None, list(summary.columns), summary.to_numpy().tolist(), fmt)
        return

    varied = [p for p in params if summary[p].nunique(dropna=False) > 1] or params
    keys = variant_columns(varied)
    shown = [(m, label) for m, label in SHOWN_METRICS if summary[f"{m}_mean"].notna().any()]
    rows = []
    for _, row in summary.iterrows():
        variant = [param_cell(row[p]) for p in varied] or [f"point {row['point']}"]
        cells: list[object] = [*variant, Cell(int(row["replications"]), _runs(row))]
        for m, _ in shown:
            mean, low, high = (float(row[f"{m}_{s}"]) for s in ("mean", "ci95_low", "ci95_high"))
            cells.append(Cell(mean, mean_ci_cell(mean, low, high)))
        rows.append(cells)
    columns = [*keys, "runs", *(label for _, label in shown)]
    title = "sweep summary (mean ± 95 % CI half-width)"
    print_table(title, columns, rows, fmt, keys=len(keys))


def variant_columns(params: list[str]) -> list[str]:
    """The key columns of a table over variants: one per parameter, labelled with its
    unit (``sim.sweep.labels``); ``variant`` without parameters."""
    return [param_label(p) for p in params] or ["variant"]


def param_cell(value: object) -> str | int | float | bool:
    """A parameter's value as a cell: numbers and text as they are, the rest (a list of
    pools) as its text."""
    return value if isinstance(value, str | int | float | bool) else str(value)


def _runs(row: pd.Series) -> str:
    failed = int(row["failed_runs"])
    return f"{int(row['replications'])}" + (f" ({failed} failed)" if failed else "")


def write_report(summary: pd.DataFrame, params: list[str], out: Path, title: str) -> bool:
    """OUT/report.html (``reports.sweep``: results table, heatmaps or bars with their
    intervals); False while the ``reports`` package (plotly) is not installed."""
    try:
        from reports.sweep import write_sweep_report
    except ImportError:
        return False
    write_sweep_report(summary, params, out / "report.html", title)
    return True
