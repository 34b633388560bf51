"""A scenario's model and GPU choice, validated at the edge: a preset by name, an inline
model or GPU (:class:`ModelSpecConfig`, :class:`GpuSpecConfig`) or a Hugging Face
``config.json`` (:class:`ModelConfigFile`); :data:`ModelChoice` and :data:`GpuChoice`
are the union types :class:`sim.scenario.hardware.HardwareConfig` holds, their errors
naming the branch taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag, model_validator

from sim.fields import MAX_BYTES, MAX_BYTES_PER_S, MAX_TOKENS
from sim.models.hardware import MODELS, GpuSpec, ModelSpec
from sim.models.presets import file_model, shipped_names
from sim.models.presets import shipped_model as read_shipped

if TYPE_CHECKING:
    from sim.models.hf_config import HfModel

_S = TypeVar("_S")


MAX_PARAMS = 10**15
"""Parameters of an inline model (a thousand times the largest served today)."""
MAX_FLOPS = 10**18
"""Dense FLOP/s of an inline GPU (an exaFLOP/s)."""
MIN_GPU_RATE = 10**9
"""The least bandwidth (bytes/s) and dense FLOP/s of an inline GPU: below it a step
would take minutes (``sim.simulate.parts`` refuses steps over a minute in any case)."""


class ModelSpecConfig(BaseModel):
    """An inline model (instead of a preset name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(default="custom", min_length=1, description="A label for results.")
    num_layers: int = Field(ge=1, le=1024, description="Transformer layers.")
    num_kv_heads: int = Field(ge=1, le=1024, description="KV heads per layer (GQA: < query heads).")
    head_dim: int = Field(ge=1, le=4096, description="Size of one attention head.")
    dtype_bytes: int = Field(default=2, ge=1, le=8, description="Bytes per weight and KV element.")
    num_params: int = Field(
        ge=1, le=MAX_PARAMS, description="Parameter count (weights = params x dtype)."
    )
    hidden_size: int = Field(ge=1, le=1 << 17, description="Model (residual) width.")
    max_seq_tokens: int = Field(
        ge=1, le=MAX_TOKENS, description="Longest sequence (prompt + output)."
    )

    def to_spec(self) -> ModelSpec:
        return ModelSpec(**self.model_dump())


class GpuSpecConfig(BaseModel):
    """An inline GPU (instead of a preset name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(default="custom", min_length=1, description="A label for results.")
    memory_bytes: int = Field(ge=1, le=MAX_BYTES, description="Total device memory, bytes.")
    hbm_bytes_per_s: float = Field(
        ge=MIN_GPU_RATE, le=MAX_BYTES_PER_S, description="Peak memory bandwidth, bytes/s."
    )
    dense_bf16_flops: float = Field(
        ge=MIN_GPU_RATE, le=MAX_FLOPS, description="Peak dense bf16 FLOP/s."
    )
    usd_per_hour: float = Field(
        default=0.0,
        ge=0,
        le=10**6,
        description="Price of one GPU per hour (a fleet pool's default price; 0: free).",
    )

    def to_spec(self) -> GpuSpec:
        return GpuSpec(**self.model_dump())


def lookup_preset(presets: Mapping[str, _S], what: str, name: str) -> _S:
    """The preset ``name`` of ``presets`` (ValueError naming the allowed ones)."""
    if name not in presets:
        raise ValueError(f"unknown {what} preset {name!r}; allowed: {', '.join(presets)}")
    return presets[name]


class ModelConfigFile(BaseModel):
    """A model read from a Hugging Face ``config.json``: a file on disk (``config``) or a
    shipped one by name (``preset``), with the serving engine's KV and weight dtypes."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    config: str | None = Field(
        default=None,
        min_length=1,
        description="A Hugging Face config.json (relative to the scenario file).",
    )
    preset: str | None = Field(
        default=None,
        min_length=1,
        description="A shipped config.json by name instead (fragsim hardware lists them).",
    )
    name: str | None = Field(
        default=None, min_length=1, description="A label for results; default: its folder."
    )
    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8"] = Field(
        default="auto", description="KV-cache element type (vLLM's; fp8 halves bf16's bytes)."
    )
    quantization: Literal["auto", "fp8"] = Field(
        default="auto",
        description="Weights: auto (as the config ships them) or fp8 (quantised at load, "
        "per-tensor scales, as vLLM's --quantization fp8).",
    )
    _model: HfModel | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _read(self) -> ModelConfigFile:
        if (self.config is None) == (self.preset is None):
            raise ValueError("give one of config (a config.json) and preset (a shipped name)")
        if self.preset is not None:
            if self.preset not in shipped_names():
                raise ValueError(
                    f"unknown config preset {self.preset!r}; allowed: {', '.join(shipped_names())}"
                )
            self._model = read_shipped(self.preset, self.kv_cache_dtype, self.quantization)
        else:
            assert self.config is not None
            self._model = file_model(self.config, self.name, self.kv_cache_dtype, self.quantization)
        return self

    @property
    def hf_model(self) -> HfModel:
        """The model the file describes (read by the validator, so never None here)."""
        assert self._model is not None
        return self._model


def shipped_model(name: str) -> HfModel | None:
    """A shipped config.json preset by name (``sim/models/configs``), or None."""
    return read_shipped(name) if name in shipped_names() else None


def model_preset_names() -> tuple[str, ...]:
    """Every model preset name: the built-in specs, then the shipped config files."""
    return (*MODELS, *shipped_names())


def check_model_name(name: str) -> None:
    """ValueError unless ``name`` is a built-in model spec or a shipped config.json."""
    if name not in MODELS and shipped_model(name) is None:
        raise ValueError(
            f"unknown model preset {name!r}; allowed: {', '.join(model_preset_names())}"
        )


def _preset_or_inline(value: object) -> str:
    return "preset" if isinstance(value, str) else "inline"


def _model_branch(value: object) -> str:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, ModelConfigFile) or (
        isinstance(value, dict) and ("config" in value or "preset" in value)
    ):
        return "config"
    return "inline"


# A preset name, a config.json or an inline mapping; errors name the branch taken.
ModelChoice = Annotated[
    Annotated[str, Tag("preset")]
    | Annotated[ModelConfigFile, Tag("config")]
    | Annotated[ModelSpecConfig, Tag("inline")],
    Discriminator(_model_branch),
]
GpuChoice = Annotated[
    Annotated[str, Tag("preset")] | Annotated[GpuSpecConfig, Tag("inline")],
    Discriminator(_preset_or_inline),
]
