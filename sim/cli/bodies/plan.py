"""The body of ``fragsim plan`` (its front, ``sim.cli.plan``, states the contract): check
the SLOs, the replica range, the variant axes and the base scenario, search each
variant for its fewest replicas with progress counting evaluations, write the tables
and print the plan."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import typer

from sim.cli import interrupt
from sim.cli.bodies.sweep import check_sweep_dir, note_kept, param_cell, variant_columns
from sim.cli.common import fail
from sim.cli.output import Cell, echo_prose, print_table
from sim.cli.plan import parse_range, parse_vary
from sim.cli.progress import Progress as ProgressDisplay
from sim.cli.progress import progress
from sim.errors import clip
from sim.scenario.schema import ScenarioError
from sim.sweep.execute import Executor, Outcome, Progress, Task
from sim.sweep.plan import PlanError, check_axes, check_plan, check_plan_size, plan
from sim.sweep.slo import SloError, check_slos, parse_slo
from sim.sweep.spec import load_base
from sim.sweep.summary import write_frames
from traces.errors import TraceError


def run_plan(
    *,
    scenario: Path,
    out: Path,
    slo: list[str],
    replicas: str,
    vary: list[str] | None,
    replications: int,
    autoscale: bool,
    workers: int | None,
    scheduler: str | None,
    quiet: bool,
    fmt: str,
) -> None:
    """The work of ``sim.cli.plan.plan_command``, on the options it parsed."""
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


def counting_executor(
    out: Path, workers: int | None, scheduler: str | None, p: ProgressDisplay
) -> Executor:
    """An executor whose every run of tasks reports to ``p`` the runs done over the
    whole search (the search calls it once per round of replica counts)."""

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
