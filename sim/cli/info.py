"""``fragsim hardware`` and ``fragsim allocators``: what a scenario can name."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from policies.allocators.registry import ALLOCATORS
from sim.cli.run import fail
from sim.errors import MAX_MESSAGE, clip, short
from sim.hardware import GPU_PRICE_SOURCE, GPUS, MODELS, HardwareConfig, kv_bytes_per_token

OPTIONS = {
    "model": "--model",
    "gpu": "--gpu",
    "tensor_parallel": "--tp",
    "memory_utilization": "--memory-utilization",
    "max_seq_tokens": "--max-seq-tokens",
}
"""The ``fragsim hardware`` option that sets each HardwareConfig field."""


def hardware_command(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model preset: show its KV budget.")] = None,
    gpu: Annotated[str, typer.Option(help="GPU preset.")] = "a100-80gb",
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor parallelism.")] = 1,
    memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory used.")] = 0.9,
    max_seq_tokens: Annotated[int | None, typer.Option(help="Override max sequence.")] = None,
) -> None:
    """List model and GPU presets, or show one replica's KV budget term by term."""
    console = Console()
    if model is None:
        given = [
            f"--{name.replace('_', '-')}" if name != "tp" else "--tp"
            for name in ("gpu", "tp", "memory_utilization", "max_seq_tokens")
            if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
        ]
        if given:
            raise fail(
                f"fragsim hardware: {', '.join(given)} "
                f"{'applies' if len(given) == 1 else 'apply'} only with --model"
            )
        t = Table(
            "model",
            "layers",
            "KV heads",
            "head dim",
            "KV bytes/token",
            "params",
            "max seq",
            title="model presets",
        )
        for m in MODELS.values():
            kv = kv_bytes_per_token(m)
            t.add_row(
                m.name,
                str(m.num_layers),
                str(m.num_kv_heads),
                str(m.head_dim),
                f"{kv:,}",
                f"{m.num_params / 1e9:.2f} B",
                f"{m.max_seq_tokens:,}",
            )
        console.print(t)
        g = Table(
            "gpu", "memory", "HBM GB/s", "dense bf16 TFLOP/s", "$/GPU-hour", title="GPU presets"
        )
        g.caption = f"$/GPU-hour: {GPU_PRICE_SOURCE}; fleet pools are priced from it"
        for spec in GPUS.values():
            g.add_row(
                spec.name,
                f"{spec.memory_bytes / 2**30:.0f} GiB",
                f"{spec.hbm_bytes_per_s / 1e9:,.0f}",
                f"{spec.dense_bf16_flops / 1e12:,.0f}",
                f"{spec.usd_per_hour:.2f}",
            )
        console.print(g)
        return
    try:
        config = HardwareConfig(
            model=model,
            gpu=gpu,
            tensor_parallel=tp,
            memory_utilization=memory_utilization,
            max_seq_tokens=max_seq_tokens,
        )
    except ValidationError as e:
        raise fail("\n".join(option_errors(e))) from None
    budget = config.resolve()
    typer.echo(f"{model} on {tp} x {gpu} (memory_utilization {memory_utilization}):")
    typer.echo(budget.describe())
    typer.echo(f"  {'max_seq_tokens':<28} {config.model_spec.max_seq_tokens:,}")
    typer.echo(f"  {'replica $/hour':<28} {config.replica_usd_per_hour:.2f}")


def option_errors(e: ValidationError) -> list[str]:
    """One line per problem, naming the option that set the field (a budget that leaves
    no KV memory names the options that make it)."""
    lines = []
    for x in e.errors(include_url=False):
        msg = " ".join(str(x["msg"]).removeprefix("Value error, ").split())
        loc = x["loc"]
        field = str(loc[0]) if loc else ""
        if field in OPTIONS:
            what = f"invalid value for {OPTIONS[field]}: got {short(x.get('input'))}"
        else:
            what = "options --model, --gpu, --tp and --memory-utilization"
        lines.append(f"fragsim hardware: {what}: {clip(msg[:1].lower() + msg[1:], MAX_MESSAGE)}")
    return lines


def allocators_command() -> None:
    """List the allocator policies a scenario can name, with their parameters."""
    t = Table("kind", "parameters (default)", "what it models", title="allocator policies")
    for kind, cls in ALLOCATORS.items():
        params = []
        for name, field in cls.model_fields.items():
            if name == "kind":
                continue
            default: Any = field.default
            params.append(f"{name}={default!r}")
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        t.add_row(kind, "\n".join(params) or "—", doc)
    Console().print(t)
