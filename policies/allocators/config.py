"""Every allocator policy's configuration: the ``{kind: ..., ...}`` mapping a scenario
names, validated with pydantic at the scenario edge, and ``build`` for a fresh allocator.

The configurations live apart from the allocators so the allocator modules are plain,
typed Python that the optional compiled build (mypyc, see ``setup.py``) can compile;
pydantic models stay interpreted."""

# fragsim: pure: pydantic models
from __future__ import annotations

from typing import ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.buddy import BuddyBlocks
from policies.allocators.caching import CachingAllocator
from policies.allocators.compaction import CompactingAllocator
from policies.allocators.contiguous import ContiguousAllocator, Placer
from policies.allocators.extents import Fit, FreeExtentIndex
from policies.allocators.hybrid import HybridKvManager
from policies.allocators.paged import PagedAllocator
from policies.allocators.split_pools import SplitPoolsManager
from policies.allocators.static import StaticAllocator, StaticMode
from policies.allocators.vm_paged import VmPagedAllocator, page_tokens_for
from policies.allocators.window_pools import WindowPoolsManager

CONTIGUOUS_PER_CHUNK = (
    "allocator kind {kind} keeps each request in one contiguous buffer: allocated a "
    "chunk at a time, the buffer would grow at every prefill chunk, moving and copying "
    "the KV computed so far whenever the extent after it is taken (vLLM allocates per "
    "chunk because its blocks are independent pages); set allocate_per_chunk: false, "
    "which places the prompt's buffer whole at admission (the prompt's length is known "
    "then), or use allocator kind paged"
)
"""The refusal of ``scheduler.allocate_per_chunk`` on a contiguous policy (docs/vllm.md
measures what per-chunk growth would cost)."""


class AllocatorConfig(BaseModel):
    """A policy as a scenario names it: ``{kind: best_fit, ...parameters}``.

    Subclasses fix ``kind`` to a ``Literal`` and give every parameter bounds and a
    docstring; ``build`` makes a fresh allocator (a restart builds a new one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    kv_manager: ClassVar[bool] = False
    """Whether this kind is a KV manager: it splits memory by layer kind (KV cache groups,
    pools per window), so a KV tier's chunks cannot live in it (``sim.scenario.offload``
    refuses it there). A new KV manager sets it on its own config, as the shipped three do."""

    def build(self, spec: PoolSpec) -> Allocator:
        raise NotImplementedError

    def caches_prefixes(self) -> bool:
        """Does the policy keep a prefix cache (the requests table then has vLLM's
        prefix-cache columns, ``sim.results.frames.PREFIX_CACHE_FIELDS``)? Default: no."""
        return False

    def why_not_per_chunk(self) -> str | None:
        """Why ``scheduler.allocate_per_chunk`` (vLLM v1's allocation of each prefill
        chunk as it runs) cannot apply to this policy; None where it does (``paged``)."""
        return (
            f"vLLM's per-chunk allocation is modelled, and held to vLLM's scheduler, on "
            f"a paged pool only, not on allocator kind {self.kind}; use kind paged, or "
            f"allocate_per_chunk: false (the prompt is placed whole at admission)"
        )


class GrowthConfig(AllocatorConfig):
    """Initial buffer and growth-by-reallocation parameters of the contiguous policies."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    initial_extra_tokens: int = Field(64, ge=0, le=1_000_000)
    """Slots beyond the prompt reserved at admission (the seed's 64)."""
    growth_factor: float = Field(2.0, gt=1.0, le=16.0)
    """A full buffer is replaced by one this many times larger (when no chunk is set)."""
    growth_chunk_tokens: int = Field(0, ge=0, le=10_000_000)
    """When > 0, a full buffer grows by whole chunks of this many slots instead."""

    def why_not_per_chunk(self) -> str | None:
        return CONTIGUOUS_PER_CHUNK.format(kind=self.kind)


class _FitConfig(GrowthConfig):
    def build(self, spec: PoolSpec) -> Allocator:
        index = FreeExtentIndex(spec.capacity_tokens, cast(Fit, self.kind))
        return ContiguousAllocator(
            spec,
            index,
            initial_extra_tokens=self.initial_extra_tokens,
            growth_factor=self.growth_factor,
            growth_chunk_tokens=self.growth_chunk_tokens,
        )


class FirstFitConfig(_FitConfig):
    """Contiguous buffers at the lowest address that fits."""

    kind: Literal["first_fit"] = "first_fit"


class BestFitConfig(_FitConfig):
    """Contiguous buffers in the smallest free extent that fits (lowest address on ties)."""

    kind: Literal["best_fit"] = "best_fit"


class NextFitConfig(_FitConfig):
    """First fit starting where the previous placement ended (a roving pointer)."""

    kind: Literal["next_fit"] = "next_fit"


class WorstFitConfig(_FitConfig):
    """Contiguous buffers carved from the largest free extent."""

    kind: Literal["worst_fit"] = "worst_fit"


