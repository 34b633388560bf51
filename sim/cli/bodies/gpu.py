"""The bodies of ``fragsim calibrate`` (measured on the device), ``fragsim validate`` and
``fragsim gpu-bench`` (their front, ``sim.cli.gpu``, states the contract). torch and the
GPU backend (``gpu_backend``, the ``gpu`` extra) are imported where they are used, the
one kind of import a function may hold: without them these commands print one ``error:
... needs the gpu extra`` line and exit with status 2."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import typer

import sim
import traces
from sim.cli.common import fail
from sim.errors import clip
from sim.latency.calibrated import CalibratedLatency
from sim.models.hardware import MODELS
from traces.atomic import staged
from traces.errors import TraceError

if TYPE_CHECKING:  # the gpu extra: imported where used, as the module docstring says
    import torch

    from gpu_backend.device import Kernels
    from gpu_backend.model import ModelShape


def _need_torch(command: str) -> ModuleType:
    """torch, or the exit-2 error naming the extra."""
    try:
        import torch
    except ImportError:
        raise fail(f"fragsim {command} needs the gpu extra: pip install 'fragsim[gpu]'") from None
    return torch


def _setup(
    command: str, device_name: str, dtype_name: str | None, kernels: str
) -> tuple[torch.device, torch.dtype, Kernels]:
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


def _shape(command: str, model: str) -> ModelShape:
    from gpu_backend.model import TINY, ModelShape

    if model == "tiny":
        return TINY
    try:
        return ModelShape.preset(model)
    except (ValueError, KeyError) as e:
        raise fail(f"fragsim {command}: --model: {e}") from None


def measure_steps(
    *, out: Path, model: str, layers: int, device: str, dtype: str | None, quick: bool, kernels: str
) -> None:
    """The work of ``sim.cli.gpu.calibrate_command``, on the options it parsed."""
    dev, dt, chosen = _setup("calibrate", device, dtype, kernels)
    shape = _shape("calibrate", model)
    from gpu_backend.calibrate import FULL_GRID, QUICK_GRID, calibrate, write_calibration
    from gpu_backend.model import DecoderStack

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


def validate_replay(
    *,
    trace: Path,
    calibration: Path,
    out: Path,
    layers: int,
    device: str,
    dtype: str | None,
    kv_capacity_tokens: int,
    max_seq_tokens: int | None,
    max_num_seqs: int,
    kernels: str,
) -> None:
    """The work of ``sim.cli.gpu.validate_command``, on the options it parsed."""
    dev, dt, chosen = _setup("validate", device, dtype, kernels)
    from gpu_backend.model import DecoderStack
    from gpu_backend.validate import scenario_dict, validate

    try:
        cal = CalibratedLatency.from_json(calibration).calibration
        requests = traces.load(trace)
    except (ValueError, TraceError) as e:
        raise fail(clip(str(e))) from None
    shape = _shape("validate", cal.model)
    if cal.model == "tiny" and max_seq_tokens is None:
        max_seq_tokens = 4096
    # No step holds more tokens than the pool: a token budget past the pool (and past
    # the longest sequence, which the budget must cover without chunked prefill) only
    # sends the scenario's step-time probe (sim.simulate.parts.check_step_times) to a
    # step no replay can take -- and a CPU calibration extrapolated there can exceed it.
    seq_tokens = max_seq_tokens or MODELS[shape.name].max_seq_tokens
    budget = max(min(8192, kv_capacity_tokens), seq_tokens)
    data = scenario_dict(
        trace,
        calibration,
        shape,
        kv_capacity_tokens=kv_capacity_tokens,
        max_seq_tokens=max_seq_tokens,
        scheduler={"max_num_seqs": max_num_seqs, "max_num_batched_tokens": budget},
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


def bench(*, device: str, batch: int, context: int, model: str) -> None:
    """The work of ``sim.cli.gpu.gpu_bench_command``, on the options it parsed."""
    torch = _need_torch("gpu-bench")
    if device not in ("cuda", "cpu"):
        raise fail(f"fragsim gpu-bench: --device: got {clip(device)!r}; allowed: cuda, cpu")
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
