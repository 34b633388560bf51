"""Random paged-attention problems for the kernels' tests and benchmark.

A problem starts from dense K/V per sequence (the ground truth) and scatters them into
a paged cache through a shuffled block table, so that a reader that ignores the table,
or reads past the live blocks, gets a wrong answer. With ``poison=True`` every slot no
sequence owns (unused blocks, the tail rows of each last block) holds NaN, and the
block-table entries past each sequence's live blocks hold junk ids (-1, huge, or
``num_blocks``): a kernel that reads any of them returns NaN or faults.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Block-table junk past the live blocks: negative, just out of range, and huge.
JUNK_IDS = (-1, 2**31 - 1, -(2**31))


@dataclass(frozen=True)
class PagedProblem:
    """One batch: ``k_dense[s]``/``v_dense[s]`` (``[len_s, kv_heads, head_dim]``) are
    sequence ``s``'s K/V, also stored in ``k_cache``/``v_cache`` through
    ``block_tables``."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    k_dense: list[torch.Tensor]
    v_dense: list[torch.Tensor]


def make_paged_problem(
    lengths: list[int],
    block_size: int,
    kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    spare_blocks: int = 3,
    poison: bool = True,
    table_dtype: torch.dtype = torch.int32,
) -> PagedProblem:
    """Dense K/V for sequences of ``lengths`` tokens, scattered into a cache of
    ``sum(live blocks) + spare_blocks`` blocks in a random order."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    live = [-(-n // block_size) for n in lengths]
    num_blocks = sum(live) + spare_blocks
    max_blocks = max(live) + 1
    shape = (num_blocks, block_size, kv_heads, head_dim)
    fill = float("nan") if poison else 0.0
    k_cache = torch.full(shape, fill, dtype=dtype, device=device)
    v_cache = torch.full(shape, fill, dtype=dtype, device=device)
    order = torch.randperm(num_blocks, generator=gen, device=device)
    junk = torch.tensor(JUNK_IDS if poison else (0,), dtype=torch.int64, device=device)
    block_tables = torch.zeros((len(lengths), max_blocks), dtype=torch.int64, device=device)
    k_dense: list[torch.Tensor] = []
    v_dense: list[torch.Tensor] = []
    used = 0
    for s, (n, blocks) in enumerate(zip(lengths, live, strict=True)):
        ids = order[used : used + blocks]
        used += blocks
        tail = max_blocks - blocks
        block_tables[s, :blocks] = ids
        block_tables[s, blocks:] = junk.repeat(tail)[:tail]
        for dense, cache in ((k_dense, k_cache), (v_dense, v_cache)):
            x = torch.randn((n, kv_heads, head_dim), generator=gen, device=device).to(dtype)
            padded = torch.full(
                (blocks * block_size, kv_heads, head_dim), fill, dtype=dtype, device=device
            )
            padded[:n] = x
            cache[ids] = padded.view(blocks, block_size, kv_heads, head_dim)
            dense.append(x)
    return PagedProblem(
        k_cache=k_cache.to(device),
        v_cache=v_cache.to(device),
        block_tables=block_tables.to(table_dtype),
        context_lens=torch.tensor(lengths, dtype=torch.int32, device=device),
        k_dense=k_dense,
        v_dense=v_dense,
    )
