"""``fragsim compare SCENARIO... -o OUT/``: run a set of scenarios (built-in names or
files), write each run under ``OUT/NAME/``, and print one table (also written as
``OUT/compare.csv`` and ``OUT/compare.parquet``): failures, failures at high free
memory, replicas over time, replica-hours, avoidable replica-hours, cost, p99 TTFT and
end-to-end latency."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from sim.cli.report import write_report_of
from sim.cli.run import check_output_dir, fail, prepare, simulate, write_results
from sim.fleet.compare import compare_frame, comparison_table
from sim.scenario.schema import Scenario, ScenarioError
from traces.errors import TraceError
from traces.writers import atomic_path


def _run_one(scenario: Scenario, out: str) -> dict[str, Any]:
    """A worker's run: the workload is loaded again there (a scenario pickles small)."""
    from sim.runner import run
    from sim.scenario.workload import load_workload

    result = run(scenario, load_workload(scenario))
    result.write(out)
    return result.summary


def compare_command(
    scenarios: Annotated[
        list[Path], typer.Argument(help="Scenario files or built-in names (fragsim scenarios).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    seed: Annotated[int | None, typer.Option(min=0, help="Override every scenario's seed.")] = None,
    jobs: Annotated[int, typer.Option(min=1, max=256, help="Runs at once (processes).")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or table.")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="No OUT/report.html.")] = False,
) -> None:
    """Run SCENARIO... and compare them in one table (each run written to OUT/NAME/)."""
    prepared = [prepare(path, seed=seed) for path in scenarios]
    names = _names([s.name for s, *_ in prepared])
    for name in names:
        check_output_dir(out / name)
    check_output_dir(out / "compare")  # the folder itself must be writable
    summaries: list[dict[str, Any]] = []
    if jobs == 1 or len(prepared) == 1:
        for (scenario, requests, parts, source), name in zip(prepared, names, strict=True):
            try:
                result = simulate(scenario, requests, quiet=quiet, parts=parts)
            except ScenarioError as e:
                raise fail(str(e), source) from None
            write_results(result, out / name)
            summaries.append(result.summary)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(prepared))) as pool:
            futures = [
                pool.submit(_run_one, scenario, str(out / name))
                for (scenario, *_), name in zip(prepared, names, strict=True)
            ]
            summaries = [f.result() for f in futures]
    frame = compare_frame(summaries)
    for name, write in (("compare.csv", frame.to_csv), ("compare.parquet", frame.to_parquet)):
        try:
            with atomic_path(out / name) as tmp:
                write(tmp, index=False)
        except TraceError as e:
            raise fail(str(e)) from None
    report = None if no_report else write_report_of([out / n for n in names], out / "report.html")
    if not quiet:
        Console().print(comparison_table(frame))
        typer.echo(f"wrote {out}/ ({', '.join(names)}, compare.csv, compare.parquet)")
        if report is not None:
            typer.echo(f"report: {report}")


def _names(names: list[str]) -> list[str]:
    """Run folder names: each scenario's name, ``-2``, ``-3``... on repeats."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "scenario"
        seen[safe] = seen.get(safe, 0) + 1
        out.append(safe if seen[safe] == 1 else f"{safe}-{seen[safe]}")
    return out
