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
(:func:`sim.cli.alert_times.run_times`).
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sim.cli.alert_times import run_thresholds, run_times, run_timing
from sim.cli.common import fail
from sim.cli.export_grafana import write_dashboard
from sim.cli.output import echo_prose
from sim.cli.run_folder import check_not_an_input, checked_run, too_many_scrapes
from sim.errors import clip
from sim.fields import MAX_TOKENS
from sim.results.summary_model import MAX_INT64

if TYPE_CHECKING:
    from sim.results.summary_model import Summary
    from sim.telemetry.openmetrics_alerts import AlertInputs

SEED_HIGH_FREE_SHARE = 0.25
"""``sim.results.seed_alerts.AlertThresholds().high_free_share`` (a test holds them equal)."""

export_app = typer.Typer(
    help="Export a run's series in formats other tools read (OpenMetrics for Prometheus, a "
    "Grafana dashboard over them).",
    no_args_is_help=True,
)

DEFAULT_ORIGIN = "2024-01-01T00:00:00Z"
"""``sim.telemetry.openmetrics.DEFAULT_ORIGIN_S`` as the option writes it (a test holds
them equal)."""

NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "timeseries": (
        "time_s",
        "replica",
        "trigger",
        "up",
        "uptime_s",
        "capacity_tokens",
        "used_tokens",
        "free_tokens",
        "free_extent_count",
        "largest_free_extent_tokens",
        "largest_contiguous_free_block_ratio",
        "running_requests",
        "waiting_requests",
        "preemptions_total",
    ),
    "events": ("time_s", "replica", "kind", "free_share"),
    "fleet": ("time_s", "provisioning", "loading", "warming", "active", "draining", "down"),
}
"""The columns the export reads from each table: a run folder whose table lacks one is
refused by name (``sim.results.runfolder.check_run``), as is a fleet run without its
``fleet.parquet``, so no metric family is silently left out."""


def _check_bytes(kv_bytes_per_token: int | None, summary: Summary, path: Path) -> None:
    """Refuse KV bytes per token (``--kv-bytes-per-token``, else the summary's largest)
    whose product with the run's largest KV capacity (the summary's, else the most any
    run has) overflows the export's 64-bit bytes; the error names where it came from."""
    from sim.results.runfolder import capacity_bound

    capacity = capacity_bound(summary) or MAX_TOKENS
    if kv_bytes_per_token is not None:
        if kv_bytes_per_token * capacity > MAX_INT64:
            raise typer.BadParameter(
                f"got {kv_bytes_per_token:,}: times the run's {capacity:,} tokens of KV "
                "capacity it overflows 64-bit bytes",
                param_hint="--kv-bytes-per-token",
            )
        return
    pools = summary.fleet.pools if summary.fleet is not None else []
    for where, value in [
        ("kv_bytes_per_token", summary.kv_bytes_per_token),
        *(
            (f"fleet.pools.{i}.kv_bytes_per_token", p.kv_bytes_per_token)
            for i, p in enumerate(pools)
        ),
    ]:
        if value is not None and value * capacity > MAX_INT64:
            raise fail(
                f"{clip(str(path))}: field {where}: {value:,} bytes per token times "
                f"{capacity:,} tokens of KV capacity overflows 64-bit bytes"
            )


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


def _alert_inputs(
    summary: Summary, folder: Path, recorded: dict[str, float], high_free_share: float
) -> AlertInputs:
    """The run's alert thresholds (``high_free_share`` as exported) and ``for:``."""
    from sim.results.seed_alerts import THRESHOLD_FIELDS, AlertThresholds
    from sim.telemetry.openmetrics_alerts import AlertInputs

    known = {k: v for k, v in recorded.items() if k in THRESHOLD_FIELDS}
    thresholds = AlertThresholds(**(known | {"high_free_share": high_free_share}))
    return AlertInputs(thresholds, run_timing(summary, folder / "summary.json"))


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
    from sim.telemetry.openmetrics import kv_bytes_per_token_of, write_openmetrics
    from sim.telemetry.openmetrics_counters import TooManyScrapes
    from traces import TraceError
    from traces.atomic import atomic_path

    origin_s = parse_origin(origin)
    check_not_an_input(out, run_dir)
    folder, summary = checked_run(run_dir, NEEDED_COLUMNS)
    _check_bytes(kv_bytes_per_token, summary, folder / "summary.json")
    scrape_s, window_s, note = run_times(
        summary, folder / "summary.json", scrape_interval_s, trend_window_s
    )
    recorded = run_thresholds(summary) or {}
    if high_free_share is None:
        high_free_share = recorded.get("high_free_share", SEED_HIGH_FREE_SHARE)
    alert_inputs = _alert_inputs(summary, folder, recorded, high_free_share) if alerts else None
    try:
        with atomic_path(out) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as f:
            write_openmetrics(
                f,
                folder,
                summary,
                origin_s=origin_s,
                high_free_share=high_free_share,
                kv_bytes_per_token=kv_bytes_per_token,
                scrape_interval_s=scrape_s,
                trend_window_s=window_s,
                alerts=alert_inputs,
            )
    except TraceError as e:
        raise fail(str(e)) from None
    except TooManyScrapes as e:
        raise too_many_scrapes(
            str(e), scrape_interval_s, summary, folder / "summary.json"
        ) from None
    if kv_bytes_per_token is None and kv_bytes_per_token_of(summary) is None:
        echo_prose(
            f"note: {clip(str(folder / 'summary.json'))} records no KV bytes per token (a "
            "run written before fragsim recorded it): memory written in tokens only; pass "
            "--kv-bytes-per-token N (fragsim hardware shows it) to write bytes",
            err=True,
        )
    if note is not None:
        typer.echo(note, err=True)
    typer.echo(f"wrote {out}", err=True)


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
    if run_dir is not None:
        check_not_an_input(out, run_dir)
    write_dashboard(out, run_dir, parse_origin(origin))
