"""``fragsim hardware`` and ``fragsim allocators``: what a scenario can name. Tables in
``--format`` (``sim.cli.output``); the presets and the allocator registry load inside
the commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from policies.allocators.registry import ALLOCATORS
from sim.cli.common import fail
from sim.cli.output import Cell, FormatOption, TableData, echo_prose, print_tables
from sim.errors import MAX_MESSAGE, clip, short
from sim.models.hardware import GPU_PRICE_SOURCE, GPUS, MODELS, ModelSpec, kv_bytes_per_token
from sim.models.presets import shipped_model, shipped_names
from sim.scenario.hardware import HardwareConfig

if TYPE_CHECKING:
    from pydantic import ValidationError

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
    config: Annotated[
        str | None, typer.Option(help="A Hugging Face config.json: show its model and KV budget.")
    ] = None,
    kv_cache_dtype: Annotated[
        str, typer.Option(help="KV-cache dtype of a config.json model: auto, bf16, fp16 or fp8.")
    ] = "auto",
    quantization: Annotated[
        str, typer.Option(help="Weights of a config.json model: auto (as shipped) or fp8.")
    ] = "auto",
    gpu: Annotated[str, typer.Option(help="GPU preset.")] = "a100-80gb",
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor parallelism.")] = 1,
    memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory used.")] = 0.9,
    max_seq_tokens: Annotated[int | None, typer.Option(help="Override max sequence.")] = None,
    fmt: FormatOption = "table",
) -> None:
    """List model and GPU presets, or show one replica's KV budget term by term."""
    if config is not None and model is not None:
        raise fail("fragsim hardware: give --model or --config, not both")
    if model is None and config is None:
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
        print_presets(fmt)
        return
    dtypes = {"kv_cache_dtype": kv_cache_dtype, "quantization": quantization}
    chosen: Any = model
    if config is not None:
        chosen = {"config": config, **dtypes}
    elif dtypes != {"kv_cache_dtype": "auto", "quantization": "auto"}:
        if model in MODELS:
            raise fail(
                f"fragsim hardware: --kv-cache-dtype and --quantization apply to config.json "
                f"models (--config, or a shipped one); {model} is a built-in spec"
            )
        chosen = {"preset": model, **dtypes}
    try:
        hw = HardwareConfig(
            model=chosen,
            gpu=gpu,
            tensor_parallel=tp,
            memory_utilization=memory_utilization,
            max_seq_tokens=max_seq_tokens,
        )
    except ValidationError as e:
        raise fail("\n".join(option_errors(e))) from None
    budget = hw.resolve()
    label = model if config is None else hw.model_spec.name
    typer.echo(f"{label} on {tp} x {gpu} (memory_utilization {memory_utilization}):")
    hf = hw.hf_model
    if hf is not None:
        typer.echo("\n".join(hf.describe()))
    typer.echo(budget.describe())
    typer.echo(f"  {'max_seq_tokens':<28} {hw.model_spec.max_seq_tokens:,}")
    typer.echo(f"  {'replica $/hour':<28} {hw.replica_usd_per_hour:.2f}")
    for note in hf.engine_notes() if hf is not None else ():
        typer.echo(note)


def print_presets(fmt: str) -> None:
    """The model and GPU presets, two tables in ``fmt``; with ``table`` and ``markdown``,
    where the GPU prices come from."""
    models = [
        (
            m.name,
            m.num_layers,
            m.num_kv_heads,
            m.head_dim,
            kv_bytes_per_token(m),
            Cell(m.num_params / 1e9, f"{m.num_params / 1e9:.2f}"),
            m.max_seq_tokens,
        )
        for m in (*MODELS.values(), *shipped_specs())
    ]
    gpus = [
        (
            spec.name,
            Cell(spec.memory_bytes / 2**30, f"{spec.memory_bytes / 2**30:.0f}"),
            Cell(spec.hbm_bytes_per_s / 1e9, f"{spec.hbm_bytes_per_s / 1e9:,.0f}"),
            Cell(spec.dense_bf16_flops / 1e12, f"{spec.dense_bf16_flops / 1e12:,.0f}"),
            Cell(spec.usd_per_hour, f"{spec.usd_per_hour:.2f}"),
        )
        for spec in GPUS.values()
    ]
    model_columns = ("model", "layers", "KV heads", "head dim", "KV bytes/token", "params (B)")
    gpu_columns = ("gpu", "memory (GiB)", "HBM GB/s", "dense bf16 TFLOP/s", "$/GPU-hour")
    print_tables(
        [
            TableData("model presets", (*model_columns, "max seq"), models),
            TableData("GPU presets", gpu_columns, gpus),
        ],
        fmt,
    )
    if fmt in ("table", "markdown"):
        if fmt == "table":
            typer.echo("")
        echo_prose(f"$/GPU-hour: {GPU_PRICE_SOURCE}; fleet pools are priced from it", fmt=fmt)
        echo_prose(
            f"the last {len(shipped_names())} models are read from shipped config.json "
            "files: layers and KV "
            "bytes as the single-pool engine holds them (every attention layer, sliding ones "
            "as full); fragsim hardware --model NAME shows each layer kind",
            fmt=fmt,
        )


def shipped_specs() -> list[ModelSpec]:
    """The shipped config.json presets as the engine sees them (sim/models/configs)."""
    return [shipped_model(name).to_spec() for name in shipped_names()]


def option_errors(e: ValidationError) -> list[str]:
    """One line per problem, naming the option that set the field (a budget that leaves
    no KV memory names the options that make it)."""
    lines = []
    for x in e.errors(include_url=False):
        msg = " ".join(str(x["msg"]).removeprefix("Value error, ").split())
        loc = x["loc"]
        field = str(loc[0]) if loc else ""
        given = x.get("input")
        if field == "model" and isinstance(given, dict):  # a config.json's own line
            what = "--model" if "preset" in given else "--config"
        elif field in OPTIONS:
            what = f"invalid value for {OPTIONS[field]}: got {short(x.get('input'))}"
        else:
            what = "options --model, --gpu, --tp and --memory-utilization"
        lines.append(f"fragsim hardware: {what}: {clip(msg[:1].lower() + msg[1:], MAX_MESSAGE)}")
    return lines


def allocators_command(fmt: FormatOption = "table") -> None:
    """List the allocator policies a scenario can name, with their parameters."""
    rows = []
    for kind, cls in ALLOCATORS.items():
        params = []
        for name, field in cls.model_fields.items():
            if name == "kind":
                continue
            default: object = field.default
            params.append(f"{name}={default!r}")
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        rows.append((kind, "\n".join(params) or "—", doc))
    columns = ("kind", "parameters (default)", "what it models")
    print_tables([TableData("allocator policies", columns, rows)], fmt)
