"""Invariants of every allocator policy over random operation sequences: accounting
adds up, refusals change nothing, frees are checked, freeing everything empties the
pool, prefix hits never exceed what was cached; for pooled policies, growth draws the
blocks ``blocks_to_extend`` says; for paged, refcounts stay positive and a forked child
shares the parent's slots until it writes.

Every registered kind runs with its defaults (``support.allocators.registry_configs``),
then the variants below. The contiguous family's layout (no overlap, coalescing, fit
choices) is checked further in ``test_alloc_contiguous_props.py``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.allocators import (
    assert_covers_registry,
    build_allocator,
    check_pool,
    config_id,
    is_pooled,
    prefix_hashes,
    registry_configs,
)

from policies.allocators.base import Allocator, AllocStats, PoolSpec
from policies.allocators.caching import CachingAllocator
from policies.allocators.paged import PagedAllocator

BLOCK = 16
"""Tokens each prefix hash covers (the paged default block)."""

CONFIGS = registry_configs(
    {"kind": "paged", "cache_partial_block": True},
    {"kind": "paged", "block_size_tokens": BLOCK // 2, "hash_block_tokens": BLOCK},
    {"kind": "paged", "prefix_caching": False},
    {"kind": "vm_paged", "page_bytes": 192 << 10},  # 24-token page groups
    {"kind": "caching", "growth_factor": 1.5},
    {"kind": "caching", "expandable_segments": True},
    {"kind": "static", "mode": "pow2", "placement": "buddy"},
)

KV_BYTES_SMALL = 8_192
"""Bytes per token that put most ``caching`` requests in its small-block pool."""

# (kind, request or live index, tokens, prompt family, variant)
_op = st.tuples(
    st.sampled_from(["alloc", "alloc", "extend", "extend", "fork", "free"]),
    st.integers(0, 1_000),
    st.integers(0, 400),
    st.integers(0, 2),
    st.integers(0, 1),
)
_ops = st.lists(_op, min_size=1, max_size=80)


def test_every_registered_policy_is_covered() -> None:
    assert_covers_registry(CONFIGS)


def _check(a: Allocator, live: dict[int, int]) -> AllocStats:
    s = check_pool(a)
    assert 0 <= s.cached_free_tokens <= s.free_tokens
    assert s.shared_tokens <= s.used_tokens + s.reserved_unused_tokens
    assert s.used_tokens <= sum(live.values())
    for rid, held in live.items():
        assert a.held_tokens(rid) == held
        assert a.reserved_tokens(rid) >= held
        assert 0 <= a.headroom_tokens(rid) <= a.reserved_tokens(rid) - held
    if not s.shared_tokens:
        assert s.used_tokens == sum(live.values())
    return s


def _binary_parts(n: int) -> list[int]:
    """``n`` as a sum of distinct powers of two (a buddy pool's free roots)."""
    return sorted(1 << b for b in range(n.bit_length()) if n >> b & 1)


def _run(a: Allocator, ops: list[tuple[str, int, int, int, int]]) -> None:
    live: dict[int, int] = {}
    seen_keys: set[int] = set()  # hashes of every prompt placed: what a cache can hold
    next_id = 0
    for kind, pick, tokens, family, variant in ops:
        before = _check(a, live)
        ids = sorted(live)
        ok = True
        if kind == "alloc":
            hashes = prefix_hashes(family, variant, tokens, BLOCK)
            # the final length, as the engine passes it (static pow2 / oracle reserve it)
            reserve = tokens + pick % 128
            alloc = a.allocate(next_id, tokens, reserve_tokens=reserve, prefix_hashes=hashes)
            ok = alloc is not None
            if alloc is not None:
                bound = 0  # leading hash blocks some earlier prompt had
                while bound < len(hashes) and hashes[bound] in seen_keys:
                    bound += 1
                assert alloc.cached_tokens <= min(tokens, bound * BLOCK)
                seen_keys.update(hashes)
                live[next_id] = tokens
            next_id += 1
        elif not ids:
            continue
        elif kind == "extend":
            rid = ids[pick % len(ids)]
            tokens %= 48  # decode growth is small; long extends are covered by the alloc sizes
            if is_pooled(a):
                pool_before = a.pool_free_blocks()
                need = a.blocks_to_extend(rid, tokens)
            ok = a.extend(rid, tokens)
            if is_pooled(a):
                assert ok == (need <= pool_before)
                if ok:
                    assert a.pool_free_blocks() == pool_before - need
            if ok:
                live[rid] += tokens
        elif kind == "fork":
            parent = ids[pick % len(ids)]
            ok = a.fork(parent, next_id)
            if ok:
                live[next_id] = live[parent]
                if isinstance(a, PagedAllocator):
                    assert a.named_block_ids(next_id) == a.named_block_ids(parent)
            next_id += 1
        else:
            rid = ids[pick % len(ids)]
            a.free(rid)
            del live[rid]
            with pytest.raises(KeyError):
                a.free(rid)
        after = _check(a, live)
        if not ok:
            assert after == before, "a refusal changed the state"
            failure = a.last_failure()
            assert failure is not None
            if is_pooled(a):
                assert failure.cause == "capacity"
        if isinstance(a, PagedAllocator):
            for rid in live:
                assert all(a.refcount(b) >= 1 for b in a.named_block_ids(rid))
    for rid in list(live):
        a.free(rid)
    s = _check(a, {})
    assert s.free_tokens == s.capacity_tokens
    assert s.used_tokens == s.reserved_unused_tokens == s.shared_tokens == 0
    if isinstance(a, CachingAllocator):  # segments stay cached until empty_cache
        a.empty_cache()
        s = _check(a, {})
    # whole again: one extent, or a buddy pool's power-of-two roots
    sizes = sorted(a.free_extent_sizes())
    assert sizes == [s.capacity_tokens] or sizes == _binary_parts(s.capacity_tokens)
    assert s.free_extent_count == len(sizes) and s.largest_free_extent_tokens == sizes[-1]


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@settings(max_examples=100, deadline=None)
@given(ops=_ops, capacity=st.sampled_from([640, 1_541, 4_000]), small_tokens=st.booleans())
def test_invariants_hold_over_random_operations(
    config: dict[str, Any],
    ops: list[tuple[str, int, int, int, int]],
    capacity: int,
    small_tokens: bool,
) -> None:
    """``small_tokens``: 8 KiB a token instead of a 7B model's 512 KiB (byte-sized
    policies see other page and segment sizes; the others do not care)."""
    pool: dict[str, Any] = {"max_seq_tokens": 512}
    if small_tokens and config["kind"] != "vm_paged":  # a 2 MiB page of 8 KiB tokens: > the pool
        pool["kv_bytes_per_token"] = KV_BYTES_SMALL
    _run(build_allocator(config, capacity, **pool), ops)


@settings(max_examples=40, deadline=None)
@given(held=st.integers(1, 200), grow=st.integers(1, 50))
def test_forked_child_shares_until_it_writes(held: int, grow: int) -> None:
    a = PagedAllocator(PoolSpec(100 * BLOCK), block_size_tokens=BLOCK)
    assert a.allocate(1, held) is not None
    assert a.fork(1, 2)
    parent_blocks = a.named_block_ids(1)
    assert a.named_block_ids(2) == parent_blocks
    assert a.stats().shared_tokens == len(parent_blocks) * BLOCK
    copied_before = a.stats().copied_tokens_total
    assert a.extend(2, grow)
    child = a.named_block_ids(2)
    assert a.named_block_ids(1) == parent_blocks
    partial = held % BLOCK
    if partial:  # the shared last block was copied; the prefix stays shared
        assert child == parent_blocks[:-1]
        assert a.stats().copied_tokens_total == copied_before + partial
        assert a.refcount(parent_blocks[-1]) == 1
    else:
        assert child == parent_blocks
    assert all(a.refcount(b) == 2 for b in child)
