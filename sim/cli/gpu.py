"""``fragsim calibrate``, ``fragsim validate`` and ``fragsim gpu-bench``: the GPU backend
(``gpu_backend``, the ``gpu`` extra). torch is imported by the commands' bodies
(:mod:`sim.cli.bodies.gpu`, loaded by :mod:`sim.cli.lazy`) only, so the rest of the CLI
stays fast and works without it; without it these commands print one ``error: ...
needs the gpu extra`` line and exit with status 2. This module is the front: the
options (shared with ``sim.cli.calibrate``) and help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy

KernelsOption = Annotated[
    str, typer.Option("--kernels", help="auto (Triton where it can run), triton or reference.")
]
DeviceOption = Annotated[str, typer.Option("--device", help="cuda or cpu.")]
LayersOption = Annotated[int, typer.Option("--layers", min=1, help="Decoder layers to run.")]
ModelOption = Annotated[str, typer.Option("--model", help="A model preset, or tiny.")]
DtypeOption = Annotated[
    str | None, typer.Option("--dtype", help="Default bfloat16 on cuda, float32 on cpu.")
]
QuickOption = Annotated[bool, typer.Option("--quick", help="The small grid (seconds on CPU).")]


def calibrate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The calibration JSON to write.")],
    model: ModelOption = "llama-3-8b",
    layers: LayersOption = 2,
    device: DeviceOption = "cuda",
    dtype: DtypeOption = None,
    quick: QuickOption = False,
    kernels: KernelsOption = "auto",
) -> None:
    """Measure a grid of steps on the device and write a fragsim-latency/1 file."""
    lazy.call(
        "sim.cli.bodies.gpu:measure_steps",
        out=out,
        model=model,
        layers=layers,
        device=device,
        dtype=dtype,
        quick=quick,
        kernels=kernels,
    )


def validate_command(
    trace: Annotated[Path, typer.Argument(help="A trace file (any format traces.load reads).")],
    calibration: Annotated[Path, typer.Option("--calibration", help="A fragsim-latency/1 file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write.")],
    layers: LayersOption = 2,
    device: DeviceOption = "cuda",
    dtype: Annotated[str | None, typer.Option("--dtype", help="As calibrate.")] = None,
    kv_capacity_tokens: Annotated[
        int, typer.Option("--kv-capacity-tokens", min=16, help="The paged pool.")
    ] = 65536,
    max_seq_tokens: Annotated[
        int | None, typer.Option("--max-seq-tokens", min=1, help="Default: the model's.")
    ] = None,
    max_num_seqs: Annotated[int, typer.Option("--max-num-seqs", min=1)] = 256,
    kernels: KernelsOption = "auto",
) -> None:
    """Replay TRACE on the device and compare it with the calibrated simulator."""
    lazy.call(
        "sim.cli.bodies.gpu:validate_replay",
        trace=trace,
        calibration=calibration,
        out=out,
        layers=layers,
        device=device,
        dtype=dtype,
        kv_capacity_tokens=kv_capacity_tokens,
        max_seq_tokens=max_seq_tokens,
        max_num_seqs=max_num_seqs,
        kernels=kernels,
    )


def gpu_bench_command(
    device: DeviceOption = "cuda",
    batch: Annotated[int, typer.Option("--batch", min=1)] = 64,
    context: Annotated[int, typer.Option("--context", min=1)] = 4096,
    model: Annotated[
        str, typer.Option("--model", help="Heads and head dim from a preset.")
    ] = "llama-3-8b",
) -> None:
    """Paged-decode bandwidth against a device copy, the torch reference and SDPA (JSON)."""
    lazy.call("sim.cli.bodies.gpu:bench", device=device, batch=batch, context=context, model=model)
