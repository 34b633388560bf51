"""Invariants of the KV managers (``hybrid_kv``, ``split_pools``, ``window_pools``) on
hybrid layer layouts, over random operation sequences. The registry-driven
``test_alloc_props.py`` runs them on a uniform model, where they must keep every
policy's books exactly; here the layouts have sliding windows and Mamba state, and the
checks are the managers' own: the pool accounting, refusals that change nothing, the
bytes holding KV worked out from each table, windows that stay bounded, headroom that
never moves a pool, and a pool emptied whole."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.allocators import check_pool, kv_manager_kinds

from policies.allocators.base import LayerKindSpec, PoolSpec, blocks_for
from policies.allocators.kv_groups import KvGroupManager
from policies.allocators.registry import parse_allocator

PER_LAYER = 64
"""KV bytes per token per layer of the small test models."""

LAYOUTS = {
    # gpt-oss: half the layers windowed (128 tokens), no padding
    "gpt-oss": (
        LayerKindSpec("full_attention", 6, PER_LAYER),
        LayerKindSpec("sliding_attention", 6, PER_LAYER, 128),
    ),
    # Gemma 3: 5 windowed for each full layer, padding in the last windowed group
    "gemma-3": (
        LayerKindSpec("full_attention", 2, PER_LAYER),
        LayerKindSpec("sliding_attention", 11, PER_LAYER, 96),
    ),
    # a Mamba hybrid: few attention layers, a large state per request
    "nemotron-h": (
        LayerKindSpec("full_attention", 2, PER_LAYER),
        LayerKindSpec("mamba", 6, state_bytes_per_layer=9_000),
    ),
}
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "hybrid_kv": [{"block_size_tokens": 8, "prefill_chunk_tokens": 64}],
    "split_pools": [
        {"page_size_tokens": 4, "swa_full_tokens_ratio": 0.3, "chunked_prefill_tokens": 64}
    ],
    "window_pools": [{"reserve_final_length": False, "tokens_per_block": 8}],
}
"""Small-block variants a KV manager is also drawn with, by kind."""
CONFIGS: list[dict[str, Any]] = [
    {"kind": kind, **fields}
    for kind in kv_manager_kinds()
    for fields in [{}, *VARIANTS.get(kind, [])]
]
"""Every registered KV manager (``AllocatorConfig.kv_manager``) with its defaults, each
followed by its variants."""

_op = st.tuples(
    st.sampled_from(["alloc", "alloc", "extend", "extend", "extend", "fork", "free"]),
    st.integers(0, 1_000),
    st.integers(0, 600),
)


def _manager(config: dict[str, Any], layout: str, capacity: int) -> KvGroupManager:
    kinds = LAYOUTS[layout]
    attn_layers = sum(k.layers for k in kinds if k.kind != "mamba")
    spec = PoolSpec(
        capacity_tokens=capacity,
        kv_bytes_per_token=attn_layers * PER_LAYER,
        max_seq_tokens=1_024,
        layer_kinds=kinds,
    )
    a = parse_allocator(config).build(spec)
    assert isinstance(a, KvGroupManager)
    return a


def _used_bytes(a: KvGroupManager, live: dict[int, int]) -> int:
    """The bytes holding KV, worked out from each layer kind (not from the groups)."""
    total = 0
    for held in live.values():
        for k in a.spec.layer_kinds:
            if k.kind == "mamba":
                total += k.layers * k.state_bytes_per_layer
            else:
                span = min(held, k.window_tokens) if k.window_tokens else held
                total += span * k.layers * k.kv_bytes_per_token_per_layer
    return total


def _check(a: KvGroupManager, live: dict[int, int]) -> None:
    s = check_pool(a)
    slot = a.spec.kv_bytes_per_token
    assert s.used_tokens == _used_bytes(a, live) // slot
    free = a.pool_free_blocks_by_name()
    owned = {p.name: 0 for p in a.layout.pools}
    for rid, held in live.items():
        assert a.held_tokens(rid) == held
        assert a.reserved_tokens(rid) == held + a.headroom_tokens(rid)
        for g, n in zip(a.layout.groups, a.table_blocks(rid), strict=True):
            owned[a.layout.pools[g.pool].name] += n
            if g.block_tokens:  # the table's last n blocks hold every token in the span
                first_token = (blocks_for(held, g.block_tokens) - n) * g.block_tokens
                assert held - max(first_token, 0) >= g.span_tokens(held)
            if g.window_tokens:  # a window holds at most its admission cap
                cap = g.prefill_cap_blocks or blocks_for(held, g.block_tokens)
                assert n <= max(cap, blocks_for(g.window_tokens, g.block_tokens) + 1)
    for p in a.layout.pools:
        assert 0 <= free[p.name] <= p.num_blocks
        assert owned[p.name] + free[p.name] == p.num_blocks
    waste = a.kv_waste()
    assert (
        sum(
            (
                waste.token_states,
                waste.padding,
                waste.window_reserve,
                waste.reserved_ahead,
                waste.partial_blocks,
                waste.stranded,
                waste.free,
            )
        )
        == s.capacity_tokens
    )
    assert min(waste.padding, waste.window_reserve, waste.reserved_ahead) >= 0
    assert waste.partial_blocks >= 0
    assert waste.stranded + waste.free == s.free_tokens


def _run(a: KvGroupManager, ops: list[tuple[str, int, int]]) -> None:
    live: dict[int, int] = {}
    next_id = 0
    for kind, pick, tokens in ops:
        _check(a, live)
        before = (a.stats(), a.pool_free_blocks_by_name())
        ids = sorted(live)
        ok = True
        if kind == "alloc":
            ok = a.allocate(next_id, tokens, reserve_tokens=tokens + pick % 200) is not None
            if ok:
                live[next_id] = tokens
            next_id += 1
        elif not ids:
            continue
        elif kind == "extend":
            rid = ids[pick % len(ids)]
            grow = tokens % 40
            room = a.headroom_tokens(rid)
            ok = a.extend(rid, grow)
            if ok:
                live[rid] += grow
                if 0 < grow <= room:  # inside the headroom: no pool moves
                    assert a.pool_free_blocks_by_name() == before[1]
        elif kind == "fork":
            ok = a.fork(ids[pick % len(ids)], next_id)
            if ok:
                live[next_id] = live[ids[pick % len(ids)]]
            next_id += 1
        else:
            rid = ids[pick % len(ids)]
            a.free(rid)
            del live[rid]
            with pytest.raises(KeyError):
                a.free(rid)
        if not ok:
            assert (a.stats(), a.pool_free_blocks_by_name()) == before, "a refusal changed state"
            failure = a.last_failure()
            assert failure is not None
            s = a.stats()
            assert failure.free_tokens == s.free_tokens
            assert (failure.cause == "fragmentation") == (s.free_tokens >= failure.need_tokens)
            if len(a.layout.pools) == 1:
                assert failure.cause == "capacity"
    _check(a, live)
    for rid in list(live):
        a.free(rid)
    _check(a, {})
    s = a.stats()
    assert s.free_tokens == s.largest_free_extent_tokens == s.capacity_tokens
    assert a.free_extent_sizes() == [s.capacity_tokens]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
@settings(max_examples=60, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=60), capacity=st.sampled_from([3_000, 9_000]))
def test_manager_invariants_on_hybrid_layouts(
    config: dict[str, Any], layout: str, ops: list[tuple[str, int, int]], capacity: int
) -> None:
    _run(_manager(config, layout, capacity), ops)
