"""The body of ``fragsim demo`` (its front: ``sim.cli.demo``): the fleet seed's worked
example, its paged counterfactual and a daily-restart mitigation, simulated, then
written together (OUT/NAME/ per run and OUT/report.html, swapped in whole, or nothing)
and compared."""

from __future__ import annotations

from pathlib import Path

from sim.cli import interrupt
from sim.cli.bodies.run import prepare, print_summary, simulate
from sim.cli.bodies.run_folder import check_output_dir
from sim.cli.common import fail, say_written
from sim.cli.output import Cell, print_table
from sim.errors import clip
from sim.results.compare import COLUMNS, compare_frame, formatted
from sim.results.io import RunResult, check_owned_folder
from sim.scenario.builtin import DEMO
from traces.atomic import staged
from traces.errors import TraceError


def demo(*, out: Path, no_report: bool, quiet: bool, fmt: str) -> None:
    """``fragsim demo``: simulate the three runs, write them together, print each
    summary and the comparison."""
    _check_demo_out(out)
    results = []
    for name in DEMO:
        scenario, requests, parts, _ = prepare(Path(name))
        result = simulate(scenario, requests, quiet=quiet, parts=parts)
        if not quiet and fmt in ("table", "markdown"):
            print_summary(result.summary, fmt)
        results.append(result)
    html = _write_demo(out, results, report=not no_report)
    frame = compare_frame([r.summary for r in results])
    rows = [
        (label, *(Cell(v, formatted(column, v)) for v in frame[column].tolist()))
        for column, label in COLUMNS[1:]
    ]
    if not quiet:
        print_table("comparison", ("metric", *DEMO), rows, fmt)
    say_written(out, [*DEMO], html)


def check_demo_dir(out: Path) -> None:
    """Raise (FileExistsError) unless ``out`` is absent, empty, or an earlier demo's
    folder (run folders holding only a run's files, ``report.html``): the demo replaces
    it whole, so nothing fragsim did not write there is ever lost."""
    check_owned_folder(out, "the demo", files=frozenset({"report.html"}))


def _check_demo_out(out: Path) -> None:
    """Fail before simulating when ``out`` may not become (or replace) a demo folder."""
    try:
        check_demo_dir(out)
    except FileExistsError as e:
        raise fail(str(e)) from None
    check_output_dir(out / DEMO[0])  # its parents and file system accept a new folder


def _write_demo(out: Path, results: list[RunResult], *, report: bool) -> Path | None:
    """The demo's runs (``OUT/NAME/``) and report, staged in a hidden sibling of ``out``
    and swapped in together, or nothing (errors name ``out``, never the stage)."""
    stage = out
    try:
        with staged() as outputs:
            stage = outputs.folder(out, check_demo_dir)
            for name, result in zip(DEMO, results, strict=True):
                result.write(stage / name)
            if report:
                from reports import ReportError, write_report

                try:
                    write_report([stage / n for n in DEMO], stage / "report.html")
                except ReportError as e:
                    raise fail(clip(str(e).replace(str(stage), str(out)))) from None
            outputs.commit(on_commit=lambda: interrupt.note_written(clip(str(out))))
    except TraceError as e:
        raise fail(clip(str(e).replace(str(stage), str(out)))) from None
    except OSError as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e.strerror or e}") from None
    return out / "report.html" if report else None
