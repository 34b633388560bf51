"""``fragsim export openmetrics RUN_DIR -o FILE``: a run's timeseries as OpenMetrics text
with timestamps, to backfill into a real Prometheus
(``promtool tsdb create-blocks-from openmetrics FILE DATA_DIR``); the format is
:mod:`sim.telemetry.openmetrics`'s.

A folder that is not a readable run, or a bad option, is one ``error: ...`` line and
exit status 2; the file is written atomically (nothing half-written). A run whose
summary records no KV bytes per token (written before fragsim recorded it) exports
without bytes, with one ``note: ...`` line on stderr naming ``--kv-bytes-per-token``.
The scrape interval and trend window are the run's (its summary's ``fleet.alerts``:
what its ``alerts.parquet`` was evaluated with); the flags override them; a fleet run
written before fragsim recorded them gets the defaults and one ``note: ...`` line
(:func:`sim.cli.alert_times.run_times`). ``fragsim export grafana``: the dashboard over
those series (:mod:`sim.cli.bodies.export_grafana`).

This module is the front (the sub-commands' options, ``--origin``'s parser); their work
is :mod:`sim.cli.bodies.export` (:mod:`sim.cli.lazy`).
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy

export_app = typer.Typer(
    help="Export a run's series in formats other tools read (OpenMetrics for Prometheus, a "
    "Grafana dashboard over them).",
    no_args_is_help=True,
)

DEFAULT_ORIGIN = "2024-01-01T00:00:00Z"
"""``sim.telemetry.openmetrics.DEFAULT_ORIGIN_S`` as the option writes it (a test holds
them equal)."""


def parse_origin(text: str) -> float:
    """``--origin``: an ISO 8601 instant (``2024-01-01T00:00:00Z``; a time zone is
    required) or Unix seconds -> Unix seconds."""
    try:
        value = float(text)
    except ValueError:
        value = _iso_seconds(text)
    if not (math.isfinite(value) and 0 <= value <= 253_402_300_799):
        raise typer.BadParameter(
            f"got {text!r}, expected an instant from 1970 to 9999", param_hint="--origin"
        )
    return value


def _iso_seconds(text: str) -> float:
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"got {text!r}, expected an ISO 8601 instant with a time zone "
            "(2024-01-01T00:00:00Z) or Unix seconds",
            param_hint="--origin",
        ) from None
    if instant.tzinfo is None:
        raise typer.BadParameter(
            f"got {text!r}: no time zone (write Z for UTC)", param_hint="--origin"
        )
    return instant.timestamp()


@export_app.command("openmetrics")
def openmetrics_command(
    run_dir: Annotated[Path, typer.Argument(help="A run's output folder (fragsim run -o).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="OpenMetrics text file to write.")],
    origin: Annotated[
        str,
        typer.Option(
            help="Wall-clock instant of simulated time 0 (ISO 8601 with a time zone, or "
            "Unix seconds)."
        ),
    ] = DEFAULT_ORIGIN,
    high_free_share: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Allocation failures count as 'at high free memory' above this free share; "
            "default: the run's (a fleet run records it), else the seed's 0.25.",
        ),
    ] = None,
    kv_bytes_per_token: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="KV bytes per token of a replica (all its GPUs), overriding what the "
            "run's summary records; needed for bytes from runs written before fragsim "
            "recorded it (fragsim hardware shows the per-GPU share).",
        ),
    ] = None,
    scrape_interval_s: Annotated[
        float | None,
        typer.Option(
            "--scrape-interval",
            help="Scrape interval of the counters and the uptime-correlation gauge, "
            "seconds (>= 1); default: the run's (its summary's fleet.alerts), else 30.",
        ),
    ] = None,
    trend_window_s: Annotated[
        float | None,
        typer.Option(
            "--trend-window",
            help="Window of the uptime-correlation gauge, seconds (>= the scrape "
            "interval); default: the run's, else 3600.",
        ),
    ] = None,
    alerts: Annotated[
        bool,
        typer.Option(
            help="Also write ALERTS and ALERTS_FOR_STATE as Prometheus's rules would have "
            "over the run (the run's thresholds and for:; docs/alerts.md).",
        ),
    ] = True,
) -> None:
    """Write a run's per-replica timeseries (and its fleet's replicas by state) as
    OpenMetrics text with timestamps, for promtool tsdb create-blocks-from openmetrics."""
    lazy.call(
        "sim.cli.bodies.export:openmetrics",
        run_dir=run_dir,
        out=out,
        origin=origin,
        high_free_share=high_free_share,
        kv_bytes_per_token=kv_bytes_per_token,
        scrape_interval_s=scrape_interval_s,
        trend_window_s=trend_window_s,
        alerts=alerts,
    )


@export_app.command("grafana")
def grafana_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Dashboard JSON file to write.")],
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run", help="A run's output folder: open on its span, draw its alert thresholds."
        ),
    ] = None,
    origin: Annotated[
        str,
        typer.Option(
            help="Wall-clock instant of simulated time 0, as given to export openmetrics "
            "(ISO 8601 with a time zone, or Unix seconds)."
        ),
    ] = DEFAULT_ORIGIN,
) -> None:
    """Write the fleet seed's Grafana dashboard (free memory vs largest free extent, the
    ratio, failures at high free memory, uptime, replicas by state, the alerts) as JSON
    for Grafana's Import dashboard, over export openmetrics' series."""
    lazy.call("sim.cli.bodies.export:grafana", out=out, run_dir=run_dir, origin=origin)
