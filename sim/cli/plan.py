"""``fragsim plan SCENARIO --slo 'ttft_p99<=2s' --replicas 1..64 --vary allocator=paged,
best_fit -o OUT/``: per variant, the fewest replicas that meet every SLO, with
replica-hours, cost and each variant's cost over the cheapest's (``sim.sweep.plan``).
Runs go to ``OUT/runs/`` (a rerun reuses them); tables: ``OUT/plan.{parquet,csv}``,
``OUT/plan_points.parquet``, ``OUT/runs.parquet``.

stdout: the plan, one row per variant (``--format``; csv and json print every column
of ``plan.csv``). stderr: progress counting evaluations -- simulation runs, each
replica count tried times its replications -- against the most the search can need,
then the output path (also with ``--quiet``)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from sim.cli import interrupt
from sim.cli.common import fail
from sim.cli.output import Cell, FormatOption, echo_prose, print_table
from sim.cli.progress import progress
from sim.cli.sweep import (
    QuietOption,
    SchedulerOption,
    WorkersOption,
    check_sweep_dir,
    note_kept,
    param_cell,
    variant_columns,
)
from sim.errors import clip

if TYPE_CHECKING:
    import pandas as pd

    from sim.sweep.execute import Executor, Outcome, Progress, Task


def parse_range(text: str) -> tuple[int, int]:
    """``LO..HI`` (or one number) -> (lo, hi), 1 <= lo <= hi <= 4096."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if match is None:
        raise typer.BadParameter(f"got {text!r}, expected LO..HI (1..64)", param_hint="--replicas")
    lo = int(match.group(1))
    hi = int(match.group(2) or lo)
    if not 1 <= lo <= hi <= 4096:
        raise typer.BadParameter(
            f"got {text!r}, expected 1 <= LO <= HI <= 4096", param_hint="--replicas"
        )
    return lo, hi


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``PATH=V1,V2,...``; each value read as YAML (``4`` a number, ``true`` a flag)."""
    path, sep, values = text.partition("=")
    path = path.strip()
    if not sep or not path or not values.strip():
        raise typer.BadParameter(f"got {text!r}, expected PATH=V1,V2", param_hint="--vary")
    try:
        parsed = [yaml.safe_load(v.strip()) for v in values.split(",")]
    except yaml.YAMLError:
        raise typer.BadParameter(f"{text!r}: a value is not YAML", param_hint="--vary") from None
    return path, parsed


def plan_command(
    scenario: Annotated[Path, typer.Argument(help="Scenario file or built-in name.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    slo: Annotated[
        list[str],
        typer.Option(help="An SLO, METRIC OP VALUE: 'ttft_p99<=2s', 'failure_rate<=0.001'."),
    ],
    replicas: Annotated[str, typer.Option(help="Replica counts to search: LO..HI.")] = "1..64",
    vary: Annotated[
        list[str] | None, typer.Option(help="A variant axis: PATH=V1,V2 (repeatable).")
    ] = None,
    replications: Annotated[
        int, typer.Option(min=1, max=100, help="Seeds per point; all must meet the SLOs.")
    ] = 1,
    autoscale: Annotated[
        bool, typer.Option(help="Keep the autoscaler, with the count as its floor.")
    ] = False,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    quiet: QuietOption = False,
    fmt: FormatOption = "table",
) -> None:
    """Find the fewest replicas meeting every SLO, per variant, and what each costs."""
    from sim.scenario.schema import ScenarioError
    from sim.sweep.plan import PlanError, check_axes, check_plan, check_plan_size, plan
    from sim.sweep.slo import SloError, check_slos, parse_slo
    from sim.sweep.spec import load_base
    from sim.sweep.summary import write_frames
    from traces.errors import TraceError

    try:
        slos = [parse_slo(s) for s in slo]
        check_slos(slos)
    except SloError as e:
        raise typer.BadParameter(str(e), param_hint="--slo") from None
    lo, hi = parse_range(replicas)
    axes = [parse_vary(v) for v in vary or []]
    try:
        check_axes(axes, autoscale=autoscale)
        most = check_plan_size(axes, lo=lo, hi=hi, replications=replications)
    except PlanError as e:
        raise fail(str(e)) from None
    source = clip(str(scenario))
    try:
        base = load_base(str(scenario), Path.cwd(), source)
        check_plan(base, axes, lo=lo, hi=hi, autoscale=autoscale, source=source)
    except ScenarioError as e:
        raise fail(str(e)) from None
    check_sweep_dir(out)
    try:
        with (
            progress("plan", most, what="evaluations", amounts=_at_most, quiet=quiet) as p,
            counting_executor(out, workers, scheduler, p) as ex,
        ):
            result = plan(
                base,
                slos,
                axes,
                ex,
                lo=lo,
                hi=hi,
                replications=replications,
                autoscale=autoscale,
                source=source,
            )
            p.update(p.done, total=p.done)  # the search is over: nothing more to run
        write_frames(
            {
                out / "plan.parquet": result.plan,
                out / "plan.csv": result.plan,
                out / "plan_points.parquet": result.points,
                out / "runs.parquet": result.runs,
            }
        )
    except ScenarioError as e:
        raise fail(str(e)) from None
    except (TraceError, OSError) as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e}") from None
    except KeyboardInterrupt:
        note_kept(out)
        raise
    interrupt.note_written(clip(str(out)))
    if not quiet:
        print_plan(result.plan, [path for path, _ in axes], f"plan ({', '.join(slo)})", fmt)
    typer.echo(
        f"wrote {out}/ (plan.parquet, plan.csv, plan_points.parquet, runs.parquet)", err=True
    )
    unmet = result.plan[~result.plan["meets_slos"]]
    for _, row in unmet.iterrows():
        variant = ", ".join(f"{p}={row[p]}" for p, _ in axes) or "the scenario"
        echo_prose(
            f"no replica count up to {hi} meets {' and '.join(slo)} for {variant} "
            "(plan.csv: meets_slos false, replicas empty)",
            err=True,
        )
    if len(unmet):
        raise typer.Exit(1)


def _at_most(done: float, total: float | None) -> str:
    if total is None:
        return f"{done:,.0f}"
    return f"{done:,.0f} of {'at most ' if done < total else ''}{total:,.0f}"


def counting_executor(out: Path, workers: int | None, scheduler: str | None, p: Any) -> Executor:
    """An executor whose every run of tasks reports to ``p`` the runs done over the
    whole search (the search calls it once per round of replica counts)."""
    from sim.sweep.execute import Executor

    class Counting(Executor):
        finished = 0
        failed = 0

        def run(self, tasks: Sequence[Task], progress: Progress | None = None) -> list[Outcome]:
            def relay(done: int, running: int, failed: int, total: int) -> None:
                n = self.finished + self.failed + done + failed
                p.update(n, note=f"{running} running, {self.failed + failed} failed")

            outcomes = super().run(tasks, relay)
            bad = sum(1 for o in outcomes if o.summary is None)
            self.finished += len(outcomes) - bad
            self.failed += bad
            return outcomes

    return Counting(out, workers, scheduler)


def print_plan(frame: pd.DataFrame, params: list[str], title: str, fmt: str) -> None:
    """One row per variant (``path=value, ...``): the fewest replicas meeting the SLOs,
    the counts evaluated, replica-hours, cost and cost over the cheapest variant's;
    with ``csv``/``json`` every column of ``plan.csv``."""
    import pandas as pd

    if fmt in ("csv", "json"):
        print_table(None, list(frame.columns), frame.astype(object).to_numpy().tolist(), fmt)
        return
    rows = []
    for _, row in frame.iterrows():
        n = row["replicas"]
        vs = row["cost_vs_cheapest"]
        rows.append(
            (
                *([param_cell(row[p]) for p in params] or ["the scenario"]),
                Cell(
                    None if pd.isna(n) else int(n), "none in range" if pd.isna(n) else str(int(n))
                ),
                int(row["evaluated"]),
                Cell(row["replica_hours_mean"], _f(row["replica_hours_mean"])),
                Cell(row["cost_usd_mean"], _f(row["cost_usd_mean"])),
                Cell(vs, "—" if math.isnan(vs) else f"{vs:+.1%}"),
            )
        )
    keys = variant_columns(params)
    columns = (*keys, "replicas", "counts tried", "replica-hours", "cost ($)", "vs cheapest")
    print_table(title, columns, rows, fmt, keys=len(keys))


def _f(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:,.2f}"
