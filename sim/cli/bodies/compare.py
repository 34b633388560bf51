"""The body of ``fragsim compare`` (its front, ``sim.cli.compare``, states the contract):
load and check every run, simulate the scenarios, write the comparison into a staged
``OUT`` and swap it in whole, then print the table and the verdicts. Loading and
simulating scenarios is :mod:`sim.cli.bodies.compare_runs`, loaded only when a RUN is a
scenario (a comparison of finished run folders never imports the engine)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import typer

from sim.cli import interrupt, lazy
from sim.cli.bodies.run_folder import checked_run
from sim.cli.common import fail
from sim.cli.compare import unique_names
from sim.cli.output import Cell, print_table, terminal_width, wrap_prose
from sim.errors import clip
from sim.results.compare import compare_frame, delta_text, formatted, with_deltas
from sim.results.io import FILES, check_owned_folder
from sim.results.runfolder import RunFolderError, read_summary
from sim.results.summary_model import Summary
from traces.atomic import Outputs, staged
from traces.errors import TraceError

if TYPE_CHECKING:  # the runs' body is loaded by name, only when scenarios are run
    from sim.cli.bodies.compare_runs import Prepared

SUMMARY = "summary.json"


def compare(
    *,
    runs: list[Path],
    out: Path,
    baseline: str | None,
    seed: int | None,
    jobs: int,
    quiet: bool,
    no_report: bool,
    fmt: str,
) -> None:
    """The work of ``sim.cli.compare.compare_command``, on the options it parsed."""
    folders = {i: p for i, p in enumerate(runs) if _run_folder(p, report=not no_report)}
    scenarios = {i: p for i, p in enumerate(runs) if i not in folders}
    prepared: dict[int, Prepared] = (  # every scenario loaded and checked before anything runs
        lazy.call("sim.cli.bodies.compare_runs:prepare_all", paths=scenarios, seed=seed)
        if scenarios
        else {}
    )
    summaries: dict[int, Summary] = {i: _read_summary(p) for i, p in folders.items()}
    for i in prepared:
        check_run_name(prepared[i][0].name, prepared[i][3])
    names = unique_names(
        [
            folders[i].resolve().name if i in folders else prepared[i][0].name
            for i in range(len(runs))
        ]
    )
    base = 0 if baseline is None else _baseline_index(baseline, names)
    check_out_apart(out, list(folders.values()))

    with staged() as outputs:
        stage = _stage(outputs, out)
        to_run = [(i, prepared[i][0], stage / names[i]) for i in sorted(prepared)]
        if to_run:
            ran_summaries: dict[int, Summary] = lazy.call(
                "sim.cli.bodies.compare_runs:simulate_all",
                to_run=to_run,
                prepared=prepared,
                quiet=quiet,
                jobs=jobs,
            )
            summaries.update(ran_summaries)
        _warn_spans([summaries[i] for i in range(len(runs))], names)

        frame = with_deltas(compare_frame([summaries[i] for i in range(len(runs))]), names, base)
        _write_tables(frame, stage, out)
        dirs = {names[i]: folders.get(i, stage / names[i]) for i in range(len(runs))}
        report = None
        if not no_report:
            order = [str(n) for n in frame["run"]]  # the table's names: unique
            report = _write_report([dirs[n] for n in order], order, stage, out)
        _commit(outputs, out)
    if not quiet:
        print_comparison(frame, fmt)
    ran = [names[i] for i in sorted(prepared)]
    listed = ", ".join([*(f"{n}/" for n in ran), "compare.csv", "compare.parquet"])
    typer.echo(f"wrote {out}/ ({listed})", err=True)
    if report is not None:
        typer.echo(f"report: {report}", err=True)


COMPARE_FILES = frozenset({"compare.csv", "compare.parquet", "report.html"})
"""What a compare folder holds besides the run folders it simulated."""


def check_compare_dir(out: Path) -> None:
    """Raise (FileExistsError) unless ``out`` is absent, empty, or an earlier
    comparison's folder -- ``compare.csv`` or ``compare.parquet``, ``report.html`` and run
    folders (each holding only a run's files), nothing else: a compare folder is
    replaced whole, so nothing that fragsim did not write there is ever lost."""
    marker = frozenset({"compare.csv", "compare.parquet"})
    check_owned_folder(out, "compare", files=COMPARE_FILES, marker=marker)


def check_out_apart(out: Path, inputs: list[Path]) -> None:
    """One ``error:`` line when ``-o`` is an input run folder, lies inside one, or holds
    one: the comparison replaces ``-o`` whole, and never writes into a run it reads."""
    real = out.resolve()
    for folder in inputs:
        given = folder.resolve()
        if real == given or given in real.parents:
            where = "is" if real == given else "is inside"
            raise fail(
                f"{clip(str(out))}: -o {where} the run folder {clip(str(folder))} given to "
                "compare; write the comparison to another folder"
            )
        if real in given.parents:
            raise fail(
                f"{clip(str(out))}: -o holds the run folder {clip(str(folder))} given to "
                "compare, and a comparison replaces its folder whole; write to another -o"
            )


def check_run_name(name: str, source: Path) -> None:
    """A scenario's name becomes a folder under ``-o``: one ``error:`` line for one that
    cannot be a single, visible path component (empty, ``.``, ``..``, a leading dot)."""
    if not name.strip() or name.startswith("."):
        raise fail(
            f"{clip(str(source))}: field name: got {name!r}: a run's name becomes its "
            "folder under -o; expected a name that does not start with a dot"
        )


def _stage(outputs: Outputs, out: Path) -> Path:
    """The hidden sibling of ``out`` the comparison is written into (one ``error:`` line
    when ``out`` may not be replaced or its folder refuses a new one)."""
    try:
        stage: Path = outputs.folder(out, check_compare_dir)
    except FileExistsError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{clip(str(out))}: output directory: {e.strerror or e}") from None
    return stage


def _write_report(run_dirs: list[Path], names: list[str], stage: Path, out: Path) -> Path:
    """``report.html`` into the staged folder; an error names ``out``, not the stage."""
    from reports import ReportError, write_report

    try:
        write_report(run_dirs, stage / "report.html", names=names)
    except (ReportError, TraceError) as e:
        raise fail(clip(str(e).replace(str(stage), str(out)))) from None
    return out / "report.html"


def _commit(outputs: Outputs, out: Path) -> None:
    """Swap the complete comparison in (Ctrl-C after it says it was written)."""
    try:
        outputs.commit(on_commit=lambda: interrupt.note_written(clip(str(out))))
    except OSError as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e.strerror or e}") from None


def _run_folder(path: Path, *, report: bool) -> bool:
    """Whether ``path`` is a run folder; a folder that is not one, or one the report
    cannot read, is a user error (one ``error:`` line, exit 2)."""
    if not path.is_dir():
        return False
    if not (path / SUMMARY).is_file():
        raise fail(
            f"{path}: a folder but not a run (no {SUMMARY}); give a run folder or a scenario"
        )
    if report:
        missing = [name for name in FILES if not (path / name).is_file()]
        if missing:
            raise fail(
                f"{path}: an incomplete run (no {', '.join(missing)}); give --no-report to "
                f"compare its {SUMMARY} alone"
            )
    return True


def _read_summary(path: Path) -> Summary:
    """The folder's summary through the one reader of run folders: the whole folder
    checked (``sim.results.runfolder.check_run``: its summary and every table, before
    anything is written), or only its ``summary.json`` where the folder holds no tables
    (``--no-report``); one ``error:`` line when it is not one a run wrote."""
    if all((path / name).is_file() for name in FILES):
        return checked_run(path)[1]
    try:
        return read_summary(path / SUMMARY)
    except RunFolderError as e:
        raise fail(str(e)) from None


def _warn_spans(summaries: list[Summary], names: list[str]) -> None:
    """One ``warning:`` line when the runs cover simulated spans more than 1 % apart:
    their dollars and counts are then not comparable."""
    spans = [float(s.span_s or s.engine.end_s) for s in summaries]
    if min(spans) > 0 and max(spans) <= 1.01 * min(spans):
        return
    listed = ", ".join(
        f"{n} {span_s / 3600:,.1f} h" for n, span_s in zip(names, spans, strict=True)
    )
    typer.echo(
        f"warning: the runs cover different spans ({listed}); compare runs of the same traffic",
        err=True,
    )


def _baseline_index(name: str, names: list[str]) -> int:
    if name in names:
        return names.index(name)
    raise fail(f"--baseline {name}: no run of that name (runs: {', '.join(names)})")


def _write_tables(frame: pd.DataFrame, stage: Path, out: Path) -> None:
    """``compare.csv`` and ``compare.parquet`` into the staged folder (errors name
    ``out``: the staged folder is an implementation detail)."""
    for name, write in (("compare.csv", frame.to_csv), ("compare.parquet", frame.to_parquet)):
        try:
            write(stage / name, index=False)
        except OSError as e:
            raise fail(f"{clip(str(out / name))}: cannot write file ({e.strerror or e})") from None


def print_comparison(frame: pd.DataFrame, fmt: str) -> None:
    """The comparison on stdout: in ``table`` / ``markdown`` a row per run (the baseline
    first, then by rank) with its values and deltas, then the verdicts; in ``csv`` /
    ``json`` the rows of ``compare.csv``."""
    if fmt in ("csv", "json"):
        columns = [str(c) for c in frame.columns]
        print_table(None, columns, frame.astype(object).values.tolist(), fmt)
        return
    columns, rows = display_rows(frame)
    base = frame["run"].iloc[0]
    print_table(f"against {base}", columns, rows, fmt)
    head = f"ranked by $ saved against {base}, ties by fewer allocation failures:"
    if frame["cost_saved_usd"].isna().all():
        head = f"no prices to compare: ranked by fewer allocation failures against {base}:"
    verdicts = [f"{int(r['rank'])}. {r['verdict']}" for r in frame.iloc[1:].to_dict("records")]
    if not verdicts:  # the baseline alone
        return
    if fmt == "markdown":
        typer.echo("\n".join([head, "", *verdicts]))
        return
    width = max(40, terminal_width())
    lines = wrap_prose(head, width)
    for line in verdicts:
        lines += wrap_prose(f"  {line}", width, indent="   ")
    typer.echo("\n".join(lines))


DISPLAY: tuple[tuple[str, str], ...] = (
    ("cost_usd", "cost ($)"),
    ("replica_hours", "replica-h"),
    ("avoidable_replica_hours", "avoidable\nreplica-h"),
    ("allocation_failures", "alloc.\nfailures"),
    ("failures_at_high_free", "at >25 %\nfree"),
    ("ttft_p99_s", "TTFT\np99 (s)"),
    ("e2e_p99_s", "e2e\np99 (s)"),
)
"""(metric, column) of the terminal table, after ``run`` and ``rank``."""


def display_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[object]]]:
    """The terminal table of :func:`print_comparison`: ``run``, ``rank`` and a column per
    metric of :data:`DISPLAY`, each cell its value over its difference from the
    baseline's in percent (the difference itself where the baseline's is zero;
    ``base`` in the baseline's row)."""
    columns = ["run", "rank", *(label for _, label in DISPLAY)]
    rows: list[list[object]] = []
    for k, r in enumerate(frame.to_dict("records")):
        row: list[object] = [r["run"], Cell(int(r["rank"]), f"{int(r['rank'])}")]
        for metric, _ in DISPLAY:
            delta, pct = float(r[f"{metric}_delta"]), float(r[f"{metric}_delta_pct"])
            if k == 0:
                change = "base"
            elif math.isnan(pct) or delta == 0:
                change = delta_text(metric, delta, math.nan)
            elif abs(pct) < 0.05:
                change = "0.0 %"
            else:
                change = f"{'−' if pct < 0 else '+'}{abs(pct):.1f} %"
            row.append(Cell(r[metric], f"{formatted(metric, r[metric])}\n{change}"))
        rows.append(row)
    return columns, rows