class StaticConfig(AllocatorConfig):
    """Reserve a fixed span at admission (max length, power of two, or oracle length)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    kind: Literal["static"] = "static"
    mode: StaticMode = "max"
    """How large a span to reserve: ``max`` length, ``pow2`` of the final length, or the
    exact final length (``oracle``)."""
    max_tokens: int | None = Field(None, ge=1, le=100_000_000)
    """Span reserved in ``max`` mode; None means ``PoolSpec.max_seq_tokens``."""
    placement: Literal["first_fit", "best_fit", "buddy"] = "first_fit"
    """The allocator underneath that places the spans."""
    min_block_tokens: int = Field(1, ge=1, le=1 << 30)
    """With ``placement: buddy``, the smallest block (a power of two)."""

    def why_not_per_chunk(self) -> str | None:
        return CONTIGUOUS_PER_CHUNK.format(kind=self.kind)

    @field_validator("min_block_tokens")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"min_block_tokens must be a power of two, got {value}")
        return value

    def build(self, spec: PoolSpec) -> Allocator:
        placer: Placer
        if self.placement == "buddy":
            placer = BuddyBlocks(spec.capacity_tokens, self.min_block_tokens)
        else:
            placer = FreeExtentIndex(spec.capacity_tokens, self.placement)
        max_tokens = self.max_tokens if self.max_tokens is not None else spec.max_seq_tokens
        return StaticAllocator(spec, placer, mode=self.mode, max_tokens=max_tokens)


class BuddyConfig(GrowthConfig):
    """Power-of-two blocks with split and merge; a full block is replaced by a block of
    the next power of two (growth by reallocation)."""

    kind: Literal["buddy"] = "buddy"
    min_block_tokens: int = Field(16, ge=1, le=1 << 30)
    """Smallest block handed out, a power of two (smaller requests are rounded up)."""

    @field_validator("min_block_tokens")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"min_block_tokens must be a power of two, got {value}")
        return value

    def build(self, spec: PoolSpec) -> Allocator:
        return ContiguousAllocator(
            spec,
            BuddyBlocks(spec.capacity_tokens, self.min_block_tokens),
            initial_extra_tokens=self.initial_extra_tokens,
            growth_factor=self.growth_factor,
            growth_chunk_tokens=self.growth_chunk_tokens,
        )


class CompactionConfig(GrowthConfig):
    """A contiguous fit policy that compacts live buffers when a placement fails for
    fragmentation, then retries."""

    kind: Literal["compaction"] = "compaction"
    fit: Fit = "best_fit"
    """The contiguous fit policy wrapped."""

    def build(self, spec: PoolSpec) -> Allocator:
        return CompactingAllocator(
            spec,
            self.fit,
            initial_extra_tokens=self.initial_extra_tokens,
            growth_factor=self.growth_factor,
            growth_chunk_tokens=self.growth_chunk_tokens,
        )


class PagedConfig(AllocatorConfig):
    """``{kind: paged}``: vLLM-style paged KV cache (PagedAttention, vLLM v1 block pool)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["paged"] = "paged"
    block_size_tokens: int = Field(16, ge=1, le=1 << 20)
    """Tokens per KV block (vLLM default 16)."""
    prefix_caching: bool = True
    """Reuse cached full prompt blocks across requests (vLLM automatic prefix caching)."""
    hash_block_tokens: int | None = Field(None, ge=1, le=1 << 20)
    """Tokens each of a request's ``prefix_hashes`` covers (Mooncake traces: 512); None
    means the pool's block size."""
    cache_partial_block: bool = False
    """Also cache a prompt's partly filled last block when a hash covers it (Mooncake's
    accounting); vLLM caches only full blocks."""
    cache_generated_blocks: bool = False
    """Also cache full blocks of generated tokens, found again by the same request when
    it is recomputed after a preemption (vLLM v1 does; needs a prefix hash per block and
    ``scheduler.allocate_per_chunk``)."""
    reuse_uncached_first: bool = False
    """Freed blocks nothing can hit go to the free queue's head, cached ones to its tail
    (vLLM 0.33's eviction order); False: every freed block to the tail."""

    def caches_prefixes(self) -> bool:
        return self.prefix_caching

    def why_not_per_chunk(self) -> str | None:
        return None

    def build(self, spec: PoolSpec) -> PagedAllocator:
        return PagedAllocator(
            spec,
            block_size_tokens=self.block_size_tokens,
            prefix_caching=self.prefix_caching,
            hash_block_tokens=self.hash_block_tokens,
            cache_partial_block=self.cache_partial_block,
            cache_generated_blocks=self.cache_generated_blocks,
            reuse_uncached_first=self.reuse_uncached_first,
        )


