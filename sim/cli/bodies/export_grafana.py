"""The dashboard of ``fragsim export grafana -o FILE [--run RUN_DIR] [--origin T]`` (its
front is :mod:`sim.cli.export`, beside ``openmetrics`` and its ``--origin``; the body
:func:`sim.cli.bodies.export.grafana` calls :func:`write_dashboard`): the fleet seed's
Grafana dashboard (:mod:`sim.telemetry.dashboard`) as JSON to import into Grafana, over
the Prometheus that holds ``fragsim export openmetrics``'s backfill.

With ``--run`` the dashboard opens on that run's simulated span at ``--origin`` (the
export's origin: give both the same) and draws the run's alert thresholds and scrape
interval (its summary's ``fleet.alerts``); without it, a day from ``--origin`` and the
seed's thresholds, 30 s. The same options give the same bytes. A run folder that cannot
be read, a bad option, or a missing ``grafana-foundation-sdk`` (the ``grafana`` extra)
is one ``error: ...`` line and exit status 2; the file is written atomically.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sim.cli.alert_times import run_thresholds, run_times
from sim.cli.common import fail
from sim.results.runfolder import RunFolderError, check_run_folder, read_summary
from sim.results.seed_alerts import THRESHOLD_FIELDS, AlertThresholds
from sim.telemetry.dashboard import DashboardOptions, dashboard_json
from traces import TraceError
from traces.atomic import atomic_path

SDK_MISSING = (
    "fragsim export grafana needs grafana-foundation-sdk (Grafana's dashboard builder): "
    "pip install 'fragsim[grafana]'"
)


def _run_options(run_dir: Path, origin_s: float) -> DashboardOptions:
    """The dashboard at ``origin_s`` for the span, scrape interval and thresholds of the
    run in ``run_dir``."""
    try:
        folder = check_run_folder(run_dir)
        summary = read_summary(folder / "summary.json")
    except RunFolderError as e:
        raise fail(str(e)) from None
    path = folder / "summary.json"
    span_s = summary.span_s  # finite seconds >= 0, checked as it was read
    scrape_s, _window_s, _note = run_times(summary, path, None, None)
    recorded = run_thresholds(summary) or {}
    thresholds = AlertThresholds(**{k: v for k, v in recorded.items() if k in THRESHOLD_FIELDS})
    # a run shorter than a scrape still gets a range that shows its one sample
    return DashboardOptions(
        origin_s=origin_s,
        span_s=max(float(span_s), scrape_s),
        scrape_interval_s=scrape_s,
        thresholds=thresholds,
    )


def write_dashboard(out: Path, run_dir: Path | None, origin_s: float) -> None:
    """Write the dashboard for ``run_dir`` (None: no run) at ``origin_s`` to ``out``
    (module docstring), then ``wrote FILE`` on stderr."""
    chosen = DashboardOptions(origin_s) if run_dir is None else _run_options(run_dir, origin_s)
    try:
        text = dashboard_json(chosen)
    except ImportError:
        raise fail(SDK_MISSING) from None
    try:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except TraceError as e:
        raise fail(str(e)) from None
    typer.echo(f"wrote {out}", err=True)
