"""``fragsim run SCENARIO -o OUT/`` and ``fragsim scenarios``: the fronts (options, help,
the checks made before the engine loads); ``run``'s work is
:func:`sim.cli.bodies.run.run`, loaded when the command runs (:mod:`sim.cli.lazy`), so
that ``fragsim run --help`` and a missing scenario file answer in well under a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.common import check_scenario_exists
from sim.cli.output import FormatOption, print_table
from sim.errors import short
from sim.fields import MAX_SEED
from sim.scenario.builtin import builtin_names, describe_builtin, resolve_scenario


def run_command(
    scenario_path: Annotated[
        Path,
        typer.Argument(
            help="Scenario YAML file, or the name of a built-in scenario (fragsim scenarios)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    seed: Annotated[
        int | None, typer.Option(min=0, max=MAX_SEED, help="Override the scenario's seed.")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="Override the mode: fast or exact.")] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress or table (the output path still)."),
    ] = False,
    fmt: FormatOption = "table",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the whole summary.json instead of the table.")
    ] = False,
    report: Annotated[
        bool, typer.Option("--report/--no-report", help="Also write OUT/report.html.")
    ] = True,
) -> None:
    """Simulate SCENARIO and write its results to OUT/.

    OUT/ gets requests/timeseries/events Parquet and summary.json (a fleet's
    fleet/alerts Parquet too) and report.html (unless --no-report). stdout: the summary
    table (--format) or summary.json (--json); stderr: progress and the output path."""
    if mode is not None and mode not in ("fast", "exact"):
        raise typer.BadParameter(f"got {short(mode)}, expected fast or exact", param_hint="--mode")
    check_scenario_exists(resolve_scenario(scenario_path))  # before the engine loads
    lazy.call(
        "sim.cli.bodies.run:run",
        scenario_path=scenario_path,
        out=out,
        seed=seed,
        mode=mode,
        quiet=quiet,
        fmt=fmt,
        json_out=json_out,
        report=report,
    )


def scenarios_command(fmt: FormatOption = "table") -> None:
    """List the built-in scenarios (run any of them by name)."""
    rows = [(name, describe_builtin(name)) for name in builtin_names()]
    print_table("built-in scenarios", ("name", "what it models"), rows, fmt)
