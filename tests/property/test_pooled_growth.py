"""The pooled growth reservoir (``reserve_pool_blocks`` / ``extend_reserved``).

Twin property: allocator A grows sequences eagerly, one ``extend(sid, 1)`` per token;
its twin B takes the same growth of pooled sequences in bulk. Before every other
operation B reserves the blocks A drew since (H_now - H_reserved, H = sum over pending
pooled sequences of ceil(held / B)), and pending sequences are synced with
``extend_reserved`` when touched (or all of them, before a comparison). Both must then be
indistinguishable: equal stats, equal answers, equal prefix hits and block ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.allocators import (
    build_allocator,
    check_pool,
    config_id,
    is_pooled,
    pooled_kinds,
    prefix_hashes,
    registered_kinds,
)

from policies.allocators.base import Allocator, AllocStats, PoolSpec
from policies.allocators.paged import PagedAllocator

BLOCK = 8

# (kind, live index, tokens, prompt family, variant)
_op = st.tuples(
    st.sampled_from(["alloc", "alloc", "grow", "grow", "grow", "fork", "free", "check"]),
    st.integers(0, 1_000),
    st.integers(0, 120),
    st.integers(0, 2),
    st.integers(0, 1),
)
_ops = st.lists(_op, min_size=1, max_size=60)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _check_invariants(x: Allocator) -> AllocStats:
    s = check_pool(x)
    assert x.pool_block_tokens is not None
    assert s.reserved_unused_tokens >= x.pool_reserved_blocks() * x.pool_block_tokens
    return s


class _Twin:
    """A (eager) and B (bulk) driven in lockstep; ``pending`` = tokens A grew that B owes."""

    def __init__(self, factory: Callable[[], Allocator], hash_block_tokens: int | None) -> None:
        self.a = factory()
        self.b = factory()
        bt = self.a.pool_block_tokens
        assert bt is not None
        self.bt = bt
        self.hash_block_tokens = hash_block_tokens
        """Tokens a prefix hash covers; None: no hashes."""
        self.pending: dict[int, int] = {}
        self.live: list[int] = []
        self.next_id = 0

    def prepare(self, touched: list[int]) -> None:
        """A sync point: B reserves what A drew since the last one, then syncs ``touched``."""
        a, b, bt = self.a, self.b, self.bt
        owed = sum(
            _ceil(a.held_tokens(sid), bt) - _ceil(b.held_tokens(sid), bt) for sid in self.pending
        )
        delta = owed - b.pool_reserved_blocks()
        assert delta >= 0
        assert b.reserve_pool_blocks(delta)
        for sid in touched:
            if sid in self.pending:
                b.extend_reserved(sid, self.pending.pop(sid))
        if not self.pending:
            assert b.pool_reserved_blocks() == 0
        _check_invariants(a)
        _check_invariants(b)

    def compare(self) -> None:
        self.prepare(list(self.pending))
        a, b = self.a, self.b
        assert a.stats() == b.stats()
        for sid in self.live:
            assert a.held_tokens(sid) == b.held_tokens(sid)
            assert a.reserved_tokens(sid) == b.reserved_tokens(sid)
            assert a.headroom_tokens(sid) == b.headroom_tokens(sid)
            assert a.growth_is_pooled(sid) == b.growth_is_pooled(sid)
            if isinstance(a, PagedAllocator) and isinstance(b, PagedAllocator):
                assert a.named_block_ids(sid) == b.named_block_ids(sid)

    def step(self, kind: str, pick: int, tokens: int, family: int, variant: int) -> None:
        a, b = self.a, self.b
        if kind == "alloc":
            self.prepare([])
            hashes = []
            if self.hash_block_tokens is not None:
                hashes = prefix_hashes(family, variant, tokens, self.hash_block_tokens)
            ra = a.allocate(self.next_id, tokens, prefix_hashes=hashes)
            rb = b.allocate(self.next_id, tokens, prefix_hashes=hashes)
            assert ra == rb  # same success, reservation and cached_tokens
            if ra is None:
                assert a.last_failure() == b.last_failure()
            else:
                self.live.append(self.next_id)
            self.next_id += 1
            return
        if kind == "check":
            self.compare()
            return
        if not self.live:
            return
        sid = self.live[pick % len(self.live)]
        if kind == "grow":
            steps = tokens % 40
            if sid in self.pending or b.growth_is_pooled(sid):
                assert a.growth_is_pooled(sid)
                for _ in range(steps):
                    if not a.extend(sid, 1):
                        break
                    self.pending[sid] = self.pending.get(sid, 0) + 1
                assert a.growth_is_pooled(sid)
            else:  # copy-on-write / uncache: not pooled, both take it eagerly
                assert not a.growth_is_pooled(sid)
                self.prepare([sid])
                for _ in range(steps):
                    ok = a.extend(sid, 1)
                    assert ok == b.extend(sid, 1)
                    if not ok:
                        break
        elif kind == "fork":
            self.prepare([sid])
            ok = a.fork(sid, self.next_id)
            assert ok == b.fork(sid, self.next_id)
            if ok:
                self.live.append(self.next_id)
            self.next_id += 1
        else:
            self.prepare([sid])
            a.free(sid)
            b.free(sid)
            self.live.remove(sid)


def _block_tokens(kind: str) -> int:
    """The pool block of ``kind``'s default allocator (its prefix-hash block too)."""
    block_tokens = build_allocator(kind, 4096).pool_block_tokens
    assert block_tokens is not None
    return block_tokens


