"""Decoder layers of a preset's real shapes, random weights, paged attention.

A layer is Llama's: RMSNorm, one QKV projection, rotary embeddings, paged attention
(``write_kv`` of the new tokens, then the prefill kernel over the packed prompt chunks
and the decode kernel over the one-token sequences), an output projection, RMSNorm and a
SwiGLU MLP, each with its residual. Weights are drawn from a seeded generator; nothing is
downloaded. :class:`DecoderStack` runs ``layers_run`` layers; a model's time is the
measured time scaled to full depth (``time * num_layers / layers_run``: the layers are
identical, and embedding and LM head are left out).

Shapes come from ``sim.models.hardware``'s model presets (hidden size, KV heads, head dim,
layers); query heads are ``hidden_size // head_dim`` (true of every preset) and the MLP
width is each model's ``intermediate_size`` from its Hugging Face ``config.json``
(:data:`INTERMEDIATE_SIZE`: the presets do not carry it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_backend.device import Kernels
from sim.models.hardware import MODELS

INTERMEDIATE_SIZE = {
    "opt-13b": 20480,  # OPT's ffn_dim (a ReLU MLP there; run here as SwiGLU of that width)
    "llama-2-7b": 11008,
    "llama-2-13b": 13824,
    "llama-2-70b": 28672,
    "llama-3-8b": 14336,
    "llama-3-70b": 28672,
    "mistral-7b": 14336,
    "qwen2.5-7b": 18944,
}
"""``intermediate_size`` of each preset, from its Hugging Face ``config.json``."""


@dataclass(frozen=True)
class ModelShape:
    """The shapes one decoder layer needs, and the model's depth."""

    name: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_layers: int
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: {self.num_heads} query heads not a multiple of "
                f"{self.num_kv_heads} KV heads"
            )

    @classmethod
    def preset(cls, name: str) -> ModelShape:
        """The shape of a ``sim.models.hardware`` model preset (ValueError naming the choices)."""
        if name not in MODELS:
            raise ValueError(f"unknown model preset {name!r}; allowed: {', '.join(MODELS)}")
        spec = MODELS[name]
        return cls(
            name=spec.name,
            hidden_size=spec.hidden_size,
            num_heads=spec.hidden_size // spec.head_dim,
            num_kv_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            intermediate_size=INTERMEDIATE_SIZE[spec.name],
            num_layers=spec.num_layers,
        )

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Both K and V, every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


TINY = ModelShape(
    "tiny",
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    num_layers=4,
)
"""A shape for CPU tests (GQA 4/2)."""


@dataclass
class StepBatch:
    """One step's tokens, packed: the prefill chunks' tokens first, then one token per
    decoding sequence. Index tensors are on the device."""

    positions: torch.Tensor
    """``[T]`` int64: each token's position in its sequence."""
    slot_mapping: torch.Tensor
    """``[T]`` int64: where each token's K/V is written."""
    prefill_tokens: int
    prefill_block_tables: torch.Tensor
    prefill_context_lens: torch.Tensor
    query_start_loc: torch.Tensor
    """``[P+1]`` int32 offsets of the P prefill chunks in the packed tokens."""
    decode_block_tables: torch.Tensor
    decode_context_lens: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate halves (Llama's ``rotate_half``); ``x`` is ``[T, heads, head_dim]``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class DecoderLayer:
    """One layer's weights and forward (see the module doc)."""

    def __init__(
        self, shape: ModelShape, gen: torch.Generator, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.shape = shape
        h, d = shape.hidden_size, shape.head_dim
        qkv = (shape.num_heads + 2 * shape.num_kv_heads) * d

        def weight(rows: int, cols: int) -> torch.Tensor:
            w = torch.randn((rows, cols), generator=gen, dtype=torch.float32) / cols**0.5
            return w.to(dtype=dtype, device=device)

        self.w_qkv = weight(h, qkv)
        self.w_o = weight(shape.num_heads * d, h)
        self.w_gate_up = weight(h, 2 * shape.intermediate_size)
        self.w_down = weight(shape.intermediate_size, h)
        self.norm1 = torch.ones(h, dtype=dtype, device=device)
        self.norm2 = torch.ones(h, dtype=dtype, device=device)
        self.scale = d**-0.5

    def forward(
        self,
        x: torch.Tensor,
        batch: StepBatch,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        kernels: Kernels,
    ) -> torch.Tensor:
        s = self.shape
        t, d = x.shape[0], s.head_dim
        qkv = _rms_norm(x, self.norm1) @ self.w_qkv
        q = qkv[:, : s.num_heads * d].view(t, s.num_heads, d)
        k = qkv[:, s.num_heads * d : (s.num_heads + s.num_kv_heads) * d].view(t, s.num_kv_heads, d)
        v = qkv[:, (s.num_heads + s.num_kv_heads) * d :].reshape(t, s.num_kv_heads, d)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kernels.write_kv(k.contiguous(), v.contiguous(), k_cache, v_cache, batch.slot_mapping)
        p = batch.prefill_tokens
        parts = []
        if p:
            parts.append(
                kernels.paged_prefill(
                    q[:p].contiguous(),
                    k_cache,
                    v_cache,
                    batch.prefill_block_tables,
                    batch.prefill_context_lens,
                    batch.query_start_loc,
                    self.scale,
                )
            )
        if t > p:
            parts.append(
                kernels.paged_decode(
                    q[p:].contiguous(),
                    k_cache,
                    v_cache,
                    batch.decode_block_tables,
                    batch.decode_context_lens,
                    self.scale,
                )
            )
        attn = parts[0] if len(parts) == 1 else torch.cat(parts)
        x = x + attn.reshape(t, s.num_heads * d) @ self.w_o
        gate, up = (_rms_norm(x, self.norm2) @ self.w_gate_up).chunk(2, dim=-1)
        return x + (torch.nn.functional.silu(gate) * up) @ self.w_down


class DecoderStack:
    """``layers_run`` decoder layers over a paged KV pool of as many layers."""

    def __init__(
        self,
        shape: ModelShape,
        layers_run: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        kernels: Kernels,
        seed: int = 0,
    ) -> None:
        if not 1 <= layers_run <= shape.num_layers:
            raise ValueError(f"layers_run must be in [1, {shape.num_layers}], got {layers_run}")
        gen = torch.Generator().manual_seed(seed)
        self.shape = shape
        self.layers_run = layers_run
        self.dtype = dtype
        self.device = device
        self.kernels = kernels
        self.layers = [DecoderLayer(shape, gen, dtype, device) for _ in range(layers_run)]
        self._gen = gen
        half = shape.head_dim // 2
        self._inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(half, device=device) / half))

    @property
    def depth_scale(self) -> float:
        """Full depth over layers run: multiply a measured time by it."""
        return self.shape.num_layers / self.layers_run

    def inputs(self, tokens: int) -> torch.Tensor:
        """Random hidden states ``[tokens, hidden]`` (the embedding's output)."""
        x = torch.randn((tokens, self.shape.hidden_size), dtype=torch.float32, generator=self._gen)
        return x.to(dtype=self.dtype, device=self.device)

    def forward(
        self,
        x: torch.Tensor,
        batch: StepBatch,
        k_caches: list[torch.Tensor],
        v_caches: list[torch.Tensor],
    ) -> torch.Tensor:
        """Every layer run, each with its own cache."""
        freqs = batch.positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
        for layer, k_cache, v_cache in zip(self.layers, k_caches, v_caches, strict=True):
            x = layer.forward(x, batch, cos, sin, k_cache, v_cache, self.kernels)
        return x
