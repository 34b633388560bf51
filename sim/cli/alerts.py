"""``fragsim alerts ...``: the fleet seed's alerts as Prometheus rules
(``export``), and evaluated over a written run (``show``).

Every user error (a bad scenario, run folder or option) prints one ``error: ...`` line
on stderr and exits with status 2; files are written atomically (nothing half-written).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.cli.run import fail
from sim.errors import clip, os_error_line
from sim.fleet.alerts import (
    ALERTS,
    DEFAULT_SCRAPE_INTERVAL_S,
    DEFAULT_TREND_WINDOW_S,
    diagnose_failures,
    evaluate_alerts,
)
from sim.results.seed_alerts import AlertThresholds

alerts_app = typer.Typer(
    help="The seed's alerts: export Prometheus rules, evaluate them over a run.",
    no_args_is_help=True,
)

MAX_SCRAPES = 5_000_000
"""The most scrape instants ``show`` evaluates per replica (a bound on its memory)."""
MAX_WINDOW_SCRAPES = 100_000
"""The most scrapes in the uptime-trend window."""
MAX_INTERVAL_S = 86_400.0 * 365

ScenarioOpt = Annotated[
    Path | None,
    typer.Option(
        "--scenario",
        "-s",
        help="Thresholds from this scenario's metrics block (a file or built-in name); "
        "default: the seed's thresholds.",
    ),
]
ScrapeOpt = Annotated[
    float,
    typer.Option(
        "--scrape-interval",
        help="Prometheus scrape and rule-evaluation interval, seconds (>= 0.001).",
    ),
]
WindowOpt = Annotated[
    float,
    typer.Option(
        "--trend-window",
        help="Window of the uptime-trend alert, seconds (>= the scrape interval).",
    ),
]


def _thresholds(scenario: Path | None) -> AlertThresholds:
    if scenario is None:
        return AlertThresholds()
    from sim.scenario.builtin import resolve_scenario
    from sim.scenario.schema import ScenarioError, load_scenario

    source = resolve_scenario(scenario)
    try:
        return load_scenario(source).metrics.thresholds()
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None


def _check_times(scrape_interval_s: float, trend_window_s: float) -> None:
    if not (math.isfinite(scrape_interval_s) and 1e-3 <= scrape_interval_s <= MAX_INTERVAL_S):
        raise typer.BadParameter(
            f"got {scrape_interval_s:g}, expected seconds in [0.001, {MAX_INTERVAL_S:g}]",
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


def _write(path: Path, write: Callable[[Path], object]) -> None:
    """Run ``write(tmp)`` on a temporary beside ``path``, moved into place on success."""
    from traces import TraceError
    from traces.writers import atomic_path

    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except TraceError as e:
        raise fail(str(e)) from None


@alerts_app.command("export")
def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Rules file to write (YAML).")],
    scenario: ScenarioOpt = None,
    scrape_interval_s: ScrapeOpt = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: WindowOpt = DEFAULT_TREND_WINDOW_S,
) -> None:
    """Write the seed's alerts as a Prometheus alerting-rules file."""
    from sim.fleet.prometheus import alert_rules, rules_yaml

    _check_times(scrape_interval_s, trend_window_s)
    text = rules_yaml(alert_rules(_thresholds(scenario), scrape_interval_s, trend_window_s))
    _write(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    typer.echo(f"wrote {len(ALERTS)} alerting rules to {out}")


@alerts_app.command("show")
def show_command(
    run_dir: Annotated[Path, typer.Argument(help="A run's output folder (fragsim run -o).")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Also write the alert log as CSV.")
    ] = None,
    scenario: ScenarioOpt = None,
    scrape_interval_s: ScrapeOpt = DEFAULT_SCRAPE_INTERVAL_S,
    trend_window_s: WindowOpt = DEFAULT_TREND_WINDOW_S,
) -> None:
    """Evaluate the seed's alerts over a run, as Prometheus scraping it would, and list
    when each fired and resolved; then the diagnosis of its failed requests."""
    import pandas as pd

    from sim.results.io import read_result

    _check_times(scrape_interval_s, trend_window_s)
    thresholds = _thresholds(scenario)
    _check_run_dir(run_dir)
    try:
        result = read_result(run_dir)
        ts, events, requests = result.timeseries, result.events, result.requests
        span_s = float(ts["time_s"].max() - ts["time_s"].min()) if len(ts) else 0.0
    except (OSError, ValueError, KeyError) as e:
        raise fail(f"{clip(str(run_dir))}: not a readable fragsim run: {_reason(e)}") from None
    if span_s / scrape_interval_s > MAX_SCRAPES:
        raise typer.BadParameter(
            f"got {scrape_interval_s:g}: the run's {span_s:g} s would be more than "
            f"{MAX_SCRAPES:,} scrapes",
            param_hint="--scrape-interval",
        )
    try:
        log = evaluate_alerts(
            ts,
            events,
            scrape_interval_s=scrape_interval_s,
            thresholds=thresholds,
            trend_window_s=trend_window_s,
        )
        diagnosis = diagnose_failures(requests, events, thresholds)
    except KeyError as e:
        raise fail(f"{clip(str(run_dir))}: not a fragsim run: missing column {e}") from None
    if out is not None:
        _write(out, lambda tmp: log.to_csv(tmp, index=False))
    console = Console()
    console.print(_table(log, run_dir))
    for spec in ALERTS:
        if (log["alert"] == spec.name).any():
            console.print(f"{spec.name}: {spec.response}", markup=False, highlight=False)
    counts = pd.Series(diagnosis["diagnosis"]).value_counts().sort_index()
    shown = ", ".join(f"{name}: {n:,}" for name, n in counts.items())
    high = int(diagnosis["at_high_free_memory"].sum())
    share = f"{thresholds.high_free_share:.0%}"
    console.print(
        f"failed requests: {len(diagnosis):,}"
        + (
            f" (by diagnosis: {shown}); overlapping that split, {high:,} of them failed at "
            f"> {share} free memory (any diagnosis)"
            if len(diagnosis)
            else ""
        ),
        markup=False,
        highlight=False,
    )
    if out is not None:
        typer.echo(f"wrote {len(log):,} alert log rows to {out}")


def _check_run_dir(run_dir: Path) -> None:
    """Fail unless ``run_dir`` is a folder holding a run's files."""
    from sim.results.io import FILES

    try:
        if not run_dir.is_dir():
            raise fail(f"{clip(str(run_dir))}: no such run folder (fragsim run -o writes one)")
        missing = [name for name in FILES if not (run_dir / name).is_file()]
    except OSError as e:
        raise fail(os_error_line(e)) from None
    if missing:
        raise fail(f"{clip(str(run_dir))}: not a fragsim run: missing {', '.join(missing)}")


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError):
        return os_error_line(e)
    return clip(" ".join(str(e).split()) or type(e).__name__)


def _table(log: object, run_dir: Path) -> Table:
    import pandas as pd

    assert isinstance(log, pd.DataFrame)
    t = Table("time_s", "replica", "severity", "state", "value")
    t.add_column("alert", overflow="fold")
    t.title = escape(f"alerts over {clip(str(run_dir))} ({len(log):,} transitions)")
    for row in log.itertuples(index=False):
        t.add_row(
            f"{row.time_s:,.1f}",
            str(row.replica),
            str(row.severity),
            str(row.state),
            f"{row.value:.3g}",
            str(row.alert),
        )
    return t
