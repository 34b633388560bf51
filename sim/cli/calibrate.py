"""``fragsim calibrate``: a ``fragsim-latency/1`` file measured on the device (the GPU
backend, :mod:`sim.cli.gpu`) or fitted from vLLM's OpenTelemetry spans
(``--from-spans DIR -s SCENARIO``, :mod:`sim.latency.from_spans`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli.common import check_scenario_exists, fail
from sim.cli.gpu import (
    DeviceOption,
    DtypeOption,
    KernelsOption,
    LayersOption,
    ModelOption,
    QuickOption,
)
from sim.cli.gpu import calibrate_command as measure
from sim.errors import os_error_line
from sim.scenario.builtin import resolve_scenario


def calibrate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The calibration JSON to write.")],
    from_spans: Annotated[
        Path | None,
        typer.Option(
            "--from-spans",
            help="Fit from vLLM's OTLP JSON spans (a file or folder) instead of measuring.",
        ),
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(
            "--scenario", "-s", help="With --from-spans: the replica to replay (file or built-in)."
        ),
    ] = None,
    model: ModelOption = "llama-3-8b",
    layers: LayersOption = 2,
    device: DeviceOption = "cuda",
    dtype: DtypeOption = None,
    quick: QuickOption = False,
    kernels: KernelsOption = "auto",
) -> None:
    """Write a fragsim-latency/1 file: steps measured on the device, or a fit to vLLM's
    spans (--from-spans).

    --from-spans DIR -s SCENARIO replays each node's spans through SCENARIO's replica,
    fits the linear step-time model to their TTFT and e2e, and prints the error on
    held-out requests (docs/hardware-latency.md)."""
    if from_spans is None:
        if scenario is not None:
            raise fail("fragsim calibrate: --scenario is used with --from-spans only")
        measure(out, model, layers, device, dtype, quick, kernels)
        return
    if scenario is None:
        raise fail("fragsim calibrate --from-spans: give the replica to replay: -s SCENARIO")
    _from_spans(from_spans, scenario, out)


def _from_spans(spans_path: Path, scenario_arg: str, out: Path) -> None:
    from sim.latency.from_spans import SpanFitError, fit_from_spans, read_span_requests
    from sim.scenario.schema import ScenarioError, load_scenario
    from traces.errors import TraceError

    source = resolve_scenario(scenario_arg)
    check_scenario_exists(source)
    try:
        scenario = load_scenario(source)
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None
    try:
        spans = read_span_requests(spans_path)
        fit = fit_from_spans(scenario, spans, source=str(spans_path))
    except SpanFitError as e:
        raise fail(f"fragsim calibrate --from-spans: {e}") from None
    except TraceError as e:  # the span files' own errors name file and line
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(os_error_line(e, str(spans_path))) from None
    try:
        fit.latency.to_json(out)
    except TraceError as e:
        raise fail(str(e)) from None
    held = fit.table[0][1]
    typer.echo(
        f"error on {held} held-out requests (fitted on {len(spans) - held} of {len(spans)}, "
        f"{fit.evaluations} replays)"
    )
    typer.echo(f"{'latency':<8} {'requests':>8} {'MAPE':>8} {'p90 APE':>8}")
    for name, n, mape, p90 in fit.table:
        typer.echo(f"{name:<8} {n:>8} {mape:>8.1%} {p90:>8.1%}")
    c = fit.latency.calibration.coefficients
    typer.echo(
        f"wrote {out} (intercept {c.intercept_s * 1e3:.3g} ms, per prefill token "
        f"{c.per_prefill_token_s * 1e6:.3g} us, per decode seq {c.per_decode_seq_s * 1e6:.3g} us, "
        f"per KV token {c.per_kv_token_s * 1e9:.3g} ns)"
    )
