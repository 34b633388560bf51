"""SGLang's split pools (``{kind: split_pools}``): one pool per kind of memory, sized by
fixed ratios at start-up, whatever the traffic.

After SGLang's memory pools (``mem_cache/memory_pool.py``, ``swa_memory_pool.py``; its
``--swa-full-tokens-ratio`` and ``--mamba-full-memory-ratio`` server arguments):

* a *full* KV pool of token slots for the full-attention layers (``page_size_tokens``
  per page, SGLang's default 1);
* with sliding-window layers, a *SWA* pool holding ``swa_full_tokens_ratio`` as many
  tokens as the full pool (SGLang's default 0.8); a request keeps its last ``W`` tokens
  there (out-of-window pages are freed as it grows; a prompt is prefilled in chunks of
  ``chunked_prefill_tokens``, so admission holds at most ``W`` + one chunk there);
* with Mamba layers, a *state* pool of whole per-request states, holding
  ``mamba_full_memory_ratio`` times the KV pools' bytes (SGLang's default 0.9).

Each request draws from every pool at once, so the pool that runs out first refuses it
while the others still have free memory: that memory is *stranded* (the waste this
manager shows). ``largest_contiguous_free_block_ratio`` is the bottleneck pool's
(``policies.allocators.kv_groups``): below 1 exactly when memory is stranded, and a
refusal with enough memory free in total is a *fragmentation* failure.
"""

from __future__ import annotations

from policies.allocators.base import PoolSpec, blocks_for
from policies.allocators.kv_groups import (
    KvGroup,
    KvGroupManager,
    KvLayout,
    KvPool,
    layer_kinds_of,
)


def split_layout(
    spec: PoolSpec,
    page_size_tokens: int,
    swa_full_tokens_ratio: float,
    mamba_full_memory_ratio: float,
    chunked_prefill_tokens: int = 8192,
) -> KvLayout:
    """The pools and groups (see the module docstring)."""
    kinds = layer_kinds_of(spec)
    full = [k for k in kinds if k.kind == "full_attention"]
    swa = [k for k in kinds if k.kind == "sliding_attention"]
    mamba = [k for k in kinds if k.kind == "mamba"]
    if not full and not swa:
        raise ValueError("split_pools needs at least one attention layer")
    if len({k.window_tokens for k in swa}) > 1:
        raise ValueError("split_pools: one SWA pool holds one window size")
    total = spec.capacity_tokens * spec.kv_bytes_per_token
    kv_bytes = total
    if mamba:
        kv_bytes = int(total / (1.0 + mamba_full_memory_ratio))
    page = page_size_tokens
    full_token = sum(k.layers * k.kv_bytes_per_token_per_layer for k in full)
    swa_token = sum(k.layers * k.kv_bytes_per_token_per_layer for k in swa)
    if not full:  # only windowed layers: the SWA pool takes all
        full_tokens, swa_ratio = 0.0, 1.0
        swa_tokens = kv_bytes / swa_token
    else:
        swa_ratio = swa_full_tokens_ratio if swa else 0.0
        full_tokens = kv_bytes / (full_token + swa_ratio * swa_token)
        swa_tokens = swa_ratio * full_tokens
    pools: list[KvPool] = []
    groups: list[KvGroup] = []
    notes: list[str] = []
    if full:
        pools.append(KvPool("full", page * full_token, int(full_tokens) // page))
        groups.append(KvGroup("full", len(pools) - 1, page, 0, full_token))
        notes.append(f"full pool: {pools[-1].num_blocks * page:,} tokens")
    if swa:
        w = swa[0].window_tokens
        pools.append(KvPool("swa", page * swa_token, int(swa_tokens) // page))
        cap = max(blocks_for(w + chunked_prefill_tokens, page), blocks_for(w, page) + 1)
        groups.append(KvGroup("swa", len(pools) - 1, page, w, swa_token, prefill_cap_blocks=cap))
        notes.append(f"SWA pool: {pools[-1].num_blocks * page:,} tokens (window {w:,})")
    if mamba:
        state = sum(k.layers * k.state_bytes_per_layer for k in mamba)
        pools.append(KvPool("state", state, (total - kv_bytes) // state))
        groups.append(KvGroup("state", len(pools) - 1, state_blocks=1, state_bytes=state))
        notes.append(f"state pool: {pools[-1].num_blocks:,} request states of {state:,} bytes")
    return KvLayout(tuple(pools), tuple(groups), tuple(notes))


class SplitPoolsManager(KvGroupManager):
    """SGLang's split KV / SWA / state pools over :func:`split_layout`."""

    def __init__(
        self,
        spec: PoolSpec,
        *,
        page_size_tokens: int = 1,
        swa_full_tokens_ratio: float = 0.8,
        mamba_full_memory_ratio: float = 0.9,
        chunked_prefill_tokens: int = 8192,
    ) -> None:
        layout = split_layout(
            spec,
            page_size_tokens,
            swa_full_tokens_ratio,
            mamba_full_memory_ratio,
            chunked_prefill_tokens,
        )
        super().__init__(spec, layout)
