"""Plain-torch references for the Triton kernels: gather a sequence's K/V by its
block table, then attention in fp32, one sequence at a time. Slow and obvious on
purpose; the tests hold the kernels to these and these to
``scaled_dot_product_attention`` on dense K/V built independently.

The references read only the live blocks of each sequence (the first
``ceil(context_len / block_size)`` entries of its block-table row) and only the
first ``context_len`` tokens of them, as the kernels do. They do not validate
their inputs beyond what indexing does.
"""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, context_len: int) -> torch.Tensor:
    """The first ``context_len`` tokens of one sequence, ``[context_len, kv_heads,
    head_dim]``, read through its block-table row."""
    block_size = cache.shape[1]
    live_blocks = -(-context_len // block_size)
    ids = block_table[:live_blocks].to(torch.int64)
    return cache[ids].reshape(-1, cache.shape[2], cache.shape[3])[:context_len]


def ref_write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Token ``t`` of ``k``/``v`` (``[T, kv_heads, head_dim]``) goes to slot
    ``slot_mapping[t]`` = ``block_id * block_size + row`` of the caches, in place."""
    block_size = k_cache.shape[1]
    slots = slot_mapping.to(torch.int64)
    k_cache[slots // block_size, slots % block_size] = k.to(k_cache.dtype)
    v_cache[slots // block_size, slots % block_size] = v.to(v_cache.dtype)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, first_pos: int
) -> torch.Tensor:
    """Causal attention of ``q`` (``[n, q_heads, d]``, query ``j`` at absolute position
    ``first_pos + j``) over ``k``/``v`` (``[L, kv_heads, d]``, positions ``0..L-1``),
    in fp32; returns ``[n, q_heads, d]`` fp32."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q.float(), k) * scale
    q_pos = first_pos + torch.arange(q.shape[0], device=q.device)
    k_pos = torch.arange(k.shape[0], device=q.device)
    scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
    return torch.einsum("hnl,lhd->nhd", scores.softmax(dim=-1), v)


def ref_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence (``q``: ``[batch, q_heads, head_dim]``) over all
    ``context_lens[s]`` cached tokens of its sequence; output in ``q``'s dtype."""
    out = torch.empty_like(q)
    for s in range(q.shape[0]):
        length = int(context_lens[s])
        k = gather_kv(k_cache, block_tables[s], length)
        v = gather_kv(v_cache, block_tables[s], length)
        out[s] = _attend(q[s : s + 1], k, v, scale, length - 1)[0].to(q.dtype)
    return out


def ref_paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """New tokens packed by sequence (``q``: ``[total_new, q_heads, head_dim]``,
    sequence ``s`` owns rows ``query_start_loc[s]:query_start_loc[s+1]``), their K/V
    already written; query ``j`` of ``s`` sits at position ``context_lens[s] - n_new
    + j`` and attends to positions ``<=`` its own. Output in ``q``'s dtype."""
    out = torch.empty_like(q)
    for s in range(context_lens.shape[0]):
        start, end = int(query_start_loc[s]), int(query_start_loc[s + 1])
        if end == start:
            continue
        length = int(context_lens[s])
        k = gather_kv(k_cache, block_tables[s], length)
        v = gather_kv(v_cache, block_tables[s], length)
        out[start:end] = _attend(q[start:end], k, v, scale, length - (end - start)).to(q.dtype)
    return out
