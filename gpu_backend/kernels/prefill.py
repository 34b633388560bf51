"""``paged_prefill``: packed new tokens per sequence, causal over the cache.

The new tokens' K/V are already in the cache (``write_kv`` first), so sequence ``s``
with ``n`` new tokens and ``context_lens[s] = L`` has its query ``j`` at absolute
position ``L - n + j``, attending to cached positions ``<=`` its own.

Grid ``(batch, kv_heads, ceil(max_new / BLOCK_Q))``. A program owns ``BLOCK_Q``
consecutive query tokens of one sequence and the ``group`` query heads of one KV head,
packed as the ``BLOCK_Q * GROUP_P`` rows of one ``tl.dot`` operand (row ``r`` is token
``r // GROUP_P``, head ``r % GROUP_P``; ``BLOCK_Q = 16`` keeps every dot dimension >=
16). It walks the blocks up to the one holding its last query's position, with an
online softmax; key rows past the length are masked out of the loads (other = 0) and
keys after a query's position out of its scores. A tile past the sequence's new
tokens walks nothing and stores nothing.

Offsets are int64 throughout: the block id is cast before it meets a stride.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_backend.kernels import checks

#: Query tokens per program.
BLOCK_Q = 16


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    query_start_ptr,
    out_ptr,
    scale,
    stride_qt,
    stride_qh,
    stride_cb,
    stride_cs,
    stride_ch,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_btb,
    stride_btj,
    stride_ot,
    stride_oh,
    group,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    GROUP_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    tile = tl.program_id(2).to(tl.int64)
    length = tl.load(context_lens_ptr + seq).to(tl.int64)
    q_start = tl.load(query_start_ptr + seq).to(tl.int64)
    num_new = tl.load(query_start_ptr + seq + 1).to(tl.int64) - q_start
    first_token = tile * BLOCK_Q
    tile_end = tl.minimum(first_token + BLOCK_Q, num_new)
    # blocks up to the one holding the tile's last query position; none for an empty tile
    last_pos = length - num_new + tile_end - 1
    num_blocks = tl.where(first_token < num_new, last_pos // BLOCK_SIZE + 1, 0)

    rows = tl.arange(0, BLOCK_Q * GROUP_P).to(tl.int64)
    token = first_token + rows // GROUP_P
    head = kv_head * group + rows % GROUP_P
    row_ok = (token < num_new) & (rows % GROUP_P < group)
    q_pos = length - num_new + token
    dims = tl.arange(0, HEAD_DIM).to(tl.int64)
    keys = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    q_off = (q_start + token)[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_Q * GROUP_P], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_P], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_P, HEAD_DIM], tl.float32)
    for j in range(0, num_blocks):
        block_id = tl.load(block_tables_ptr + seq * stride_btb + j * stride_btj).to(tl.int64)
        k_pos = j * BLOCK_SIZE + keys
        key_ok = k_pos < length
        k_off = (
            block_id * stride_cb + keys[:, None] * stride_cs + kv_head * stride_ch + dims[None, :]
        )
        v_off = (
            block_id * stride_vb + keys[:, None] * stride_vs + kv_head * stride_vh + dims[None, :]
        )
        k = tl.load(k_cache_ptr + k_off, mask=key_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + v_off, mask=key_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        visible = key_ok[None, :] & (k_pos[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    out_off = (q_start + token)[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :]
    tl.store(out_ptr + out_off, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def check_prefill_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    interpreted: bool,
) -> tuple[int, int]:
    """Every check of ``paged_prefill``; returns ``(group, max new tokens)``."""
    num_blocks, block_size, _, _ = checks.check_cache(k_cache, v_cache)
    group = checks.check_query(q, k_cache, interpreted)
    checks.check_scale(scale)
    checks.check_index("query_start_loc", query_start_loc, 1, checks.INDEX_DTYPES)
    batch = query_start_loc.shape[0] - 1
    if batch < 0:
        raise ValueError("query_start_loc: expected [batch + 1] offsets, got an empty tensor")
    checks.check_device(
        interpreted,
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=block_tables,
        context_lens=context_lens,
        query_start_loc=query_start_loc,
    )
    checks.check_block_tables(block_tables, context_lens, batch, num_blocks, block_size)
    starts = query_start_loc.to(torch.int64)
    num_new = starts[1:] - starts[:-1]
    if int(starts[0]) != 0 or int(starts[-1]) != q.shape[0]:
        raise ValueError(
            f"query_start_loc: expected offsets from 0 to {q.shape[0]} (q's tokens), "
            f"got {int(starts[0])} .. {int(starts[-1])}"
        )
    if batch and bool((num_new < 0).any()):
        raise ValueError("query_start_loc: expected non-decreasing offsets")
    if batch and bool((num_new > context_lens.to(torch.int64)).any()):
        raise ValueError(
            "query_start_loc: expected at most context_lens[s] new tokens per sequence "
            "(the new tokens are in the cache already)"
        )
    return group, int(num_new.max()) if batch else 0


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of new tokens packed by sequence (``q``: ``[total_new,
    q_heads, head_dim]``, sequence ``s`` owns rows ``query_start_loc[s] :
    query_start_loc[s + 1]``) over their sequence's cache, the new tokens included
    (``context_lens[s]`` counts them). Returns ``q``'s shape and dtype, accumulated in
    fp32."""
    interpreted = checks.is_interpreted(_prefill_kernel)
    group, max_new = check_prefill_inputs(
        q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, interpreted
    )
    out = torch.empty_like(q)
    if max_new == 0:
        return out
    _, block_size, kv_heads, head_dim = k_cache.shape
    batch = query_start_loc.shape[0] - 1
    grid = (batch, kv_heads, triton.cdiv(max_new, BLOCK_Q))
    _prefill_kernel[grid](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        query_start_loc,
        out,
        float(scale),
        *checks.attention_strides(q, k_cache, v_cache, block_tables, out),
        group,
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
        GROUP_P=checks.next_pow2(group),
        BLOCK_Q=BLOCK_Q,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out
