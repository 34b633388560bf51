"""Model and GPU presets, and the KV-cache memory budget of one replica.

A *replica* is one model instance served by ``tensor_parallel`` GPUs. With tensor
parallelism every rank holds its share of every token's K and V (the KV heads are split
across ranks), so the replica's KV capacity in tokens equals one GPU's KV bytes divided
by one GPU's KV bytes per token. All byte terms of :class:`KvBudget` are per GPU; token
counts are per replica.

Capacity, as vLLM budgets it (``gpu_memory_utilization`` caps everything the engine
uses: weights, activations and the KV cache)::

    usable_bytes       = floor(gpu_memory_bytes * memory_utilization)
    kv_bytes           = usable_bytes - weights_bytes - activation_reserve_bytes
    kv_capacity_tokens = kv_bytes // kv_bytes_per_token

Every term can be overridden in a scenario's ``hardware:`` block
(:class:`sim.scenario.hardware.HardwareConfig`, the pydantic edge); a scenario may also
give ``kv_capacity_tokens`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer as far as memory and roofline time need it."""

    name: str
    num_layers: int
    num_kv_heads: int
    """Key/value heads per layer (fewer than query heads under GQA/MQA)."""
    head_dim: int
    dtype_bytes: int
    """Bytes per weight and per KV element (2 for fp16/bf16)."""
    num_params: int
    hidden_size: int
    max_seq_tokens: int
    """Longest sequence (prompt + output) the model serves."""
    kv_latent_dim: int = 0
    """MLA (a model read from its config.json): elements of the one latent per token and
    layer, held whole on every tensor-parallel rank; 0: K and V per head."""
    kv_dtype_bytes: int = 0
    """Bytes per KV element (``kv_cache_dtype: fp8``: 1); 0: ``dtype_bytes``."""
    quantized_weights_bytes: int = 0
    """All weights as stored (quantised formats, scales included); 0: params x dtype."""
    active_params: int = 0
    """Parameters one token's matmuls use (MoE: the routed experts only); 0: num_params."""
    tp_allreduces_per_step: int = 0
    """Tensor-parallel all-reduces in one forward pass (one after each token mixer and
    each MLP); 0: ``2 x num_layers``. A hybrid's Mamba and MLP-only blocks count too."""

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "num_kv_heads",
            "head_dim",
            "dtype_bytes",
            "num_params",
            "hidden_size",
            "max_seq_tokens",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(
                    f"model {self.name!r}: {field} must be > 0, got {getattr(self, field)}"
                )

    @property
    def weights_bytes(self) -> int:
        """All weights on one GPU (tp = 1)."""
        return self.quantized_weights_bytes or self.num_params * self.dtype_bytes

    @property
    def allreduces_per_step(self) -> int:
        """Tensor-parallel all-reduces per forward pass (see ``tp_allreduces_per_step``)."""
        return self.tp_allreduces_per_step or 2 * self.num_layers

    @property
    def compute_params(self) -> int:
        """Parameters whose FLOPs one token costs (``2 x`` this per token)."""
        return self.active_params or self.num_params


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: memory, HBM bandwidth, dense bf16 peak and price."""

    name: str
    memory_bytes: int
    """Total device memory as the driver reports it (nvidia-smi MiB x 2^20)."""
    hbm_bytes_per_s: float
    dense_bf16_flops: float
    """Peak dense (no sparsity) bf16 tensor-core FLOP/s."""
    usd_per_hour: float
    """A cloud on-demand price of one GPU-hour (instance price / GPUs per instance;
    :data:`GPU_PRICE_SOURCE`)."""

    def __post_init__(self) -> None:
        for field in ("memory_bytes", "hbm_bytes_per_s", "dense_bf16_flops"):
            if getattr(self, field) <= 0:
                raise ValueError(
                    f"gpu {self.name!r}: {field} must be > 0, got {getattr(self, field)}"
                )
        if self.usd_per_hour < 0:
            raise ValueError(f"gpu {self.name!r}: usd_per_hour must be >= 0")


# Architecture numbers from each model's Hugging Face config.json; parameter counts are
# exact sums of the weight shapes in that config (embeddings, untied LM head where the
# model has one, norms, biases). All presets are fp16/bf16 (2 bytes).
_MODEL_PRESETS = (
    # facebook/opt-13b: MHA, 40 heads, tied embeddings, learned positions (2048 + 2).
    ModelSpec("opt-13b", 40, 40, 128, 2, 12_853_473_280, 5120, 2048),
    # meta-llama/Llama-2-7b-hf: MHA.
    ModelSpec("llama-2-7b", 32, 32, 128, 2, 6_738_415_616, 4096, 4096),
    # meta-llama/Llama-2-13b-hf: MHA.
    ModelSpec("llama-2-13b", 40, 40, 128, 2, 13_015_864_320, 5120, 4096),
    # meta-llama/Llama-2-70b-hf: GQA, 64 query / 8 KV heads.
    ModelSpec("llama-2-70b", 80, 8, 128, 2, 68_976_648_192, 8192, 4096),
    # meta-llama/Meta-Llama-3-8B: GQA, 32 query / 8 KV heads, vocab 128256.
    ModelSpec("llama-3-8b", 32, 8, 128, 2, 8_030_261_248, 4096, 8192),
    # meta-llama/Meta-Llama-3-70B: GQA, 64 query / 8 KV heads.
    ModelSpec("llama-3-70b", 80, 8, 128, 2, 70_553_706_496, 8192, 8192),
    # mistralai/Mistral-7B-Instruct-v0.2: GQA 32/8, 32k context, no sliding window.
    ModelSpec("mistral-7b", 32, 8, 128, 2, 7_241_732_096, 4096, 32768),
    # Qwen/Qwen2.5-7B-Instruct: GQA 28/4, untied LM head, 32k native context (128k YaRN).
    ModelSpec("qwen2.5-7b", 28, 4, 128, 2, 7_615_616_512, 3584, 32768),
)

GPU_PRICE_SOURCE = (
    "on-demand list price per GPU (instance price / GPUs in it), read mid-2025: "
    "GCP us-central1 a2-highgpu-1g, a2-ultragpu-1g, g2-standard-8; AWS us-east-1 "
    "p5.48xlarge and p5e.48xlarge after the June 2025 cut, g5.xlarge"
)
"""Where the presets' ``usd_per_hour`` come from. The one price table: ``fragsim
hardware`` prints it and a fleet pool's cost defaults to it (``PoolConfig.usd_per_gpu_hour``
overrides it with a contract's price)."""

