"""The bodies of ``fragsim export openmetrics`` and ``fragsim export grafana`` (their
front, ``sim.cli.export``, states the contract): check the run folder and the options
against it, write the file atomically, and say what was written."""

from __future__ import annotations

from pathlib import Path

import typer

from sim.cli.alert_times import run_thresholds, run_times
from sim.cli.bodies.alert_timing import run_timing
from sim.cli.bodies.export_grafana import write_dashboard
from sim.cli.bodies.run_folder import check_not_an_input, checked_run, too_many_scrapes
from sim.cli.common import fail
from sim.cli.export import parse_origin
from sim.cli.output import echo_prose
from sim.errors import clip
from sim.fields import MAX_TOKENS
from sim.results.runfolder import capacity_bound
from sim.results.seed_alerts import THRESHOLD_FIELDS, AlertThresholds
from sim.results.summary_model import MAX_INT64, Summary
from sim.telemetry.openmetrics import kv_bytes_per_token_of, write_openmetrics
from sim.telemetry.openmetrics_alerts import AlertInputs
from sim.telemetry.openmetrics_counters import TooManyScrapes
from traces import TraceError
from traces.atomic import atomic_path

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


def _alert_inputs(
    summary: Summary, folder: Path, recorded: dict[str, float], high_free_share: float
) -> AlertInputs:
    """The run's alert thresholds (``high_free_share`` as exported) and ``for:``."""
    known = {k: v for k, v in recorded.items() if k in THRESHOLD_FIELDS}
    thresholds = AlertThresholds(**(known | {"high_free_share": high_free_share}))
    return AlertInputs(thresholds, run_timing(summary, folder / "summary.json"))


def openmetrics(
    *,
    run_dir: Path,
    out: Path,
    origin: str,
    high_free_share: float | None,
    kv_bytes_per_token: int | None,
    scrape_interval_s: float | None,
    trend_window_s: float | None,
    alerts: bool,
) -> None:
    """The work of ``sim.cli.export.openmetrics_command``, on the options it parsed."""
    origin_s = parse_origin(origin)
    check_not_an_input(out, run_dir)
    folder, summary = checked_run(run_dir, NEEDED_COLUMNS)
    _check_bytes(kv_bytes_per_token, summary, folder / "summary.json")
    scrape_s, window_s, note = run_times(
        summary, folder / "summary.json", scrape_interval_s, trend_window_s
    )
    recorded = run_thresholds(summary) or {}
    if high_free_share is None:
        high_free_share = recorded.get("high_free_share", AlertThresholds().high_free_share)
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


def grafana(*, out: Path, run_dir: Path | None, origin: str) -> None:
    """The work of ``sim.cli.export.grafana_command``, on the options it parsed."""
    if run_dir is not None:
        check_not_an_input(out, run_dir)
    write_dashboard(out, run_dir, parse_origin(origin))