CASES: list[tuple[dict[str, Any], int, int | None]] = [
    # (config, capacity tokens, tokens a prefix hash covers or None for no hashes):
    # every pooled policy of the registry with its defaults,
    *(({"kind": kind}, 1_024, _block_tokens(kind)) for kind in pooled_kinds()),
    # then variants with small blocks
    ({"kind": "paged", "block_size_tokens": BLOCK}, 40 * BLOCK, None),
    ({"kind": "paged", "block_size_tokens": BLOCK}, 40 * BLOCK, BLOCK),
    ({"kind": "paged", "block_size_tokens": BLOCK, "cache_partial_block": True}, 40 * BLOCK, BLOCK),
    (
        {
            "kind": "paged",
            "block_size_tokens": BLOCK // 2,
            "hash_block_tokens": BLOCK,
            "cache_partial_block": True,
        },
        48 * BLOCK,
        BLOCK,
    ),
    ({"kind": "vm_paged", "page_bytes": 96 << 10}, 600, None),  # 12-token page groups
]


def test_every_pooled_policy_is_covered() -> None:
    assert {c["kind"] for c, _, _ in CASES} >= set(pooled_kinds())
    assert pooled_kinds(), "no registered policy is pooled"


@pytest.mark.parametrize(
    ("config", "capacity", "hash_block_tokens"),
    CASES,
    ids=[f"{config_id(c)}-{n}" + (f"-hash{h}" if h else "") for c, n, h in CASES],
)
@settings(max_examples=100, deadline=None)
@given(ops=_ops)
def test_bulk_growth_matches_eager_growth(
    config: dict[str, Any],
    capacity: int,
    hash_block_tokens: int | None,
    ops: list[tuple[str, int, int, int, int]],
) -> None:
    twin = _Twin(lambda: build_allocator(config, capacity), hash_block_tokens)
    for op in ops:
        twin.step(*op)
    twin.compare()
    for sid in list(twin.live):
        twin.step("free", twin.live.index(sid), 0, 0, 0)
    twin.compare()
    s = twin.b.stats()
    assert s.used_tokens == s.reserved_unused_tokens == 0


# -- unit tests ----------------------------------------------------------------------------
def _ten_blocks(kind: str) -> tuple[Allocator, int]:
    """A fresh ``kind`` allocator (its defaults) over a pool of ten of its blocks, and
    its block's tokens."""
    block = _block_tokens(kind)
    return build_allocator(kind, 10 * block), block


@pytest.mark.parametrize("kind", pooled_kinds())
def test_reserve_more_than_free_changes_nothing(kind: str) -> None:
    x, block = _ten_blocks(kind)
    assert x.allocate(1, 3 * block + 1) is not None
    before = x.stats()
    assert not x.reserve_pool_blocks(x.pool_free_blocks() + 1)
    assert x.stats() == before
    assert x.pool_reserved_blocks() == 0
    assert x.last_failure() is None
    assert x.reserve_pool_blocks(x.pool_free_blocks())
    assert x.pool_free_blocks() == 0
    with pytest.raises(ValueError):
        x.reserve_pool_blocks(-1)


@pytest.mark.parametrize("kind", pooled_kinds())
def test_extend_reserved_with_short_reservoir_raises(kind: str) -> None:
    x, block = _ten_blocks(kind)
    assert x.allocate(1, block - 1) is not None
    x.extend_reserved(1, 1)  # fits in the last block: needs no reserved block
    assert x.reserve_pool_blocks(1)
    before = x.stats()
    with pytest.raises(ValueError):
        x.extend_reserved(1, 2 * block)  # needs 2
    assert x.stats() == before and x.held_tokens(1) == block
    x.extend_reserved(1, block)
    assert x.held_tokens(1) == 2 * block and x.reserved_tokens(1) == 2 * block
    assert x.pool_reserved_blocks() == 0
    with pytest.raises(ValueError):
        x.extend_reserved(1, -1)


