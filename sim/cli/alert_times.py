"""The scrape interval and trend window of the seed's alerts, for ``fragsim alerts`` and
``fragsim export openmetrics``: their bounds, their defaults, and a run's own (what its
``alerts.parquet`` was evaluated with, recorded in its summary's ``fleet.alerts``); its
rules' timing, which needs the alert engine, is the bodies'
(:func:`sim.cli.bodies.alert_timing.run_timing`).

Bad values are one ``error: ...`` line naming the option or the summary's field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sim.errors import clip

if TYPE_CHECKING:
    from sim.results.summary_model import Summary

MAX_SCRAPES = 5_000_000
"""The most scrape instants ``show`` evaluates per replica (a bound on its memory)."""
MAX_WINDOW_SCRAPES = 100_000
"""The most scrapes in the uptime-trend window."""
MAX_INTERVAL_S = 86_400.0 * 365
MIN_SCRAPE_INTERVAL_S = 1.0
"""``sim.scenario.fleet.MIN_SCRAPE_INTERVAL_S`` (a test holds them equal): the scrapes a
fleet's ``alerts.scrape_interval_s`` allows, read without importing the fleet."""
DEFAULT_SCRAPE_INTERVAL_S = 30.0
"""``sim.telemetry.alerts.DEFAULT_SCRAPE_INTERVAL_S`` (a test holds them equal): the option
defaults are read without importing the alert engine."""
DEFAULT_TREND_WINDOW_S = 3600.0
"""``sim.telemetry.alerts.DEFAULT_TREND_WINDOW_S`` (a test holds them equal)."""

ScrapeOpt = Annotated[
    float,
    typer.Option(
        "--scrape-interval",
        help="Prometheus scrape and rule-evaluation interval, seconds (>= 1, as a "
        "fleet's alerts.scrape_interval_s).",
    ),
]
WindowOpt = Annotated[
    float,
    typer.Option(
        "--trend-window",
        help="Window of the uptime-trend alert, seconds (>= the scrape interval).",
    ),
]
RunScrapeOpt = Annotated[
    float | None,
    typer.Option(
        "--scrape-interval",
        help="Prometheus scrape and rule-evaluation interval, seconds (>= 1); default: "
        "the --run's (its summary's fleet.alerts), else 30.",
    ),
]
RunWindowOpt = Annotated[
    float | None,
    typer.Option(
        "--trend-window",
        help="Window of the uptime-trend alert, seconds (>= the scrape interval); "
        "default: the --run's, else 3600.",
    ),
]
ShowScrapeOpt = Annotated[
    float | None,
    typer.Option(
        "--scrape-interval",
        help="Prometheus scrape and rule-evaluation interval, seconds (>= 1); default: "
        "the run's (its summary's fleet.alerts), else 30.",
    ),
]
ShowWindowOpt = Annotated[
    float | None,
    typer.Option(
        "--trend-window",
        help="Window of the uptime-trend alert, seconds (>= the scrape interval); "
        "default: the run's, else 3600.",
    ),
]


def check_times(scrape_interval_s: float, trend_window_s: float) -> None:
    low, high = MIN_SCRAPE_INTERVAL_S, MAX_INTERVAL_S
    if not (math.isfinite(scrape_interval_s) and low <= scrape_interval_s <= high):
        raise typer.BadParameter(
            f"got {scrape_interval_s:g}, expected seconds in [{low:g}, {high:g}] (at least "
            f"{low:g} s, as a fleet's alerts.scrape_interval_s)",
            param_hint="--scrape-interval",
        )
    if not (math.isfinite(trend_window_s) and trend_window_s >= scrape_interval_s):
        raise typer.BadParameter(
            f"got {trend_window_s:g}, expected seconds >= the scrape interval",
            param_hint="--trend-window",
        )
    if trend_window_s / scrape_interval_s > MAX_WINDOW_SCRAPES:
        raise typer.BadParameter(
            f"got {trend_window_s:g}: more than {MAX_WINDOW_SCRAPES:,} scrapes in the window",
            param_hint="--trend-window",
        )


def run_times(
    summary: Summary | None,
    path: Path,
    scrape_interval_s: float | None,
    trend_window_s: float | None,
) -> tuple[float, float, str | None]:
    """The scrape interval and trend window for a run whose ``summary`` (read from
    ``path``) is given: the flags where given, else what the summary records
    (``fleet.alerts``: what its alerts.parquet was evaluated with), else the defaults;
    and the ``note: ...`` line to print once the command succeeds for a fleet run
    written before fragsim recorded them (None otherwise: a single replica's run has no
    alerts, the defaults apply; nor does no run, None). Checked by :func:`check_times` (the summary's own
    values were checked as it was read)."""
    fleet = None if summary is None else summary.fleet
    recorded = fleet.alerts if fleet is not None else None
    chosen = []
    for given, value, default in (
        (
            scrape_interval_s,
            None if recorded is None else recorded.scrape_interval_s,
            DEFAULT_SCRAPE_INTERVAL_S,
        ),
        (
            trend_window_s,
            None if recorded is None else recorded.trend_window_s,
            DEFAULT_TREND_WINDOW_S,
        ),
    ):
        if given is not None:
            value = given
        elif value is None:
            value = default
        chosen.append(float(value))
    if trend_window_s is None:  # a default or recorded window spans at least one scrape
        chosen[1] = max(chosen[1], chosen[0])
    check_times(chosen[0], chosen[1])
    if fleet is None or recorded is not None:
        return chosen[0], chosen[1], None
    missing = [
        flag
        for given, flag in (
            (scrape_interval_s, "--scrape-interval"),
            (trend_window_s, "--trend-window"),
        )
        if given is None
    ]
    note = (
        f"note: {clip(str(path))} records no alert scrape interval or trend window (a run "
        f"written before fragsim recorded them): {chosen[0]:g} s and {chosen[1]:g} s; pass "
        f"{' / '.join(missing)} if its alerts used others (the scenario's "
        "fleet.alerts.scrape_interval_s)"
    )
    return chosen[0], chosen[1], note if missing else None


def run_thresholds(summary: Summary | None) -> dict[str, float] | None:
    """The alert thresholds a fleet run's ``alerts.parquet`` was evaluated with (its
    summary's ``fleet.alerts.thresholds``, by :data:`sim.results.seed_alerts.THRESHOLD_FIELDS`
    name), or None where the run records none (a single replica's run, a folder written
    before fragsim recorded them, no run); shares in [0, 1], checked as the summary was read."""
    fleet = None if summary is None else summary.fleet
    recorded = fleet.alerts if fleet is not None else None
    if recorded is None or recorded.thresholds is None:
        return None
    return {str(k): float(v) for k, v in recorded.thresholds.items()}
