"""``write_kv``: scatter the K/V of new tokens into their cache slots.

One program per token copies its ``[kv_heads, head_dim]`` tile of K and of V to
``cache[slot // block_size, slot % block_size]``. The slot is int64 and every offset
is computed in int64 (``block_id * stride`` exceeds 2^31 elements in a large pool).
Slots are checked in Python first: inside the pool and pairwise distinct (two
programs writing one slot would race).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_backend.kernels import checks


@triton.jit
def _write_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_cs,
    stride_ch,
    kv_heads,
    BLOCK_SIZE: tl.constexpr,
    HEADS_P: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    block_id = slot // BLOCK_SIZE
    row = slot % BLOCK_SIZE
    heads = tl.arange(0, HEADS_P).to(tl.int64)
    dims = tl.arange(0, HEAD_DIM).to(tl.int64)
    mask = (heads < kv_heads)[:, None]
    src_k = t * stride_kt + heads[:, None] * stride_kh + dims[None, :]
    src_v = t * stride_vt + heads[:, None] * stride_vh + dims[None, :]
    dst = block_id * stride_cb + row * stride_cs + heads[:, None] * stride_ch + dims[None, :]
    tl.store(k_cache_ptr + dst, tl.load(k_ptr + src_k, mask=mask), mask=mask)
    tl.store(v_cache_ptr + dst, tl.load(v_ptr + src_v, mask=mask), mask=mask)


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``k``/``v`` (``[T, kv_heads, head_dim]``, the caches' dtype) to slots
    ``slot_mapping`` (``[T]`` int64, ``block_id * block_size + row``), in place.
    ``k_cache`` and ``v_cache`` must share strides."""
    num_blocks, block_size, kv_heads, head_dim = checks.check_cache(k_cache, v_cache)
    if v_cache.stride() != k_cache.stride():
        raise ValueError(
            f"v_cache: expected the strides of k_cache {k_cache.stride()}, got {v_cache.stride()}"
        )
    for name, t in (("k", k), ("v", v)):
        if t.dim() != 3 or tuple(t.shape[1:]) != (kv_heads, head_dim):
            raise ValueError(
                f"{name}: expected shape [T, {kv_heads}, {head_dim}] (the cache's heads and dim), "
                f"got {tuple(t.shape)}"
            )
        if t.dtype != k_cache.dtype:
            raise ValueError(f"{name}: expected the cache's dtype {k_cache.dtype}, got {t.dtype}")
        if t.stride(-1) != 1:
            raise ValueError(
                f"{name}: expected head_dim contiguous (stride 1), got strides {t.stride()}"
            )
    if v.shape != k.shape:
        raise ValueError(f"v: expected the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    checks.check_index("slot_mapping", slot_mapping, 1, (torch.int64,))
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(
            f"slot_mapping: expected {k.shape[0]} slots (one per token of k), got {slot_mapping.shape[0]}"
        )
    interpreted = checks.is_interpreted(_write_kv_kernel)
    checks.check_device(
        interpreted, k=k, v=v, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping
    )
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return
    num_slots = num_blocks * block_size
    low, high = int(slot_mapping.min()), int(slot_mapping.max())
    if low < 0 or high >= num_slots:
        raise ValueError(
            f"slot_mapping: expected slots in [0, {num_slots}) (num_blocks * block_size), "
            f"got min {low}, max {high}"
        )
    if int(slot_mapping.unique().numel()) != num_tokens:
        raise ValueError(
            "slot_mapping: expected distinct slots (two tokens to one slot would race)"
        )
    _write_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        kv_heads,
        BLOCK_SIZE=block_size,
        HEADS_P=checks.next_pow2(kv_heads),
        HEAD_DIM=head_dim,
    )
