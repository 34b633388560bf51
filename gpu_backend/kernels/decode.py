"""``paged_decode``: one query token per sequence against its paged K/V, split-K.

Grid ``(batch, kv_heads, num_splits)``. A program owns the ``group`` query heads of
one KV head (packed as the rows of one ``tl.dot`` operand, padded to ``GROUP_P >=
16`` rows) and a contiguous range of the sequence's live blocks: with ``n =
ceil(len / block_size)`` live blocks, split ``i`` takes blocks ``[i * c, min((i + 1)
* c, n))`` where ``c = ceil(n / num_splits)``; a split past ``n`` is empty. Each
program runs an online softmax over its blocks, reading one block of K and V per
step; token rows at or past the length are masked out of the loads (other = 0, so a
NaN left in a tail slot cannot reach the sum) and out of the scores (-inf).

With one split the program normalises and writes the output. Otherwise it writes
its normalised partial output ``o_i`` and log-sum-exp ``lse_i`` (``-inf`` when
empty) in fp32, and a second kernel merges them per (sequence, query head):
``out = sum_i exp(lse_i - max lse) o_i / sum_i exp(lse_i - max lse)``.

Offsets are int64 throughout: the block id is cast before it meets a stride.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_backend.kernels import checks


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    part_o_ptr,
    part_lse_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_cb,
    stride_cs,
    stride_ch,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_btb,
    stride_btj,
    stride_ob,
    stride_oh,
    group,
    num_splits,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    GROUP_P: tl.constexpr,
    DIRECT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2).to(tl.int64)
    length = tl.load(context_lens_ptr + seq).to(tl.int64)
    live_blocks = (length + BLOCK_SIZE - 1) // BLOCK_SIZE
    per_split = (live_blocks + num_splits - 1) // num_splits
    first = split * per_split
    last = tl.minimum(first + per_split, live_blocks)

    rows = tl.arange(0, GROUP_P).to(tl.int64)
    dims = tl.arange(0, HEAD_DIM).to(tl.int64)
    tokens = tl.arange(0, BLOCK_SIZE).to(tl.int64)
    heads = kv_head * group + rows
    row_ok = rows < group
    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )

    m_i = tl.full([GROUP_P], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, HEAD_DIM], tl.float32)
    for j in range(first, last):
        block_id = tl.load(block_tables_ptr + seq * stride_btb + j * stride_btj).to(tl.int64)
        token_ok = j * BLOCK_SIZE + tokens < length
        k_off = (
            block_id * stride_cb + tokens[:, None] * stride_cs + kv_head * stride_ch + dims[None, :]
        )
        v_off = (
            block_id * stride_vb + tokens[:, None] * stride_vs + kv_head * stride_vh + dims[None, :]
        )
        k = tl.load(k_cache_ptr + k_off, mask=token_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + v_off, mask=token_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        s = tl.where(token_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    nonempty = l_i > 0
    o = acc / tl.where(nonempty, l_i, 1.0)[:, None]
    if DIRECT:
        out_off = seq * stride_ob + heads[:, None] * stride_oh + dims[None, :]
        tl.store(out_ptr + out_off, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        # partials: o [batch, q_heads, num_splits, HEAD_DIM], lse [batch, q_heads, num_splits]
        q_heads = tl.num_programs(1).to(tl.int64) * group
        lse_off = (seq * q_heads + heads) * num_splits + split
        lse = tl.where(nonempty, m_i + tl.log(tl.where(nonempty, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + lse_off, lse, mask=row_ok)
        tl.store(part_o_ptr + lse_off[:, None] * HEAD_DIM + dims[None, :], o, mask=row_ok[:, None])


@triton.jit
def _decode_merge_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    num_splits,
    HEAD_DIM: tl.constexpr,
    SPLITS_P: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    q_heads = tl.num_programs(1).to(tl.int64)
    splits = tl.arange(0, SPLITS_P).to(tl.int64)
    dims = tl.arange(0, HEAD_DIM).to(tl.int64)
    split_ok = splits < num_splits
    base = (seq * q_heads + head) * num_splits + splits
    lse = tl.load(part_lse_ptr + base, mask=split_ok, other=float("-inf"))
    o = tl.load(
        part_o_ptr + base[:, None] * HEAD_DIM + dims[None, :], mask=split_ok[:, None], other=0.0
    )
    weight = tl.exp(lse - tl.max(lse, axis=0))
    merged = tl.sum(weight[:, None] * o, axis=0) / tl.sum(weight, axis=0)
    tl.store(
        out_ptr + seq * stride_ob + head * stride_oh + dims, merged.to(out_ptr.dtype.element_ty)
    )


def check_decode_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    interpreted: bool,
) -> int:
    """Every check of ``paged_decode``; returns the GQA group."""
    num_blocks, block_size, _, _ = checks.check_cache(k_cache, v_cache)
    group = checks.check_query(q, k_cache, interpreted)
    checks.check_scale(scale)
    checks.check_device(
        interpreted,
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=block_tables,
        context_lens=context_lens,
    )
    checks.check_block_tables(block_tables, context_lens, q.shape[0], num_blocks, block_size)
    return group


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    num_splits: int = 1,
) -> torch.Tensor:
    """Attention of one query token per sequence (``q``: ``[batch, q_heads,
    head_dim]``) over its ``context_lens[s]`` cached tokens, read through
    ``block_tables`` (``[batch, max_blocks]``; entries past the live blocks are never
    read). ``num_splits`` programs share each (sequence, KV head). Returns ``[batch,
    q_heads, head_dim]`` in ``q``'s dtype, accumulated in fp32."""
    interpreted = checks.is_interpreted(_decode_split_kernel)
    group = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens, scale, interpreted)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"num_splits: expected an int >= 1, got {num_splits!r}")
    batch, q_heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    direct = num_splits == 1
    parts = 1 if direct else batch * q_heads * num_splits
    part_o = torch.empty((parts, head_dim), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((parts,), dtype=torch.float32, device=q.device)
    _decode_split_kernel[(batch, kv_heads, num_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        out,
        part_o,
        part_lse,
        float(scale),
        *checks.attention_strides(q, k_cache, v_cache, block_tables, out),
        group,
        num_splits,
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
        GROUP_P=max(16, checks.next_pow2(group)),
        DIRECT=direct,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    if not direct:
        _decode_merge_kernel[(batch, q_heads)](
            part_o,
            part_lse,
            out,
            out.stride(0),
            out.stride(1),
            num_splits,
            HEAD_DIM=head_dim,
            SPLITS_P=checks.next_pow2(num_splits),
        )
    return out