@pytest.mark.parametrize("kind", pooled_kinds())
def test_invariants_hold_with_a_nonempty_reservoir(kind: str) -> None:
    x, block = _ten_blocks(kind)
    assert x.allocate(1, 2 * block + 3) is not None
    assert x.allocate(2, 5) is not None
    assert x.reserve_pool_blocks(3)
    s = _check_invariants(x)
    unused = sum(x.reserved_tokens(r) - x.held_tokens(r) for r in (1, 2))
    assert s.reserved_unused_tokens == unused + 3 * block
    assert s.free_tokens == (10 - 4 - 3) * block
    if isinstance(x, PagedAllocator):
        assert x._owned_blocks + x._free_blocks == x.num_blocks
    x.free(1)  # free never touches the reservoir
    assert x.pool_reserved_blocks() == 3
    s = _check_invariants(x)
    assert s.reserved_unused_tokens == x.reserved_tokens(2) - 5 + 3 * block
    x.free(2)
    s = _check_invariants(x)
    assert s.used_tokens == 0 and s.reserved_unused_tokens == 3 * block


def test_shared_partial_last_block_is_not_pooled_until_written() -> None:
    x = PagedAllocator(PoolSpec(20 * BLOCK), block_size_tokens=BLOCK)
    assert x.allocate(1, BLOCK + 3) is not None
    assert x.growth_is_pooled(1)
    assert x.fork(1, 2)
    assert not x.growth_is_pooled(1) and not x.growth_is_pooled(2)
    assert x.reserve_pool_blocks(2)
    with pytest.raises(ValueError):
        x.extend_reserved(2, 1)
    assert x.extend(2, 1)  # copy-on-write resolves the child; the parent is sole owner
    assert x.growth_is_pooled(2) and x.growth_is_pooled(1)
    x.extend_reserved(1, BLOCK)  # all-named table, private partial last block (anon == 0)
    assert x.held_tokens(1) == 2 * BLOCK + 3 and x.reserved_tokens(1) == 3 * BLOCK
    assert x.pool_reserved_blocks() == 1
    _check_invariants(x)


def test_full_shared_last_block_is_pooled() -> None:
    x = PagedAllocator(PoolSpec(20 * BLOCK), block_size_tokens=BLOCK)
    assert x.allocate(1, 2 * BLOCK, prefix_hashes=[1, 2]) is not None  # all named
    assert x.fork(1, 2)
    assert x.growth_is_pooled(1) and x.growth_is_pooled(2)
    assert x.reserve_pool_blocks(1)
    x.extend_reserved(2, 5)
    assert x.named_block_ids(2) == x.named_block_ids(1)
    assert x.reserved_tokens(2) == 3 * BLOCK and x.held_tokens(2) == 2 * BLOCK + 5


def test_cached_partial_last_block_is_not_pooled_until_written() -> None:
    x = PagedAllocator(PoolSpec(20 * BLOCK), block_size_tokens=BLOCK, cache_partial_block=True)
    assert x.allocate(1, BLOCK + 3, prefix_hashes=[7, 8]) is not None
    assert x.headroom_tokens(1) == 0
    assert not x.growth_is_pooled(1)
    assert x.extend(1, 1)  # drops the cache entry of its partial block
    assert x.growth_is_pooled(1)
    assert x.headroom_tokens(1) == BLOCK - 4
    without = PagedAllocator(PoolSpec(20 * BLOCK), block_size_tokens=BLOCK)
    assert without.allocate(1, BLOCK + 3, prefix_hashes=[7, 8]) is not None
    assert without.growth_is_pooled(1)


@pytest.mark.parametrize("kind", sorted(set(registered_kinds()) - set(pooled_kinds())))
def test_policies_without_a_pool_take_no_bulk_growth(kind: str) -> None:
    """A policy that is not pooled has no growth reservoir (the methods are absent, or
    refuse)."""
    x = build_allocator(kind, 4_000, max_seq_tokens=1024)
    assert x.allocate(1, 10, reserve_tokens=20) is not None
    assert not is_pooled(x)
    with pytest.raises((AttributeError, NotImplementedError)):
        x.reserve_pool_blocks(1)  # type: ignore[attr-defined,unused-ignore]
    with pytest.raises((AttributeError, NotImplementedError)):
        x.extend_reserved(1, 1)  # type: ignore[attr-defined,unused-ignore]


@pytest.mark.parametrize("kind", registered_kinds())
def test_cheap_counters_match_the_snapshot(kind: str) -> None:
    """``free_and_largest_tokens`` and ``copied_tokens_total`` (the engine's cheap reads)
    equal the ``stats()`` fields they stand for, through allocations, growth and frees."""
    alloc = build_allocator(kind, 5_000, max_seq_tokens=1024)
    rng = np.random.default_rng(5)
    live: list[int] = []
    for rid in range(300):
        if live and rng.random() < 0.4:
            alloc.free(live.pop(int(rng.integers(len(live)))))
        elif live and rng.random() < 0.5:
            alloc.extend(live[int(rng.integers(len(live)))], int(rng.integers(1, 200)))
        elif alloc.allocate(rid, int(rng.integers(1, 900))) is not None:
            live.append(rid)
        s = alloc.stats()
        assert alloc.free_and_largest_tokens() == (s.free_tokens, s.largest_free_extent_tokens)
        assert alloc.copied_tokens_total() == s.copied_tokens_total + s.moved_tokens_total
