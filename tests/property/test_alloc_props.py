"""Invariants of the paged family (paged, vm_paged, caching) over random operation
sequences: accounting adds up, refusals change nothing, frees are checked, freeing
everything empties the pool, refcounts stay positive, prefix hits never exceed what was
cached, and a forked child shares the parent's slots until it writes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.allocators.base import Allocator, AllocStats, PoolSpec
from policies.allocators.caching import CachingAllocator
from policies.allocators.paged import PagedAllocator
from policies.allocators.vm_paged import VmPagedAllocator

BLOCK = 16

# (kind, request or live index, tokens, prompt family, variant)
_op = st.tuples(
    st.sampled_from(["alloc", "alloc", "extend", "extend", "fork", "free"]),
    st.integers(0, 1_000),
    st.integers(0, 400),
    st.integers(0, 2),
    st.integers(0, 1),
)
_ops = st.lists(_op, min_size=1, max_size=80)


def _hashes(family: int, variant: int, tokens: int) -> list[int]:
    """Chained-hash stand-ins: blocks 0-1 depend on the family, later ones also on the
    variant, so prompts share 0, 2 or all of their leading blocks."""
    n = -(-tokens // BLOCK)
    return [family * 1000 + (j if j < 2 else 100 * (variant + 1) + j) for j in range(n)]


def _check(a: Allocator, live: dict[int, int]) -> AllocStats:
    s = a.stats()
    assert s.used_tokens + s.reserved_unused_tokens + s.free_tokens == s.capacity_tokens
    assert min(s.used_tokens, s.reserved_unused_tokens, s.free_tokens) >= 0
    assert 0 <= s.largest_free_extent_tokens <= s.free_tokens
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


def _run(a: Allocator, ops: list[tuple[str, int, int, int, int]]) -> None:
    live: dict[int, int] = {}
    seen_keys: set[int] = set()  # hashes of every prompt placed: what a cache can hold
    next_id = 0
    for kind, pick, tokens, family, variant in ops:
        before = _check(a, live)
        ids = sorted(live)
        ok = True
        if kind == "alloc":
            hashes = _hashes(family, variant, tokens)
            alloc = a.allocate(next_id, tokens, prefix_hashes=hashes)
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
            if a.pool_block_tokens is not None:
                pool_before = a.pool_free_blocks()
                need = a.blocks_to_extend(rid, tokens)
            ok = a.extend(rid, tokens)
            if a.pool_block_tokens is not None:
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
            if a.pool_block_tokens is not None:
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
    assert s.free_extent_count == 1 and s.largest_free_extent_tokens == s.free_tokens


_FACTORIES: dict[str, Callable[[], Allocator]] = {
    "paged": lambda: PagedAllocator(PoolSpec(96 * BLOCK + 5), block_size_tokens=BLOCK),
    "paged_partial": lambda: PagedAllocator(
        PoolSpec(40 * BLOCK), block_size_tokens=BLOCK, cache_partial_block=True
    ),
    "paged_hash32": lambda: PagedAllocator(
        PoolSpec(48 * BLOCK), block_size_tokens=BLOCK // 2, hash_block_tokens=BLOCK
    ),
    "paged_no_cache": lambda: PagedAllocator(PoolSpec(50 * BLOCK), prefix_caching=False),
    "vm_paged": lambda: VmPagedAllocator(PoolSpec(1_500), page_tokens=24),
    "caching": lambda: CachingAllocator(
        PoolSpec(4_000, kv_bytes_per_token=8_192), growth_factor=1.5
    ),
    "caching_expandable": lambda: CachingAllocator(
        PoolSpec(4_000, kv_bytes_per_token=8_192), expandable_segments=True
    ),
}


@pytest.mark.parametrize("name", sorted(_FACTORIES))
@settings(max_examples=100, deadline=None)
@given(ops=_ops)
def test_invariants_hold_over_random_operations(
    name: str, ops: list[tuple[str, int, int, int, int]]
) -> None:
    _run(_FACTORIES[name](), ops)


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
