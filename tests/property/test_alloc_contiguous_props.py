"""Invariants of the contiguous family (static, fits, buddy, compaction) over random
sequences of allocate / extend / fork / free, checked after every operation: the live
buffers and free extents tile the pool, free extents are coalesced (or buddy-aligned),
fits choose the extent they promise, refusals change nothing and say why.

The family is every registered kind whose allocator is a ``ContiguousAllocator``, each
with its defaults, then the variants in ``CONFIGS``."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from support.allocators import check_pool, config_id, kinds_building

from policies.allocators.base import AllocStats, PoolSpec, classify
from policies.allocators.compaction import CompactingAllocator
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.registry import parse_allocator

CONTIGUOUS_KINDS = kinds_building(ContiguousAllocator)
"""The registered kinds of the contiguous family."""

CONFIGS: list[dict[str, Any]] = [{"kind": kind} for kind in CONTIGUOUS_KINDS] + [
    {"kind": "first_fit", "initial_extra_tokens": 8},
    {"kind": "best_fit", "initial_extra_tokens": 8},
    {"kind": "next_fit", "initial_extra_tokens": 8, "growth_chunk_tokens": 16},
    {"kind": "worst_fit", "initial_extra_tokens": 0, "growth_factor": 1.5},
    {"kind": "best_fit", "initial_extra_tokens": 4, "growth_chunk_tokens": 7},
    {"kind": "buddy", "initial_extra_tokens": 8, "min_block_tokens": 1},
    {"kind": "buddy", "initial_extra_tokens": 8, "min_block_tokens": 8},
    {"kind": "static", "mode": "max", "max_tokens": 96, "placement": "first_fit"},
    {"kind": "static", "mode": "pow2", "placement": "best_fit"},
    {"kind": "static", "mode": "oracle", "placement": "buddy", "min_block_tokens": 4},
    {"kind": "compaction", "fit": "best_fit", "initial_extra_tokens": 8},
    {"kind": "compaction", "fit": "first_fit", "initial_extra_tokens": 8},
    {"kind": "compaction", "fit": "next_fit", "initial_extra_tokens": 0},
    {"kind": "compaction", "fit": "worst_fit", "growth_chunk_tokens": 16},
]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "allocate", "extend", "extend", "fork", "free"]),
        st.integers(0, 10_000),  # picks a live request
        st.one_of(st.integers(0, 60), st.integers(0, 400)),  # tokens
        st.integers(0, 200),  # output tokens (reserve_tokens - tokens)
    ),
    min_size=5,
    max_size=100,
)


Snapshot = tuple[AllocStats, list[tuple[int, int]], dict[int, tuple[list[tuple[int, int]], int]]]


def _snapshot(alloc: ContiguousAllocator) -> Snapshot:
    live = {
        rid: (alloc._extents_of(rid), alloc.held_tokens(rid)) for rid in alloc.live_request_ids()
    }
    return (alloc.stats(), alloc._free_extents(), live)


def _buddy_roots(capacity: int) -> list[tuple[int, int]]:
    roots, start = [], 0
    for order in range(capacity.bit_length() - 1, -1, -1):
        if capacity >> order & 1:
            roots.append((start, 1 << order))
            start += 1 << order
    return roots


def test_the_family_comes_from_the_registry() -> None:
    assert {"first_fit", "best_fit", "buddy", "static", "compaction"} <= set(CONTIGUOUS_KINDS)
    assert {c["kind"] for c in CONFIGS} == set(CONTIGUOUS_KINDS)


def check_invariants(alloc: ContiguousAllocator, is_buddy: bool) -> None:
    s = check_pool(alloc)
    cap = s.capacity_tokens
    free = alloc._free_extents()
    assert sum(size for _, size in free) == s.free_tokens
    assert len(free) == s.free_extent_count
    assert max((size for _, size in free), default=0) == s.largest_free_extent_tokens
    assert sorted(alloc.free_extent_sizes()) == sorted(size for _, size in free)
    held = reserved = 0
    spans: list[tuple[int, int, int | None]] = [(start, size, None) for start, size in free]
    for rid in alloc.live_request_ids():
        assert 0 <= alloc.held_tokens(rid) <= alloc.reserved_tokens(rid)
        assert alloc.headroom_tokens(rid) == alloc.reserved_tokens(rid) - alloc.held_tokens(rid)
        held += alloc.held_tokens(rid)
        reserved += alloc.reserved_tokens(rid)
        spans += [(start, size, rid) for start, size in alloc._extents_of(rid)]
    assert held == s.used_tokens
    assert reserved == s.used_tokens + s.reserved_unused_tokens
    if isinstance(alloc, CompactingAllocator):  # its start -> buffer map is in step
        starts = sorted(alloc._extents_of(rid)[0][0] for rid in alloc.live_request_ids())
        assert sorted(alloc._owner_at) == starts
    # Live buffers and free extents tile the pool exactly: no overlap, no gap.
    cursor = 0
    for start, size, _ in sorted(spans):
        assert size > 0
        assert start == cursor, f"overlap or hole at {start} (cursor {cursor})"
        cursor = start + size
    assert cursor == cap
    if is_buddy:  # free blocks are aligned powers of two, never two free buddies
        at = dict(free)
        for start, size in free:
            assert size & (size - 1) == 0
            assert at.get(start ^ size) != size or (start ^ size) + size > cap
    else:  # coalesced: no two free extents touch
        for (a, a_size), (b, _) in itertools.pairwise(free):
            assert a + a_size < b


def check_fit_choice(
    config: dict[str, Any],
    free_before: list[tuple[int, int]],
    size: int,
    alloc: ContiguousAllocator,
    rid: int,
) -> None:
    """First fit took the lowest fitting extent; best fit the smallest (lowest address on
    ties); worst fit a largest one."""
    fit = config.get("fit", config["kind"])
    fitting = [(start, ext) for start, ext in free_before if ext >= size]
    if not fitting:
        return  # compaction made room
    [(start, _)] = alloc._extents_of(rid)
    if fit == "first_fit":
        assert start == fitting[0][0]
    elif fit == "best_fit":
        assert start == min(fitting, key=lambda e: (e[1], e[0]))[0]
    elif fit == "worst_fit":
        assert dict(free_before)[start] == max(ext for _, ext in fitting)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@settings(max_examples=70, deadline=None)
@given(ops=OPS, capacity=st.integers(300, 1500))
def test_random_operation_sequences_keep_invariants(
    config: dict[str, Any], ops: list[tuple[str, int, int, int]], capacity: int
) -> None:
    alloc = parse_allocator(config).build(PoolSpec(capacity_tokens=capacity, max_seq_tokens=256))
    assert isinstance(alloc, ContiguousAllocator)
    is_buddy = config["kind"] == "buddy" or config.get("placement") == "buddy"
    next_id = 0
    for op, pick, tokens, output in ops:
        live = alloc.live_request_ids()
        before = _snapshot(alloc)
        copied_before = alloc.stats().copied_tokens_total
        if op == "allocate" or not live:
            result = alloc.allocate(next_id, tokens, reserve_tokens=tokens + output)
            ok = result is not None
            if result is not None:
                if result.moved_tokens:
                    event("compacted")
                moved = sum(
                    held
                    for rid, (extents, held) in before[2].items()
                    if alloc._extents_of(rid) != extents
                )
                assert result.moved_tokens == moved
                assert alloc.stats().moved_tokens_total - before[0].moved_tokens_total == moved
                assert result.reserved_tokens == alloc.reserved_tokens(next_id)
                check_fit_choice(config, before[1], result.reserved_tokens, alloc, next_id)
                assert result.moved_tokens >= 0
            next_id += 1
        elif op == "extend":
            rid = live[pick % len(live)]
            old_held = alloc.held_tokens(rid)
            ok = alloc.extend(rid, tokens // 4)
            if ok:
                assert alloc.held_tokens(rid) == old_held + tokens // 4
                moved_self = alloc.reserved_tokens(rid) != before[2][rid][0][0][1]
                copied = alloc.stats().copied_tokens_total - copied_before
                assert copied == (old_held if moved_self else 0)
        elif op == "fork":
            parent = live[pick % len(live)]
            ok = alloc.fork(parent, next_id)
            if ok:
                assert alloc.held_tokens(next_id) == alloc.held_tokens(parent)
                assert alloc.stats().copied_tokens_total - copied_before == alloc.held_tokens(
                    parent
                )
            next_id += 1
        else:
            alloc.free(live[pick % len(live)])
            ok = True
        if not ok:  # refused: nothing changed, and the diagnosis is right
            assert _snapshot(alloc) == before
            failure = alloc.last_failure()
            assert failure is not None
            event(f"{op} refused: {failure.cause}")
            s = alloc.stats()
            assert failure.free_tokens == s.free_tokens
            assert failure.largest_free_extent_tokens == s.largest_free_extent_tokens
            assert failure.cause == classify(
                failure.need_tokens, s.free_tokens, s.largest_free_extent_tokens
            )
            if not (op == "extend" and config["kind"] == "static"):
                assert failure.need_tokens > s.largest_free_extent_tokens  # truly no room
                if config["kind"] == "compaction":
                    assert failure.cause == "capacity"  # fragmentation is compacted away
        check_invariants(alloc, is_buddy)
    for rid in alloc.live_request_ids():
        alloc.free(rid)
    check_invariants(alloc, is_buddy)
    expected = _buddy_roots(capacity) if is_buddy else [(0, capacity)]
    assert alloc._free_extents() == expected


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_a_long_seeded_bimodal_run_keeps_invariants(config: dict[str, Any]) -> None:
    """3,000 operations of the seed's bimodal mix (scaled down) on a pool kept near full:
    many extents per address bucket, repeated compactions, growth and forks."""
    rng = np.random.default_rng(7)
    capacity = 200_000
    alloc = parse_allocator(config).build(PoolSpec(capacity_tokens=capacity, max_seq_tokens=4_096))
    assert isinstance(alloc, ContiguousAllocator)
    is_buddy = config["kind"] == "buddy" or config.get("placement") == "buddy"
    for step in range(3_000):
        live = alloc.live_request_ids()
        u = rng.random()
        if u < 0.4 or not live:
            tokens = int(rng.integers(1_500, 3_001) if rng.random() < 0.3 else rng.integers(5, 51))
            if alloc.allocate(step, tokens, reserve_tokens=tokens + 64) is None and live:
                alloc.free(live[int(rng.integers(len(live)))])
        elif u < 0.8:
            rid = live[int(rng.integers(len(live)))]
            if not alloc.extend(rid, int(rng.integers(1, 40))):
                alloc.free(rid)
        elif u < 0.85:
            alloc.fork(live[int(rng.integers(len(live)))], step)
        else:
            alloc.free(live[int(rng.integers(len(live)))])
        if step % 100 == 0:
            check_invariants(alloc, is_buddy)
    check_invariants(alloc, is_buddy)
    for rid in alloc.live_request_ids():
        alloc.free(rid)
    expected = _buddy_roots(capacity) if is_buddy else [(0, capacity)]
    assert alloc._free_extents() == expected
