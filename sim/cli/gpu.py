"""``fragsim calibrate``, ``fragsim validate`` and ``fragsim gpu-bench``: the GPU backend
(``gpu_backend``, the ``gpu`` extra). torch is imported inside the commands only, so the
rest of the CLI stays fast and works without it; without it these commands print one
``error: ... needs the gpu extra`` line and exit with status 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

import sim
from sim.cli.common import fail
from sim.errors import clip

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


def _need_torch(command: str) -> Any:
    """torch, or the exit-2 error naming the extra."""
    try:
        import torch
    except ImportError:
        raise fail(f"fragsim {command} needs the gpu extra: pip install 'fragsim[gpu]'") from None
    return torch


def _setup(
    command: str, device_name: str, dtype_name: str | None, kernels: str
) -> tuple[Any, Any, Any]:
    """(device, dtype, Kernels) or a one-line error."""
    torch = _need_torch(command)
    from gpu_backend.device import select_kernels, steady_cpu_timing

    if device_name not in ("cuda", "cpu"):
        raise fail(f"fragsim {command}: --device: got {clip(device_name)!r}; allowed: cuda, cpu")
    if device_name == "cuda" and not torch.cuda.is_available():
        raise fail(f"fragsim {command}: --device cuda: no CUDA device here (use --device cpu)")
    if kernels not in ("auto", "triton", "reference"):
        raise fail(
            f"fragsim {command}: --kernels: got {clip(kernels)!r}; allowed: auto, triton, reference"
        )
    device = torch.device(device_name)
    dtype_name = dtype_name or ("bfloat16" if device_name == "cuda" else "float32")
    if dtype_name not in ("bfloat16", "float16", "float32"):
        raise fail(
            f"fragsim {command}: --dtype: got {clip(dtype_name)!r}; allowed: bfloat16, float16, float32"
        )
    steady_cpu_timing(device)
    try:
        chosen = select_kernels(device, "auto" if kernels == "auto" else kernels)
    except RuntimeError as e:
        raise fail(f"fragsim {command}: {e}") from None
    return device, getattr(torch, dtype_name), chosen


def _shape(command: str, model: str) -> Any:
    from gpu_backend.model import TINY, ModelShape

    if model == "tiny":
        return TINY
    try:
        return ModelShape.preset(model)
    except (ValueError, KeyError) as e:
        raise fail(f"fragsim {command}: --model: {e}") from None


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
    dev, dt, chosen = _setup("calibrate", device, dtype, kernels)
    shape = _shape("calibrate", model)
    from gpu_backend.calibrate import FULL_GRID, QUICK_GRID, calibrate, write_calibration
    from gpu_backend.model import DecoderStack
    from traces.errors import TraceError

    if layers > shape.num_layers:
        raise fail(f"fragsim calibrate: --layers: {layers} > the model's {shape.num_layers}")
    stack = DecoderStack(shape, layers, dtype=dt, device=dev, kernels=chosen)
    latency = calibrate(stack, QUICK_GRID if quick else FULL_GRID)
    try:
        write_calibration(latency, out)
    except TraceError as e:
        raise fail(str(e)) from None
    fit = latency.calibration.fit
    typer.echo(f"wrote {out} (r2 {fit.r2:.4f}, held-out mape {fit.mape:.2%}, {fit.samples} steps)")


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
    dev, dt, chosen = _setup("validate", device, dtype, kernels)
    import traces
    from gpu_backend.model import DecoderStack
    from gpu_backend.validate import scenario_dict, validate
    from sim.latency.calibrated import CalibratedLatency
    from traces.atomic import staged
    from traces.errors import TraceError

    try:
        cal = CalibratedLatency.from_json(calibration).calibration
        requests = traces.load(trace)
    except (ValueError, TraceError) as e:
        raise fail(clip(str(e))) from None
    shape = _shape("validate", cal.model)
    if cal.model == "tiny" and max_seq_tokens is None:
        max_seq_tokens = 4096
    data = scenario_dict(
        trace,
        calibration,
        shape,
        kv_capacity_tokens=kv_capacity_tokens,
        max_seq_tokens=max_seq_tokens,
        scheduler={"max_num_seqs": max_num_seqs},
    )
    try:
        scenario = sim.parse_scenario(data)
        stack = DecoderStack(
            shape, min(layers, shape.num_layers), dtype=dt, device=dev, kernels=chosen
        )
        report, result = validate(requests, scenario, stack)
    except (ValueError, sim.ScenarioError) as e:
        raise fail(clip(str(e))) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        with staged() as outputs:  # the three files together or none
            result.steps_frame().to_csv(outputs.file(out / "steps.csv"), index=False)
            result.requests.to_csv(outputs.file(out / "replay_requests.csv"), index=False)
            outputs.file(out / "validation.json").write_text(
                json.dumps(report, indent=2) + "\n", encoding="utf-8"
            )
    except (TraceError, OSError) as e:
        raise fail(clip(str(e))) from None
    e2e, step = report["e2e"], report["step_time"]
    typer.echo(
        f"wrote {out}: {report['steps']} steps, blocks identical every step; "
        f"e2e mape {e2e.get('mape', float('nan')):.2%}, step mape {step.get('mape', float('nan')):.2%}"
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
    torch = _need_torch("gpu-bench")
    if device == "cuda" and not torch.cuda.is_available():
        raise fail("fragsim gpu-bench: --device cuda: no CUDA device here (use --device cpu)")
    shape = _shape("gpu-bench", model)
    from gpu_backend.kernels.bench import bench_decode, copy_bandwidth

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    result = bench_decode(
        batch, context, shape.num_heads, shape.num_kv_heads, shape.head_dim, 16, dtype, device
    )
    result["copy"] = copy_bandwidth(device)
    result["fraction_of_copy"] = result["kernel_bytes_per_s"] / result["copy"]["bytes_per_s"]
    typer.echo(json.dumps(result, indent=2))
