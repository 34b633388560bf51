"""The scrape interval and trend window of the seed's alerts, for ``fragsim alerts`` and
``fragsim export openmetrics``: their bounds, their defaults, and a run's own (what its
``alerts.parquet`` was evaluated with, recorded in its summary's ``fleet.alerts``).

Bad values are one ``error: ...`` line naming the option or the summary's field."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sim.cli.common import fail
from sim.errors import clip

if TYPE_CHECKING:
    from sim.telemetry.alert_states import RuleTiming

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
    summary: dict[str, Any],
    path: Path,
    scrape_interval_s: float | None,
    trend_window_s: float | None,
) -> tuple[float, float, str | None]:
    """The scrape interval and trend window for a run whose ``summary`` (read from
    ``path``) is given: the flags where given, else what the summary records
    (``fleet.alerts``: what its alerts.parquet was evaluated with), else the defaults;
    and the ``note: ...`` line to print once the command succeeds for a fleet run
    written before fragsim recorded them (None otherwise: a single replica's run has no
    alerts, the defaults apply). Checked by :func:`check_times`; a recorded value that
    is not a number is one error line."""
    fleet = summary.get("fleet")
    recorded = fleet.get("alerts") if isinstance(fleet, dict) else None
    chosen = []
    for given, key, default in (
        (scrape_interval_s, "scrape_interval_s", DEFAULT_SCRAPE_INTERVAL_S),
        (trend_window_s, "trend_window_s", DEFAULT_TREND_WINDOW_S),
    ):
        value = recorded.get(key) if isinstance(recorded, dict) else None
        if given is not None:
            value = given
        elif value is None:
            value = default
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise fail(f"{clip(str(path))}: field fleet.alerts.{key}: expected seconds")
        chosen.append(float(value))
    if trend_window_s is None:  # a default or recorded window spans at least one scrape
        chosen[1] = max(chosen[1], chosen[0])
    check_times(chosen[0], chosen[1])
    if not isinstance(fleet, dict) or isinstance(recorded, dict):
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


def run_thresholds(summary: dict[str, Any], path: Path) -> dict[str, float] | None:
    """The alert thresholds a fleet run's ``alerts.parquet`` was evaluated with (its
    summary's ``fleet.alerts.thresholds``, by :data:`sim.results.seed_alerts.THRESHOLD_FIELDS`
    name), or None where the run records none (a single replica's run, a folder written
    before fragsim recorded them). A recorded value that is not a number in [0, 1] is one
    error line naming the field."""
    fleet = summary.get("fleet")
    recorded = fleet.get("alerts") if isinstance(fleet, dict) else None
    found = recorded.get("thresholds") if isinstance(recorded, dict) else None
    if not isinstance(found, dict):
        return None
    values: dict[str, float] = {}
    for key, value in found.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not (0.0 <= float(value) <= 1.0):
            raise fail(
                f"{clip(str(path))}: field fleet.alerts.thresholds.{key}: expected a number "
                "in [0, 1]"
            )
        values[str(key)] = float(value)
    return values


def run_timing(summary: dict[str, Any], path: Path) -> RuleTiming:
    """Each rule's ``for:`` and the failure window a fleet run's ``alerts.parquet`` was
    evaluated with (its summary's ``fleet.alerts.for_s`` / ``failure_window_s``), the
    shipped ones (:data:`sim.telemetry.alert_states.SHIPPED_FOR_S`) where it records none.
    A recorded value that is not seconds >= 0 (or an unknown alert) is one error line
    naming the field."""
    from sim.telemetry.alert_states import DEFAULT_FAILURE_WINDOW_S, RuleTiming

    fleet = summary.get("fleet")
    recorded = fleet.get("alerts") if isinstance(fleet, dict) else None
    if not isinstance(recorded, dict):
        return RuleTiming()
    where = f"{clip(str(path))}: field fleet.alerts"
    found = recorded.get("for_s", {})
    window = recorded.get("failure_window_s", DEFAULT_FAILURE_WINDOW_S)
    for key, value in [*(found.items() if isinstance(found, dict) else []), ("", window)]:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not (math.isfinite(value) and value >= 0):
            field = f"for_s.{key}" if key else "failure_window_s"
            raise fail(f"{where}.{field}: expected seconds >= 0")
    if not isinstance(found, dict):
        raise fail(f"{where}.for_s: expected seconds by alert name")
    try:
        return RuleTiming({str(k): float(v) for k, v in found.items()}, float(window))
    except ValueError as e:
        raise fail(f"{where}.for_s: {e}") from None
