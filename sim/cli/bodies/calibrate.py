"""The bodies of ``fragsim calibrate --from-spans`` and ``--from-prometheus`` (the front,
:mod:`sim.cli.calibrate`, states the contract): load the scenario, read and fit the
telemetry, write the ``fragsim-latency/1`` file (atomically: nothing on an error) and
print the held-out error and the coefficients."""

from __future__ import annotations

from pathlib import Path

import typer

from sim.cli.common import fail
from sim.errors import os_error_line
from sim.latency.calibrated import CalibratedLatency
from sim.latency.from_prometheus import LABELS, fit_from_prometheus
from sim.latency.from_spans import SpanFitError, fit_from_spans, read_span_requests
from sim.latency.prom_dump import read_windows
from sim.scenario.schema import Scenario, ScenarioError, load_scenario
from traces.errors import TraceError


def _scenario(source: str) -> Scenario:
    try:
        return load_scenario(source)
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None


def _write(latency: CalibratedLatency, out: Path) -> None:
    try:
        latency.to_json(out)
    except TraceError as e:
        raise fail(str(e)) from None
    c = latency.calibration.coefficients
    typer.echo(
        f"wrote {out} (intercept {c.intercept_s * 1e3:.3g} ms, per prefill token "
        f"{c.per_prefill_token_s * 1e6:.3g} us, per decode seq {c.per_decode_seq_s * 1e6:.3g} us, "
        f"per KV token {c.per_kv_token_s * 1e9:.3g} ns)"
    )


def from_spans(*, path: Path, scenario_path: str, out: Path) -> None:
    """Fit the spans under ``path`` replayed through the scenario; write ``out``."""
    scenario = _scenario(scenario_path)
    try:
        spans = read_span_requests(path)
        fit = fit_from_spans(scenario, spans, source=str(path))
    except SpanFitError as e:
        raise fail(f"fragsim calibrate --from-spans: {e}") from None
    except TraceError as e:  # the span files' own errors name file and line
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(os_error_line(e, str(path))) from None
    held = fit.table[0][1]
    typer.echo(
        f"error on {held} held-out requests (fitted on {len(spans) - held} of {len(spans)}, "
        f"{fit.evaluations} replays)"
    )
    typer.echo(f"{'latency':<8} {'requests':>8} {'MAPE':>8} {'p90 APE':>8}")
    for name, n, mape, p90 in fit.table:
        typer.echo(f"{name:<8} {n:>8} {mape:>8.1%} {p90:>8.1%}")
    _write(fit.latency, out)


def from_prometheus(*, path: Path, scenario_path: str, out: Path) -> None:
    """Fit the range dump at ``path`` replayed through the scenario; write ``out``."""
    scenario = _scenario(scenario_path)
    try:
        windows = read_windows(path)
        fit = fit_from_prometheus(scenario, windows, source=str(path))
    except SpanFitError as e:  # the dump's (DumpError, naming file and line) or the scenario's
        raise fail(f"fragsim calibrate --from-prometheus: {e}") from None
    except OSError as e:
        raise fail(os_error_line(e, str(path))) from None
    held = fit.table[0][1]
    source = fit.latency.calibration.source
    typer.echo(
        f"error on {held} held-out windows (fitted on {fit.fitted_windows} of "
        f"{source['windows']} windows, {fit.requests} requests; {fit.evaluations} models "
        f"tried on {source['reconstructions']} rebuilds)"
    )
    typer.echo(f"{'latency':<8} {'windows':>8} {'mean APE':>9} {'p50 APE':>8} {'p90 APE':>8}")
    for name, n, mean, p50, p90 in fit.table:
        typer.echo(f"{name:<8} {n:>8} {mean:>9.1%} {p50:>8.1%} {p90:>8.1%}")
    bias = ", ".join(f"{LABELS[m]} x{r:.3f}" for m, r in fit.correction.items())
    typer.echo(f"rebuild bias corrected: {bias}")
    _write(fit.latency, out)