# Memory: nvidia-smi's total (MiB). Bandwidth and dense bf16 FLOP/s: NVIDIA datasheets
# (A100 SXM, H100 SXM5, H200 SXM, L4, A10G per Baseten's A10 vs A10G comparison).
# $/hour: GPU_PRICE_SOURCE, the instance named beside each preset.
_GPU_PRESETS = (
    GpuSpec("a100-40gb", 40_960 * MIB, 1.555e12, 312e12, 3.67),  # a2-highgpu-1g
    GpuSpec("a100-80gb", 81_920 * MIB, 2.039e12, 312e12, 5.07),  # a2-ultragpu-1g
    GpuSpec("h100-80gb", 81_559 * MIB, 3.35e12, 989e12, 6.88),  # p5.48xlarge / 8
    GpuSpec("h200-141gb", 143_771 * MIB, 4.8e12, 989e12, 7.91),  # p5e.48xlarge / 8
    GpuSpec("l4", 23_034 * MIB, 300e9, 121e12, 0.85),  # g2-standard-8
    GpuSpec("a10g", 23_028 * MIB, 600e9, 70e12, 1.01),  # g5.xlarge
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name: m for m in _MODEL_PRESETS})
"""Model presets by name (read-only)."""
GPUS: Mapping[str, GpuSpec] = MappingProxyType({g.name: g for g in _GPU_PRESETS})
"""GPU presets by name (read-only)."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_heads_per_gpu(model: ModelSpec, tp: int = 1) -> int:
    """KV heads one tensor-parallel rank holds: the heads split evenly across ranks, and
    when there are more ranks than KV heads each rank keeps (a replica of) one head, as
    vLLM does. Always at least 1."""
    if tp < 1:
        raise ValueError(f"tensor parallel degree must be >= 1, got {tp}")
    return ceil_div(model.num_kv_heads, tp)


def kv_bytes_per_token(model: ModelSpec, tp: int = 1) -> int:
    """Bytes one token's K and V take over all layers on one GPU of a ``tp``-way replica:
    ``2 * num_layers * kv_heads_per_gpu * head_dim * kv_dtype_bytes`` (with ``tp = 1``, the
    whole token); MLA: ``num_layers * kv_latent_dim * kv_dtype_bytes`` on every rank."""
    elem = model.kv_dtype_bytes or model.dtype_bytes
    if model.kv_latent_dim:
        if tp < 1:
            raise ValueError(f"tensor parallel degree must be >= 1, got {tp}")
        return model.num_layers * model.kv_latent_dim * elem
    return 2 * model.num_layers * kv_heads_per_gpu(model, tp) * model.head_dim * elem


ACTIVATION_BASE_BYTES = 1 * GIB
"""CUDA context, cuBLAS/NCCL workspaces and CUDA graphs (the default reserve's floor)."""
ACTIVATION_PROFILE_TOKENS = 8192
"""Tokens in the profiling forward pass the default reserve is sized for (vLLM profiles
one step of ``max_num_batched_tokens``)."""
ACTIVATION_BYTES_PER_HIDDEN = 16
"""Peak live activation elements per token, in units of ``hidden_size`` (residual, QKV,
the gated-MLP intermediate at ~3.5x hidden twice, temporaries)."""


def default_activation_reserve_bytes(model: ModelSpec) -> int:
    """The default per-GPU activation reserve: ``ACTIVATION_BASE_BYTES +
    ACTIVATION_PROFILE_TOKENS * hidden_size * dtype_bytes * ACTIVATION_BYTES_PER_HIDDEN``
    (2 GiB for Llama-2-7B). A rough estimate of what vLLM's profiling run leaves out of
    the KV cache; override it with a measured value where you have one."""
    return ACTIVATION_BASE_BYTES + (
        ACTIVATION_PROFILE_TOKENS
        * model.hidden_size
        * model.dtype_bytes
        * ACTIVATION_BYTES_PER_HIDDEN
    )


@dataclass(frozen=True, slots=True)
class KvBudget:
    """The KV-cache budget of one replica with every term visible. Byte terms are per
    GPU; ``kv_capacity_tokens`` is per replica (= per GPU, see the module docstring).

    Invariant (when ``capacity_source == "derived"``)::

        kv_bytes == usable_bytes - weights_bytes - activation_reserve_bytes > 0
        kv_capacity_tokens == kv_bytes // kv_bytes_per_token >= 1
    """

    gpu_memory_bytes: int
    memory_utilization: float
    usable_bytes: int
    weights_bytes: int
    """Weights on one GPU (all weights / tensor_parallel unless overridden)."""
    activation_reserve_bytes: int
    kv_bytes: int
    """KV bytes on one GPU (``kv_capacity_tokens * kv_bytes_per_token`` when the
    capacity is overridden)."""
    kv_bytes_per_token: int
    """One token's K and V on one GPU."""
    kv_capacity_tokens: int
    tensor_parallel: int = 1
    capacity_source: Literal["derived", "override", "vllm"] = "derived"
    """``vllm``: from ``num_gpu_blocks`` / ``gpu_kv_cache_tokens`` (null block left out)."""

    @property
    def replica_kv_bytes_per_token(self) -> int:
        """One token's K and V over the whole replica (all ranks, replicated heads
        included): bytes for reports and replica-wide byte totals. Anything sized per
        rank (a page or segment of one GPU's pool, a rank's swap over its own link) uses
        ``kv_bytes_per_token``, the per-GPU share; with tp = 1 the two are equal."""
        return self.kv_bytes_per_token * self.tensor_parallel

    def describe(self) -> str:
        """The budget as one line per term (for logs and ``fragsim hardware``)."""
        rows = (
            ("gpu_memory_bytes", f"{self.gpu_memory_bytes:,}"),
            ("x memory_utilization", f"{self.memory_utilization}"),
            ("= usable_bytes", f"{self.usable_bytes:,}"),
            (
                "- weights_bytes",
                f"{self.weights_bytes:,} (per GPU, tensor_parallel={self.tensor_parallel})",
            ),
            ("- activation_reserve_bytes", f"{self.activation_reserve_bytes:,}"),
            ("= kv_bytes", f"{self.kv_bytes:,}"),
            ("/ kv_bytes_per_token", f"{self.kv_bytes_per_token:,}"),
            ("= kv_capacity_tokens", f"{self.kv_capacity_tokens:,} ({self.capacity_source})"),
        )
        return "\n".join(f"  {term:<28} {value}" for term, value in rows)
