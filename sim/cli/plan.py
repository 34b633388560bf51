"""``fragsim plan SCENARIO --slo 'ttft_p99<=2s' --replicas 1..64 --vary allocator=paged,
best_fit -o OUT/``: per variant, the fewest replicas that meet every SLO, with
replica-hours, cost and each variant's cost over the cheapest's (``sim.sweep.plan``).
Runs go to ``OUT/runs/`` (a rerun reuses them); tables: ``OUT/plan.{parquet,csv}``,
``OUT/plan_points.parquet``, ``OUT/runs.parquet``."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
import yaml
from rich.console import Console
from rich.table import Table

from sim.cli import interrupt
from sim.cli.run import fail
from sim.cli.sweep import (
    QuietOption,
    SchedulerOption,
    WorkersOption,
    check_sweep_dir,
    note_kept,
    progress_bar,
)
from sim.errors import clip
from sim.scenario.schema import ScenarioError
from sim.sweep.slo import SloError, parse_slo
from traces.errors import TraceError


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
) -> None:
    """Find the fewest replicas meeting every SLO, per variant, and what each costs."""
    from sim.sweep.execute import Executor
    from sim.sweep.plan import check_plan, plan
    from sim.sweep.spec import load_base
    from sim.sweep.summary import write_frame

    try:
        slos = [parse_slo(s) for s in slo]
    except SloError as e:
        raise typer.BadParameter(str(e), param_hint="--slo") from None
    lo, hi = parse_range(replicas)
    axes = [parse_vary(v) for v in vary or []]
    source = clip(str(scenario))
    try:
        base = load_base(str(scenario), Path.cwd(), source)
        check_plan(base, axes, lo=lo, hi=hi, autoscale=autoscale, source=source)
    except ScenarioError as e:
        raise fail(str(e)) from None
    check_sweep_dir(out)
    try:
        with progress_bar(quiet, "plan") as update, Executor(out, workers, scheduler) as ex:
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
                progress=update,
            )
        write_frame(result.plan, out / "plan.parquet")
        write_frame(result.plan, out / "plan.csv")
        write_frame(result.points, out / "plan_points.parquet")
        write_frame(result.runs, out / "runs.parquet")
    except ScenarioError as e:
        raise fail(str(e)) from None
    except (TraceError, OSError) as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e}") from None
    except KeyboardInterrupt:
        note_kept(out)
        raise
    interrupt.note_written(clip(str(out)))
    if not quiet:
        Console().print(plan_table(result.plan, [p for p, _ in axes], f"plan ({', '.join(slo)})"))
        typer.echo(f"wrote {out}/ (plan.parquet, plan.csv, plan_points.parquet, runs.parquet)")
    unmet = result.plan[~result.plan["meets_slos"]]
    for _, row in unmet.iterrows():
        variant = ", ".join(f"{p}={row[p]}" for p, _ in axes) or "the scenario"
        typer.echo(
            f"no replica count up to {hi} meets {' and '.join(slo)} for {variant} "
            "(plan.csv: meets_slos false, replicas empty)",
            err=True,
        )
    if len(unmet):
        raise typer.Exit(1)


def plan_table(frame: pd.DataFrame, params: list[str], title: str) -> Table:
    """One row per variant: n*, points evaluated, replica-hours, cost, cost over the
    cheapest variant's."""
    t = Table(
        *(params or ["variant"]),
        "replicas",
        "evaluated",
        "replica-hours",
        "cost ($)",
        "vs cheapest",
        title=title,
    )
    for _, row in frame.iterrows():
        n = row["replicas"]
        cells = [str(row[p]) for p in params] or ["base"]
        vs = row["cost_vs_cheapest"]
        t.add_row(
            *cells,
            "none in range" if pd.isna(n) else str(int(n)),
            str(int(row["evaluated"])),
            _f(row["replica_hours_mean"]),
            _f(row["cost_usd_mean"]),
            "—" if math.isnan(vs) else f"{vs:+.1%}",
        )
    return t


def _f(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:,.2f}"
