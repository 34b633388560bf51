"""vLLM v1's hybrid KV cache manager (``{kind: hybrid_kv}``): every layer type in one
block pool with one page size.

The layout, after vLLM's ``kv_cache_utils`` / ``kv_cache_planning`` (read, not copied;
docs/allocators.md has the worked numbers):

1. Layers are bucketed by type: full attention, sliding window (one bucket per window),
   Mamba. The *group size* is the fewest layers of any bucket -- or the most, when the
   most is under 1.5x the fewest (vLLM's heuristic against padding).
2. Each bucket is split into ``ceil(layers / group_size)`` KV cache groups of
   ``group_size`` layers; the last group of a bucket is filled up with *padding layers*
   (memory that holds nothing).
3. One page size: an attention layer's page is ``block_size_tokens`` tokens of its KV.
   With Mamba layers, the attention block size is pushed up to the smallest multiple of
   ``block_size_tokens`` whose page holds one layer's state (hundreds of tokens), and the
   state page is padded up to it.
4. One block of the pool is one page in each of ``group_size`` layers: any group's block
   costs the same, and any free block serves any group.
5. A full group holds ``ceil(L / B)`` blocks; a sliding group frees blocks that leave
   the window; a Mamba group holds one block per request. At admission a sliding group
   takes the whole prompt's blocks up to vLLM's admission cap
   ``ceil((W - 1 + prefill_chunk_tokens) / B) + 1`` (the window reserve: the prefill
   writes them before the out-of-window ones are freed).

One pool, so ``largest_contiguous_free_block_ratio`` is 1 whenever anything is free and
every refusal is a capacity failure, as for ``paged``. Prefix caching is not simulated
by this manager (``prefix_hashes`` are ignored).
"""

from __future__ import annotations

from policies.allocators.base import LayerKindSpec, PoolSpec, blocks_for
from policies.allocators.kv_groups import (
    KvGroup,
    KvGroupManager,
    KvLayout,
    KvPool,
    layer_kinds_of,
)


def group_size_of(layer_counts: list[int]) -> int:
    """vLLM's group size: the fewest layers of a type, or the most when the most is
    under 1.5x the fewest."""
    fewest, most = min(layer_counts), max(layer_counts)
    return most if most < fewest * 1.5 else fewest


def attention_block_tokens(kinds: tuple[LayerKindSpec, ...], block_size_tokens: int) -> int:
    """The attention block size: ``block_size_tokens``, pushed up (in its multiples) until
    one layer's page holds one Mamba layer's state."""
    state = max((k.state_bytes_per_layer for k in kinds if k.kind == "mamba"), default=0)
    per_token = max(k.kv_bytes_per_token_per_layer for k in kinds if k.kind != "mamba")
    if not state:
        return block_size_tokens
    return block_size_tokens * max(1, blocks_for(state, block_size_tokens * per_token))


def hybrid_layout(spec: PoolSpec, block_size_tokens: int, prefill_chunk_tokens: int) -> KvLayout:
    """The groups and the one pool (see the module docstring)."""
    kinds = layer_kinds_of(spec)
    if all(k.kind == "mamba" for k in kinds):
        raise ValueError("hybrid_kv needs at least one attention layer")
    bt = attention_block_tokens(kinds, block_size_tokens)
    per_token = max(k.kv_bytes_per_token_per_layer for k in kinds if k.kind != "mamba")
    page = bt * per_token
    size = group_size_of([k.layers for k in kinds])
    block_bytes = size * page
    total_bytes = spec.capacity_tokens * spec.kv_bytes_per_token
    groups: list[KvGroup] = []
    padding_layers = 0
    for k in kinds:
        n_groups = blocks_for(k.layers, size)
        padding_layers += n_groups * size - k.layers
        for i in range(n_groups):
            real = min(size, k.layers - i * size)
            name = f"{k.kind}[{i}]"
            if k.kind == "mamba":
                state = real * k.state_bytes_per_layer
                groups.append(
                    KvGroup(
                        name,
                        0,
                        state_blocks=1,
                        state_bytes=state,
                        padding_bytes_per_block=block_bytes - state,
                    )
                )
                continue
            w = k.window_tokens
            groups.append(
                KvGroup(
                    name,
                    0,
                    block_tokens=bt,
                    window_tokens=w,
                    real_bytes_per_token=real * k.kv_bytes_per_token_per_layer,
                    padding_bytes_per_block=(size - real) * page,
                    prefill_cap_blocks=blocks_for(w - 1 + prefill_chunk_tokens, bt) + 1 if w else 0,
                )
            )
    notes = (
        f"{len(groups)} KV cache groups of {size} layers ({padding_layers} padding layers), "
        f"attention block {bt} tokens, one pool of {total_bytes // block_bytes:,} blocks of "
        f"{block_bytes:,} bytes",
    )
    pool = KvPool("blocks", block_bytes, total_bytes // block_bytes)
    return KvLayout((pool,), tuple(groups), notes)


class HybridKvManager(KvGroupManager):
    """vLLM v1's hybrid KV cache manager over :func:`hybrid_layout`."""

    def __init__(
        self, spec: PoolSpec, *, block_size_tokens: int = 16, prefill_chunk_tokens: int = 8192
    ) -> None:
        super().__init__(spec, hybrid_layout(spec, block_size_tokens, prefill_chunk_tokens))
