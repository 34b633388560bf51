"""``fragsim alerts ...``: the fleet seed's alerts as Prometheus rules
(``export``), and evaluated over a written run (``show``).

Every user error (a bad scenario, run folder or option) prints one ``error: ...`` line
on stderr and exits with status 2; files are written atomically (nothing half-written).

``show`` prints, in ``--format``, one row per alert (its ``for:``, the episodes its
condition held, those that fired, replicas, first and last firing) -- or the
transitions themselves with ``--all`` / ``--limit N`` -- with times since the run's
start as ``2d 03:14:05`` (and in seconds in csv/json); ``-o FILE`` writes every
transition as CSV, ``time`` beside ``time_s``. Progress (reading, evaluating,
diagnosing) goes to stderr.

This module is the front (the sub-commands' options and help); their work is
:mod:`sim.cli.bodies.alerts` (:mod:`sim.cli.lazy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.alert_times import (
    RunScrapeOpt,
    RunWindowOpt,
    ShowScrapeOpt,
    ShowWindowOpt,
)
from sim.cli.output import FormatOption

alerts_app = typer.Typer(
    help="The seed's alerts: export Prometheus rules, evaluate them over a run.",
    no_args_is_help=True,
)


ForOpt = Annotated[
    float | None,
    typer.Option(
        "--for",
        help="Every gauge rule's for: (how long its condition must hold before it fires), "
        "seconds >= 0; default: each rule's own, the run's (its summary's fleet.alerts) "
        "or the shipped ones (docs/alerts.md).",
    ),
]

ScenarioOpt = Annotated[
    Path | None,
    typer.Option(
        "--scenario",
        "-s",
        help="Thresholds from this scenario's metrics block (a file or built-in name); "
        "default: the run's where a fleet run records them, else the seed's.",
    ),
]


@alerts_app.command("export")
def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Rules file to write (YAML).")],
    scenario: ScenarioOpt = None,
    scrape_interval_s: RunScrapeOpt = None,
    trend_window_s: RunWindowOpt = None,
    for_s: ForOpt = None,
    failure_window_s: Annotated[
        float | None,
        typer.Option(
            "--failure-window",
            help="The failure rule's increase() range, seconds (at least two scrape "
            "intervals); default: the --run's, else 300 or two scrape intervals if longer.",
        ),
    ] = None,
    runbook_url: Annotated[
        str,
        typer.Option(help="Each rule's runbook_url annotation; {alert} becomes its name."),
    ] = "https://runbooks.example.com/fragsim/{alert}",
    metrics: Annotated[
        str,
        typer.Option(help="Metric names: fragsim, or vllm (vLLM's where they exist)."),
    ] = "fragsim",
    instance_label: Annotated[
        str,
        typer.Option(help="The label naming a node: replica (fragsim's), pod or instance."),
    ] = "replica",
    tests: Annotated[
        Path | None,
        typer.Option(
            help="Also write promtool unit tests of the rules, generated from --run "
            "(promtool test rules FILE).",
        ),
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run", help="The run folder --tests are generated from.")
    ] = None,
) -> None:
    """Write the seed's alerts as a Prometheus alerting-rules file."""
    lazy.call(
        "sim.cli.bodies.alerts:export_rules",
        out=out,
        scenario=scenario,
        scrape_interval_s=scrape_interval_s,
        trend_window_s=trend_window_s,
        for_s=for_s,
        failure_window_s=failure_window_s,
        runbook_url=runbook_url,
        metrics=metrics,
        instance_label=instance_label,
        tests=tests,
        run_dir=run_dir,
    )


@alerts_app.command("show")
def show_command(
    run_dir: Annotated[Path, typer.Argument(help="A run's output folder (fragsim run -o).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Also write every transition as CSV (time, time_s)."),
    ] = None,
    scenario: ScenarioOpt = None,
    scrape_interval_s: ShowScrapeOpt = None,
    trend_window_s: ShowWindowOpt = None,
    for_s: ForOpt = None,
    fmt: FormatOption = "table",
    all_rows: Annotated[
        bool, typer.Option("--all", help="List every transition instead of one row per alert.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="List the first N transitions instead of one row per alert."),
    ] = None,
) -> None:
    """Evaluate the seed's alerts over a run, as Prometheus scraping it would: per alert,
    the episodes its condition held and those that held its for: and fired, and when
    (every transition with --all); then the diagnosis of the run's failed requests."""
    lazy.call(
        "sim.cli.bodies.alerts:show",
        run_dir=run_dir,
        out=out,
        scenario=scenario,
        scrape_interval_s=scrape_interval_s,
        trend_window_s=trend_window_s,
        for_s=for_s,
        fmt=fmt,
        all_rows=all_rows,
        limit=limit,
    )
