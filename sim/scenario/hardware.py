"""A scenario's ``hardware:`` block, validated at the edge: :class:`HardwareConfig` (a
model and GPU -- a preset, inline fields or a Hugging Face ``config.json`` -- tensor
parallelism, memory terms, or the KV capacity given directly, as tokens or as vLLM's
``num_gpu_blocks``), resolved into :class:`sim.models.hardware.KvBudget`. The specs, presets and
the budget's arithmetic are :mod:`sim.models.hardware`'s; this module is their pydantic edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.fields import MAX_BYTES, MAX_TOKENS
from sim.models.hardware import (
    GPUS,
    MODELS,
    GpuSpec,
    KvBudget,
    ModelSpec,
    ceil_div,
    default_activation_reserve_bytes,
    kv_bytes_per_token,
)
from sim.scenario.hardware_choice import (
    GpuChoice,
    GpuSpecConfig,
    ModelChoice,
    ModelConfigFile,
    ModelSpecConfig,
    check_model_name,
    lookup_preset,
    shipped_model,
)

if TYPE_CHECKING:
    from sim.models.hf_config import HfModel

KV_CAPACITY_FIELDS = ("kv_capacity_tokens", "num_gpu_blocks", "gpu_kv_cache_tokens")
"""The :class:`HardwareConfig` fields that set the KV capacity directly (one at most)."""


def merge_hardware(base: Mapping[str, object], pool: Mapping[str, object]) -> dict[str, object]:
    """A fleet pool's ``hardware`` over the scenario's: the pool's keys win, and a pool
    giving one of :data:`KV_CAPACITY_FIELDS` replaces the scenario's (they exclude each
    other)."""
    if any(name in pool for name in KV_CAPACITY_FIELDS):
        base = {k: v for k, v in base.items() if k not in KV_CAPACITY_FIELDS}
    return {**base, **pool}


class HardwareConfig(BaseModel):
    """Model, GPU and memory budget of one replica, as a scenario gives them.

    Presets by name (``model: llama-2-7b``, ``gpu: a100-80gb``) or inline mappings.
    ``resolve()`` gives the :class:`KvBudget`; a budget that leaves no KV memory is a
    validation error that shows every term.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: ModelChoice = Field(
        default="llama-2-7b",
        description=f"Model preset ({', '.join(MODELS)}, or a shipped config.json: "
        "fragsim hardware lists them), {config: path/to/config.json} or an inline model.",
    )
    gpu: GpuChoice = Field(
        default="a100-80gb", description=f"GPU preset ({', '.join(GPUS)}) or an inline GPU."
    )
    tensor_parallel: int = Field(
        default=1,
        ge=1,
        le=64,
        description="GPUs per replica; KV heads split across them "
        "(must divide the KV heads, or be a multiple of them: heads are then replicated).",
    )
    memory_utilization: float = Field(
        default=0.9,
        ge=0.01,
        le=1,
        description="Share of GPU memory the engine may use for weights, "
        "activations and KV (vLLM's gpu_memory_utilization).",
    )
    activation_reserve_bytes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BYTES,
        description="Per-GPU memory kept for activations, workspaces and CUDA "
        "graphs; default: default_activation_reserve_bytes(model).",
    )
    weights_bytes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BYTES,
        description="Per-GPU weight bytes (e.g. quantised weights); default: "
        "num_params x dtype_bytes / tensor_parallel.",
    )
    kv_capacity_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="KV capacity of the replica in tokens; when given it is used "
        "directly and the memory terms are only reported.",
    )
    max_seq_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="Longest sequence served (prompt + output); default: the model's.",
    )
    num_gpu_blocks: int | None = Field(
        default=None,
        ge=2,
        le=MAX_TOKENS,
        description="vLLM's num_gpu_blocks (its start-up log): the paged pool has this "
        "many blocks of allocator.block_size_tokens, block 0 vLLM's null block, so "
        "num_gpu_blocks - 1 are usable. Paged allocator only.",
    )
    gpu_kv_cache_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="vLLM's 'GPU KV cache size: N tokens' (num_gpu_blocks x block_size, "
        "the null block included): paged, num_gpu_blocks = N / block_size_tokens; "
        "other allocators: N tokens of capacity (no null block).",
    )

    @field_validator("model")
    @classmethod
    def _known_model(
        cls, value: str | ModelConfigFile | ModelSpecConfig
    ) -> str | ModelConfigFile | ModelSpecConfig:
        if isinstance(value, str):
            check_model_name(value)
        return value

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | GpuSpecConfig) -> str | GpuSpecConfig:
        if isinstance(value, str):
            lookup_preset(GPUS, "gpu", value)
        return value

    @field_validator("tensor_parallel")
    @classmethod
    def _fits_heads(cls, tp: int, info: ValidationInfo) -> int:
        model = info.data.get("model")  # absent when the model itself was refused
        if isinstance(model, ModelSpecConfig):
            heads = model.num_kv_heads
        elif isinstance(model, str) and model in MODELS:
            heads = MODELS[model].num_kv_heads
        elif isinstance(model, str | ModelConfigFile):
            hf = model.hf_model if isinstance(model, ModelConfigFile) else shipped_model(model)
            if hf is None or hf.kv_latent_dim:  # MLA: the latent is whole on every rank
                return tp
            heads = hf.num_kv_heads
        else:
            return tp
        if heads % tp != 0 and tp % heads != 0:
            raise ValueError(
                f"tensor_parallel={tp} must divide num_kv_heads={heads} or be a multiple of it"
            )
        return tp

    @model_validator(mode="after")
    def _budget_fits(self) -> HardwareConfig:
        given = [name for name in KV_CAPACITY_FIELDS if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(
                f"{' and '.join(given)} both set the KV capacity: give one of "
                "kv_capacity_tokens, num_gpu_blocks and gpu_kv_cache_tokens"
            )
        if self.num_gpu_blocks is None and self.gpu_kv_cache_tokens is None:
            self.resolve()  # the vLLM figures need the allocator: checked when built
        return self

    def vllm_capacity_tokens(self, block_size_tokens: int | None) -> int | None:
        """The usable KV tokens vLLM's start-up figures mean, or None when neither is
        given. ``block_size_tokens``: the paged allocator's block (None: another
        allocator). Paged: ``(num_gpu_blocks - 1) x block_size_tokens`` (vLLM's
        ``BlockPool`` keeps block 0 as its null block). Others: ``gpu_kv_cache_tokens``
        tokens (no null block), and ``num_gpu_blocks`` is refused. Raises ValueError
        starting ``field hardware.FIELD:``."""
        blocks, tokens = self.num_gpu_blocks, self.gpu_kv_cache_tokens
        if blocks is None and tokens is None:
            return None
        if block_size_tokens is None:
            if tokens is None:
                raise ValueError(
                    f"field hardware.num_gpu_blocks: {blocks} counts the paged allocator's "
                    "blocks; with this allocator give gpu_kv_cache_tokens or "
                    "kv_capacity_tokens"
                )
            return tokens
        if tokens is not None:
            if tokens % block_size_tokens:
                raise ValueError(
                    f"field hardware.gpu_kv_cache_tokens: {tokens:,} is not a multiple of "
                    f"allocator.block_size_tokens {block_size_tokens} (vLLM prints "
                    "num_gpu_blocks x block_size)"
                )
            blocks = tokens // block_size_tokens
            if blocks < 2:
                raise ValueError(
                    f"field hardware.gpu_kv_cache_tokens: {tokens:,} is {blocks} block(s) "
                    f"of {block_size_tokens} tokens; vLLM needs at least 2 (one null block)"
                )
        assert blocks is not None
        return (blocks - 1) * block_size_tokens

    @property
    def model_spec(self) -> ModelSpec:
        """The resolved model, ``max_seq_tokens`` override applied."""
        hf = self.hf_model
        if hf is not None:
            spec = hf.to_spec()
        elif isinstance(self.model, str):
            spec = lookup_preset(MODELS, "model", self.model)
        else:
            assert isinstance(self.model, ModelSpecConfig)
            spec = self.model.to_spec()
        if self.max_seq_tokens is not None:
            spec = replace(spec, max_seq_tokens=self.max_seq_tokens)
        return spec

    @property
    def hf_model(self) -> HfModel | None:
        """The model read from a config.json (a file or a shipped preset), else None."""
        if isinstance(self.model, ModelConfigFile):
            return self.model.hf_model
        if isinstance(self.model, str) and self.model not in MODELS:
            return shipped_model(self.model)
        return None

    @property
    def gpu_spec(self) -> GpuSpec:
        """The resolved GPU."""
        return (
            lookup_preset(GPUS, "gpu", self.gpu)
            if isinstance(self.gpu, str)
            else self.gpu.to_spec()
        )

    @property
    def replica_usd_per_hour(self) -> float:
        """Price of one replica: ``tensor_parallel`` GPUs."""
        return self.tensor_parallel * self.gpu_spec.usd_per_hour

    def resolve(self, block_size_tokens: int | None = None) -> KvBudget:
        """The replica's KV budget. Raises ValueError (one line showing every term) when
        the derived budget leaves less than one token of KV memory.
        ``block_size_tokens``: the paged allocator's block, for ``num_gpu_blocks`` /
        ``gpu_kv_cache_tokens`` (see :meth:`vllm_capacity_tokens`)."""
        model, gpu, tp = self.model_spec, self.gpu_spec, self.tensor_parallel
        usable_bytes = int(gpu.memory_bytes * self.memory_utilization)
        weights_bytes = (
            self.weights_bytes
            if self.weights_bytes is not None
            else ceil_div(model.weights_bytes, tp)
        )
        activation_bytes = (
            self.activation_reserve_bytes
            if self.activation_reserve_bytes is not None
            else default_activation_reserve_bytes(model)
        )
        per_token = kv_bytes_per_token(model, tp)
        kv_bytes = usable_bytes - weights_bytes - activation_bytes
        budget = KvBudget(
            gpu_memory_bytes=gpu.memory_bytes,
            memory_utilization=self.memory_utilization,
            usable_bytes=usable_bytes,
            weights_bytes=weights_bytes,
            activation_reserve_bytes=activation_bytes,
            kv_bytes=kv_bytes,
            kv_bytes_per_token=per_token,
            kv_capacity_tokens=max(kv_bytes, 0) // per_token,
            tensor_parallel=tp,
        )
        vllm_tokens = self.vllm_capacity_tokens(block_size_tokens)
        if vllm_tokens is not None:
            return replace(
                budget,
                kv_bytes=vllm_tokens * per_token,
                kv_capacity_tokens=vllm_tokens,
                capacity_source="vllm",
            )
        if self.kv_capacity_tokens is not None:
            return replace(
                budget,
                kv_bytes=self.kv_capacity_tokens * per_token,
                kv_capacity_tokens=self.kv_capacity_tokens,
                capacity_source="override",
            )
        if budget.kv_capacity_tokens < 1:
            raise ValueError(
                f"no KV-cache memory left for {model.name} on {tp} x {gpu.name}: "
                f"usable_bytes {budget.usable_bytes:,} (gpu_memory_bytes x "
                f"memory_utilization {budget.memory_utilization:g}) - weights_bytes "
                f"{budget.weights_bytes:,} - activation_reserve_bytes "
                f"{budget.activation_reserve_bytes:,} = kv_bytes {budget.kv_bytes:,}, "
                f"under kv_bytes_per_token {budget.kv_bytes_per_token:,}: "
                "kv_capacity_tokens 0; raise memory_utilization or tensor_parallel, or "
                "give kv_capacity_tokens"
            )
        return budget
