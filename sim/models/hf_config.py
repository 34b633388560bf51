"""A model read from a Hugging Face ``config.json`` on disk (no hub access).

What it gives, from the config's fields only (formulas in docs/hardware-latency.md):

* the layer pattern: full attention, sliding-window attention (``layer_types`` or
  ``sliding_window_pattern``), MLA (DeepSeek: one latent of ``kv_lora_rank +
  qk_rope_head_dim`` per token and layer), Mamba-2 layers (Nemotron-H
  ``hybrid_override_pattern``) and Mamba-1 layers (Jamba ``attn_layer_period`` /
  ``attn_layer_offset``) with their fixed state per request;
* KV bytes per token per layer kind (``kv_cache_dtype: fp8`` halves them, as vLLM does);
* parameters, total and active (MoE: all experts stored, ``num_experts_per_tok`` plus the
  shared ones computed), tied embeddings, and the weight bytes under the config's
  quantisation (bf16, FP8 with block scales, mxfp4 as gpt-oss ships, GPTQ/AWQ W4A16);
* per-token FLOPs: ``2 x active params``, and the attention FLOPs per context token.

An architecture it does not know, or a field it needs that is missing, is refused with
one line naming the file and the field (:class:`HfConfigError`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.models.hardware import ModelSpec
from sim.models.params import count_params

MAX_CONFIG_BYTES = 1 << 20
"""A config.json is a few kB; anything over a MiB is not one."""
KV_DTYPE_BYTES = {"auto": 0, "bf16": 2, "fp16": 2, "fp8": 1}
"""``kv_cache_dtype`` values (vLLM's names); ``auto`` is the model's dtype."""
_TORCH_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_GQA_TYPES = {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "gpt_oss"}
_HYBRID_TYPES = {"nemotron_h", "jamba"}
_KNOWN_TYPES = sorted(_GQA_TYPES | _HYBRID_TYPES | {"deepseek_v3"})


class HfConfigError(ValueError):
    """A config.json that cannot be read as a model: one line, naming the file."""


@dataclass(frozen=True, slots=True)
class LayerKind:
    """Layers of one kind and what one token costs in each (tp = 1, the whole token)."""

    kind: str
    """``full_attention``, ``sliding_attention``, ``mla`` or ``mamba``."""
    layers: int
    kv_bytes_per_token_per_layer: int
    """0 for Mamba layers (their state is per request, not per token)."""
    window_tokens: int = 0
    """Sliding-window size (sliding layers only)."""


@dataclass(frozen=True, slots=True)
class HfModel:
    """A model as its config.json describes it (see the module docstring)."""

    name: str
    source: str
    model_type: str
    hidden_size: int
    num_layers: int
    """All decoder layers (attention, Mamba and MLP-only blocks)."""
    num_kv_heads: int
    """KV heads per attention layer (1 for MLA: one latent, replicated on every rank)."""
    head_dim: int
    kv_latent_dim: int
    """MLA: ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer; else 0."""
    layer_kinds: tuple[LayerKind, ...]
    mamba_state_bytes_per_request: int
    """Conv + SSM state of every Mamba layer for one request (model dtype), replica-wide."""
    total_params: int
    active_params: int
    weights_bytes: int
    weight_format: str
    dtype_bytes: int
    kv_dtype_bytes: int
    attention_flops_per_context_token: int
    """FLOPs one new token spends per token of context (QK and AV over every attention
    layer; a sliding layer's context is capped at its window)."""
    max_seq_tokens: int

    @property
    def kv_layers(self) -> int:
        """Layers holding KV (every attention layer, sliding ones included)."""
        return sum(k.layers for k in self.layer_kinds if k.kind != "mamba")

    @property
    def flops_per_token(self) -> int:
        """Dense FLOPs per token, attention left out: ``2 x active_params``."""
        return 2 * self.active_params

    def describe(self) -> list[str]:
        """The model as ``fragsim hardware`` prints it: layers by kind, KV per token,
        state per request, parameters, weights, FLOPs, and how the engine uses it."""
        rows = [f"  {'model':<28} {self.name} ({self.model_type}, {self.source})"]
        for k in self.layer_kinds:
            what = f"{k.layers} layers"
            if k.kind == "mamba":
                what += f", state {self.mamba_state_bytes_per_request:,} bytes/request (all)"
            else:
                what += f", {k.kv_bytes_per_token_per_layer:,} KV bytes/token/layer (tp 1)"
            if k.window_tokens:
                what += f", window {k.window_tokens:,} tokens"
            rows.append(f"  {'layers ' + k.kind:<28} {what}")
        rows += [
            f"  {'params total / active':<28} {self.total_params:,} / {self.active_params:,}",
            f"  {'weights':<28} {self.weights_bytes:,} bytes ({self.weight_format})",
            f"  {'kv element bytes':<28} {self.kv_dtype_bytes}",
            f"  {'flops/token':<28} {self.flops_per_token:,} + "
            f"{self.attention_flops_per_context_token:,} per context token",
        ]
        return rows

    def engine_notes(self) -> list[str]:
        """What the single-pool allocators do not do with this model (the KV managers
        do)."""
        notes = []
        if any(k.kind == "sliding_attention" for k in self.layer_kinds):
            notes.append(
                "note: the single-pool allocators keep every token of the sliding-window "
                "layers; allocator kinds hybrid_kv, split_pools and window_pools free what "
                "leaves the window (docs/allocators.md)"
            )
        if self.mamba_state_bytes_per_request:
            notes.append(
                "note: the single-pool allocators do not hold the Mamba layers' state; "
                "allocator kinds hybrid_kv, split_pools and window_pools do"
            )
        return notes

    def to_spec(self) -> ModelSpec:
        """The single-pool engine's view: every attention layer holds the full sequence
        (a sliding layer is treated as full attention; Mamba state is not held)."""
        return ModelSpec(
            self.name,
            self.kv_layers,
            self.num_kv_heads,
            self.head_dim,
            self.dtype_bytes,
            self.total_params,
            self.hidden_size,
            self.max_seq_tokens,
            kv_latent_dim=self.kv_latent_dim,
            kv_dtype_bytes=self.kv_dtype_bytes,
            quantized_weights_bytes=self.weights_bytes,
            active_params=self.active_params,
            tp_allreduces_per_step=self.num_layers
            if self.model_type == "nemotron_h"  # one mixer or one MLP per block
            else 2 * self.num_layers,
        )


class _Fields:
    """The config's fields, each read naming the file and the field when missing."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data, self.source = data, source

    def fail(self, what: str) -> HfConfigError:
        return HfConfigError(f"{self.source}: {what}")

    def int(self, name: str, default: int | None = None) -> int:
        value = self.data.get(name, default)
        if value is None:
            raise self.fail(f"field {name!r} missing (needed for {self.model_type})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(f"field {name!r}: expected a non-negative integer, got {value!r}")
        return value

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    @property
    def model_type(self) -> str:
        return str(self.data.get("model_type", "?"))


def read_config(
    path: Path, *, name: str | None = None, kv_cache_dtype: str = "auto", quantization: str = "auto"
) -> HfModel:
    """Read ``path`` (a config.json) into an :class:`HfModel`. Raises HfConfigError."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise HfConfigError(f"{source}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise HfConfigError(f"{source}: {len(raw):,} bytes; a config.json is at most 1 MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HfConfigError(f"{source}: not a JSON config: {e}") from None
    if not isinstance(data, dict):
        raise HfConfigError(f"{source}: expected a JSON object of config fields")
    default_name = path.parent.name if path.name == "config.json" else path.stem
    return parse_config(
        data,
        source,
        name=name or default_name,
        kv_cache_dtype=kv_cache_dtype,
        quantization=quantization,
    )


def parse_config(
    data: Mapping[str, Any],
    source: str,
    *,
    name: str,
    kv_cache_dtype: str = "auto",
    quantization: str = "auto",
) -> HfModel:
    """Parse a config mapping (see :func:`read_config`). ``quantization="fp8"`` quantises
    an unquantised checkpoint at load (vLLM's ``--quantization fp8``: per-tensor scales)."""
    text = data.get("text_config")
    if isinstance(text, dict):  # a multimodal wrapper (Gemma 3): the language model
        data = {**text, "quantization_config": data.get("quantization_config")}
        data.setdefault("model_type", "gemma3_text")
    if quantization == "fp8":
        shipped = data.get("quantization_config")
        if shipped:
            method = shipped.get("quant_method") if isinstance(shipped, dict) else shipped
            raise HfConfigError(
                f"{source}: quantization fp8: the checkpoint already ships quantised "
                f"(quantization_config.quant_method {method!r}); use quantization: auto"
            )
        data = {**data, "quantization_config": {"quant_method": "fp8"}}
    elif quantization != "auto":
        raise HfConfigError(f"{source}: quantization {quantization!r}: expected auto or fp8")
    f = _Fields(data, source)
    model_type = f.get("model_type")
    if model_type not in _KNOWN_TYPES:
        raise f.fail(
            f"field 'model_type': unknown architecture {model_type!r}; "
            f"known: {', '.join(_KNOWN_TYPES)}"
        )
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise f.fail(f"kv_cache_dtype {kv_cache_dtype!r}: expected one of auto, bf16, fp16, fp8")
    dtype_name = f.get("torch_dtype", f.get("dtype", "bfloat16"))
    if dtype_name not in _TORCH_DTYPE_BYTES:
        raise f.fail(
            f"field 'torch_dtype': expected bfloat16, float16 or float32, got {dtype_name!r}"
        )
    dtype_bytes = _TORCH_DTYPE_BYTES[dtype_name]
    kv_bytes = KV_DTYPE_BYTES[kv_cache_dtype] or dtype_bytes

    counted = count_params(f)
    hidden = f.int("hidden_size")
    kinds: list[LayerKind] = []
    latent = 0
    flops_ctx = 0
    if model_type == "deepseek_v3":
        latent = f.int("kv_lora_rank") + f.int("qk_rope_head_dim")
        layers = f.int("num_hidden_layers")
        kinds.append(LayerKind("mla", layers, latent * kv_bytes))
        heads = f.int("num_attention_heads")
        qk = f.int("qk_nope_head_dim") + f.int("qk_rope_head_dim")
        flops_ctx = 2 * layers * heads * (qk + f.int("v_head_dim"))
        kv_heads, head_dim = 1, latent
    else:
        heads = f.int("num_attention_heads")
        kv_heads = f.int("num_key_value_heads", heads)
        head_dim = f.int(
            "head_dim", f.get("attention_head_dim") or (hidden // heads if heads else None)
        )
        per_layer = 2 * kv_heads * head_dim * kv_bytes
        pattern = layer_pattern(f)
        window = f.int("sliding_window") if "sliding_attention" in pattern else 0
        for kind in ("full_attention", "sliding_attention", "mamba"):
            n = pattern.count(kind)
            if n:
                kv = 0 if kind == "mamba" else per_layer
                kinds.append(LayerKind(kind, n, kv, window if kind == "sliding_attention" else 0))
        attn_layers = pattern.count("full_attention") + pattern.count("sliding_attention")
        flops_ctx = 4 * attn_layers * heads * head_dim
    mamba_state = mamba_state_bytes(f, dtype_bytes) if model_type in _HYBRID_TYPES else 0
    max_seq = f.int("max_position_embeddings")
    return HfModel(
        name=name,
        source=source,
        model_type=str(model_type),
        hidden_size=hidden,
        num_layers=f.int("num_hidden_layers"),
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_latent_dim=latent,
        layer_kinds=tuple(kinds),
        mamba_state_bytes_per_request=mamba_state,
        total_params=counted.total,
        active_params=counted.active,
        weights_bytes=counted.weights_bytes(f, dtype_bytes),
        weight_format=counted.weight_format(f),
        dtype_bytes=dtype_bytes,
        kv_dtype_bytes=kv_bytes,
        attention_flops_per_context_token=flops_ctx,
        max_seq_tokens=max_seq,
    )


def layer_pattern(f: _Fields) -> list[str]:
    """One entry per decoder layer: ``full_attention``, ``sliding_attention``, ``mamba``
    or ``mlp`` (a block with no token mixer: Nemotron-H's ``-`` and ``E``)."""
    layers = f.int("num_hidden_layers")
    if f.model_type == "nemotron_h":
        pattern = f.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or len(pattern) != layers:
            raise f.fail(
                f"field 'hybrid_override_pattern': expected a string of {layers} characters "
                "(M mamba, * attention, - MLP, E MoE)"
            )
        names = {"M": "mamba", "*": "full_attention", "-": "mlp", "E": "mlp"}
        bad = sorted(set(pattern) - set(names))
        if bad:
            raise f.fail(f"field 'hybrid_override_pattern': unknown layer characters {bad}")
        return [names[c] for c in pattern]
    if f.model_type == "jamba":  # attention every attn_layer_period-th layer from the offset
        period, offset = f.int("attn_layer_period"), f.int("attn_layer_offset")
        if period < 1:
            raise f.fail("field 'attn_layer_period': expected >= 1")
        return ["full_attention" if i % period == offset else "mamba" for i in range(layers)]
    types = f.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise f.fail(f"field 'layer_types': expected a list of {layers} layer types")
        bad = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
        if bad:
            raise f.fail(f"field 'layer_types': unknown layer types {bad}")
        return [str(t) for t in types]
    if f.model_type == "gemma3_text":  # every sliding_window_pattern-th layer is global
        every = f.int("sliding_window_pattern")
        return [
            "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)
        ]
    if f.model_type == "gpt_oss":
        raise f.fail("field 'layer_types' missing (needed for gpt_oss)")
    if not f.get("sliding_window"):
        return ["full_attention"] * layers
    if f.model_type in ("qwen2", "qwen3", "qwen3_moe"):  # windowed from max_window_layers on
        if not f.get("use_sliding_window", False):
            return ["full_attention"] * layers
        first = f.int("max_window_layers", layers)
        return ["full_attention" if i < first else "sliding_attention" for i in range(layers)]
    return ["sliding_attention"] * layers  # Mistral-7B-v0.1: every layer windowed


def mamba_state_bytes(f: _Fields, dtype_bytes: int) -> int:
    """Mamba state of one request over every Mamba layer. Mamba-2 (Nemotron-H), per
    layer: the conv state
    ``(conv_kernel - 1) x (intermediate + 2 n_groups ssm_state_size)`` and the SSM state
    ``mamba_num_heads x mamba_head_dim x ssm_state_size`` elements, in the model dtype
    (vLLM's default ``mamba_ssm_cache_dtype``). Mamba-1 (Jamba): ``(mamba_d_conv - 1) x
    inner + inner x mamba_d_state`` with ``inner = mamba_expand x hidden_size``."""
    layers = layer_pattern(f).count("mamba")
    if f.model_type == "jamba":  # Mamba-1: conv (d_conv - 1) x inner, SSM inner x d_state
        inner = f.int("mamba_expand") * f.int("hidden_size")
        per_layer = (f.int("mamba_d_conv") - 1) * inner + inner * f.int("mamba_d_state")
        return layers * per_layer * dtype_bytes
    heads, head_dim = f.int("mamba_num_heads"), f.int("mamba_head_dim")
    state, groups = f.int("ssm_state_size"), f.int("n_groups")
    conv_dim = heads * head_dim + 2 * groups * state
    per_layer = (f.int("conv_kernel") - 1) * conv_dim + heads * head_dim * state
    return layers * per_layer * dtype_bytes