class VmPagedConfig(AllocatorConfig):
    """``{kind: vm_paged}``: vAttention-style demand-mapped pages behind contiguous
    virtual ranges."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["vm_paged"] = "vm_paged"
    page_bytes: int = Field(2 << 20, ge=64 << 10, le=2 << 20)
    """Physical page size mapped into each K/V buffer (vAttention: 64 KiB to 2 MiB)."""
    buffers_per_token: int | None = Field(None, ge=1, le=4096)
    """Virtual buffers a token's KV spans on one GPU: K and V per layer. None (default):
    2 x ``PoolSpec.num_layers``, i.e. derived from the model (64 for 32 layers)."""

    def page_tokens(self, spec: PoolSpec) -> int:
        """Tokens per page group for ``spec``'s model and tensor parallelism."""
        buffers = self.buffers_per_token
        if buffers is None:
            buffers = 2 * spec.num_layers
        return page_tokens_for(self.page_bytes, buffers, spec.gpu_kv_bytes_per_token)

    def build(self, spec: PoolSpec) -> VmPagedAllocator:
        return VmPagedAllocator(spec, page_tokens=self.page_tokens(spec))


class CachingConfig(AllocatorConfig):
    """``{kind: caching}``: growing per-request KV tensors on PyTorch's CUDA caching
    allocator (naive Hugging Face / custom serving stacks)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["caching"] = "caching"
    expandable_segments: bool = False
    """PyTorch ``expandable_segments:True``: one growing segment per pool, mapped in pages."""
    growth_factor: float = Field(2.0, ge=1.0, le=16.0)
    """A full tensor is reallocated to this factor of its size (1.0: exactly the new
    length, as ``torch.cat`` each step)."""

    def build(self, spec: PoolSpec) -> CachingAllocator:
        return CachingAllocator(
            spec, expandable_segments=self.expandable_segments, growth_factor=self.growth_factor
        )


class HybridKvConfig(AllocatorConfig):
    """``{kind: hybrid_kv}``: vLLM v1's hybrid KV cache manager (KV cache groups of equal
    size with padding layers, one page size, window freeing, Mamba state blocks)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["hybrid_kv"] = "hybrid_kv"
    kv_manager: ClassVar[bool] = True
    block_size_tokens: int = Field(16, ge=1, le=1 << 16)
    """Attention tokens per block (vLLM's block_size; pushed up to hold a Mamba state)."""
    prefill_chunk_tokens: int = Field(8192, ge=1, le=1 << 24)
    """vLLM's max_num_batched_tokens: sizes the window's admission reserve."""

    def build(self, spec: PoolSpec) -> HybridKvManager:
        return HybridKvManager(
            spec,
            block_size_tokens=self.block_size_tokens,
            prefill_chunk_tokens=self.prefill_chunk_tokens,
        )


class SplitPoolsConfig(AllocatorConfig):
    """``{kind: split_pools}``: SGLang's full / SWA / Mamba-state pools split by fixed
    ratios."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["split_pools"] = "split_pools"
    kv_manager: ClassVar[bool] = True
    page_size_tokens: int = Field(1, ge=1, le=1 << 16)
    """Tokens per page of the KV pools (SGLang's --page-size, default 1)."""
    swa_full_tokens_ratio: float = Field(0.8, gt=0.0, le=64.0)
    """SWA pool tokens per full pool token (SGLang's --swa-full-tokens-ratio)."""
    mamba_full_memory_ratio: float = Field(0.9, gt=0.0, le=64.0)
    """State pool bytes per KV pool byte (SGLang's --mamba-full-memory-ratio)."""
    chunked_prefill_tokens: int = Field(8192, ge=1, le=1 << 24)
    """SGLang's --chunked-prefill-size: a prompt holds at most its window + one chunk of
    the SWA pool while it is prefilled."""

    def build(self, spec: PoolSpec) -> SplitPoolsManager:
        return SplitPoolsManager(
            spec,
            page_size_tokens=self.page_size_tokens,
            swa_full_tokens_ratio=self.swa_full_tokens_ratio,
            mamba_full_memory_ratio=self.mamba_full_memory_ratio,
            chunked_prefill_tokens=self.chunked_prefill_tokens,
        )


class WindowPoolsConfig(AllocatorConfig):
    """``{kind: window_pools}``: TensorRT-LLM's one pool per attention window, split by
    window x bytes per token."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["window_pools"] = "window_pools"
    kv_manager: ClassVar[bool] = True
    tokens_per_block: int = Field(32, ge=1, le=1 << 16)
    """Tokens per block (TensorRT-LLM's tokens_per_block, default 32)."""
    reserve_final_length: bool = True
    """Reserve every block to the request's final length at admission
    (GUARANTEED_NO_EVICT); false: blocks as tokens come (MAX_UTILIZATION)."""
    max_state_slots: int = Field(256, ge=1, le=1 << 20)
    """Mamba request states carved out first (TensorRT-LLM's max_batch_size)."""

    def build(self, spec: PoolSpec) -> WindowPoolsManager:
        return WindowPoolsManager(
            spec,
            tokens_per_block=self.tokens_per_block,
            reserve_final_length=self.reserve_final_length,
            max_state_slots=self.max_state_slots,
        )
