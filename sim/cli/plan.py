"""``fragsim plan SCENARIO --slo 'ttft_p99<=2s' --replicas 1..64 --vary allocator=paged,
best_fit -o OUT/``: per variant, the fewest replicas that meet every SLO, with
replica-hours, cost and each variant's cost over the cheapest's (``sim.sweep.plan``).
Runs go to ``OUT/runs/`` (a rerun reuses them); tables: ``OUT/plan.{parquet,csv}``,
``OUT/plan_points.parquet``, ``OUT/runs.parquet``.

stdout: the plan, one row per variant (``--format``; csv and json print every column
of ``plan.csv``). stderr: progress counting evaluations -- simulation runs, each
replica count tried times its replications -- against the most the search can need,
then the output path (also with ``--quiet``).

This module is the front (its options and their parsers); the work is
:func:`sim.cli.bodies.plan.run_plan` (:mod:`sim.cli.lazy`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
import yaml

from sim.cli import lazy
from sim.cli.output import FormatOption
from sim.cli.sweep import (
    QuietOption,
    SchedulerOption,
    WorkersOption,
)
from sim.fields import JsonValue


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


def parse_vary(text: str) -> tuple[str, list[JsonValue]]:
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
    lazy.call(
        "sim.cli.bodies.plan:run_plan",
        scenario=scenario,
        out=out,
        slo=slo,
        replicas=replicas,
        vary=vary,
        replications=replications,
        autoscale=autoscale,
        workers=workers,
        scheduler=scheduler,
        quiet=quiet,
        fmt=fmt,
    )
