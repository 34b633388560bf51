"""``fragsim calibrate``: a ``fragsim-latency/1`` file measured on the device (the GPU
backend, :mod:`sim.cli.gpu`) or fitted from vLLM's own telemetry by replaying it through
a scenario's replica: its OpenTelemetry spans (``--from-spans DIR -s SCENARIO``,
:mod:`sim.latency.from_spans`) or a Prometheus range dump of its ``vllm:*`` histograms
(``--from-prometheus DUMP -s SCENARIO``, :mod:`sim.latency.from_prometheus`).

This module is the front (options, the checks made before the fit loads); the fits are
:mod:`sim.cli.bodies.calibrate`'s (:mod:`sim.cli.lazy`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
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
    from_prometheus: Annotated[
        Path | None,
        typer.Option(
            "--from-prometheus",
            help="Fit from a Prometheus range dump of vLLM's vllm:* histograms "
            "(query_range JSON or text samples; a file or folder) instead of measuring.",
        ),
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(
            "--scenario",
            "-s",
            help="With --from-spans or --from-prometheus: the replica to replay (file or "
            "built-in).",
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
    spans (--from-spans) or Prometheus histograms (--from-prometheus).

    --from-spans DIR -s SCENARIO replays each node's spans through SCENARIO's replica,
    fits the linear step-time model to their TTFT and e2e, and prints the error on
    held-out requests. --from-prometheus DUMP -s SCENARIO rebuilds each scrape window's
    requests from the histograms, replays them, fits the model to the windows' latencies
    and prints the error on held-out windows (docs/hardware-latency.md)."""
    if from_spans is not None and from_prometheus is not None:
        raise fail("fragsim calibrate: give --from-spans or --from-prometheus, not both")
    flag = "--from-spans" if from_spans is not None else "--from-prometheus"
    telemetry = from_spans if from_spans is not None else from_prometheus
    if telemetry is None:
        if scenario is not None:
            raise fail(
                "fragsim calibrate: --scenario is used with --from-spans or --from-prometheus only"
            )
        measure(out, model, layers, device, dtype, quick, kernels)
        return
    if scenario is None:
        raise fail(f"fragsim calibrate {flag}: give the replica to replay: -s SCENARIO")
    source = resolve_scenario(scenario)
    check_scenario_exists(source)
    if from_spans is not None:
        lazy.call(
            "sim.cli.bodies.calibrate:from_spans", path=telemetry, scenario_path=source, out=out
        )
    else:
        lazy.call(
            "sim.cli.bodies.calibrate:from_prometheus",
            path=telemetry,
            scenario_path=source,
            out=out,
        )
