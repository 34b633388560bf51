"""DecodeTicks' books against brute force: the closed form H(T) of pooled blocks, held
and unsynced tokens, finish and decision order, and the growth reservoir it draws."""

from __future__ import annotations

import numpy as np
import pytest

from policies.allocators.base import PoolSpec
from policies.allocators.paged import PagedAllocator
from policies.allocators.registry import ALLOCATORS
from sim.engine.scheduler import Group
from sim.engine.ticks import DecodeTicks


def _members(alloc: PagedAllocator, rng: np.random.Generator, n: int, forks: bool) -> list[Group]:
    groups = []
    next_sid = 0
    for i in range(n):
        prompt = int(rng.integers(1, 300))
        width = int(rng.choice([1, 2, 3])) if forks else 1
        ids = list(range(next_sid, next_sid + width))
        next_sid += width
        assert alloc.allocate(ids[0], prompt) is not None
        for sid in ids[1:]:
            assert alloc.fork(ids[0], sid)
        # grow every sequence past the shared tail so growth is pooled
        extra = int(rng.integers(16, 40))
        for sid in ids:
            assert alloc.extend(sid, extra)
        g = Group(i, 0.0, prompt, int(rng.integers(50, 400)), width)
        g.seq_ids = ids
        g.held_tokens = g.synced_tokens = prompt + extra
        g.generated_tokens = extra + 1
        g.order = i
        groups.append(g)
    return groups


@pytest.mark.parametrize("block_tokens", [1, 16, 37])
@pytest.mark.parametrize("forks", [False, True])
def test_pooled_blocks_and_tokens_match_brute_force(block_tokens: int, forks: bool) -> None:
    rng = np.random.default_rng(block_tokens + forks)
    alloc = PagedAllocator(
        PoolSpec(capacity_tokens=2_000_000), block_size_tokens=block_tokens, prefix_caching=False
    )
    ticks = DecodeTicks(alloc)
    ticks.tick = ticks.done = 1234  # members join at an arbitrary tick
    groups = _members(alloc, rng, 40, forks)
    for g in groups:
        ticks.join(g)
    assert all(g.pooled for g in groups)
    for steps in range(0, 3 * block_tokens + 5):
        tick = 1234 + steps
        held = [g.held_tokens + steps for g in groups]
        want = sum(g.num_seqs * -(-h // block_tokens) for g, h in zip(groups, held, strict=True))
        assert ticks.pooled_blocks(tick) == want
    assert ticks.kv_tokens() == sum(g.num_seqs * g.held_tokens for g in groups)
    assert ticks.seqs == sum(g.num_seqs for g in groups)
    # the last tick within a block budget: the largest T with H(T) <= blocks, by scan
    h_now = ticks.pooled_blocks(1234)
    for blocks in [h_now - 1, h_now, *rng.integers(h_now, h_now + 400, 30).tolist()]:
        tick = 0
        while ticks.pooled_blocks(tick + 1) <= blocks:
            tick += 1
        want_tick = tick if ticks.pooled_blocks(tick) <= blocks else -1
        assert ticks.last_tick_within(blocks) == want_tick, blocks


def test_advance_draws_exactly_the_crossed_blocks_and_leave_hands_them_out() -> None:
    rng = np.random.default_rng(7)
    alloc = PagedAllocator(PoolSpec(capacity_tokens=200_000), prefix_caching=False)
    ticks = DecodeTicks(alloc)
    groups = _members(alloc, rng, 25, forks=True)
    for g in groups:
        ticks.join(g)
    free0 = alloc.pool_free_blocks()
    blocks0 = ticks.pooled_blocks(ticks.tick)
    ticks.advance(37, 37)
    drawn = ticks.pooled_blocks(ticks.tick) - blocks0
    assert alloc.pool_free_blocks() == free0 - drawn
    assert alloc.pool_reserved_blocks() == drawn
    assert ticks.unsynced_tokens() == 37 * ticks.seqs
    for g in groups:  # every member leaves: the reservoir empties into their tables
        ticks.leave(g, leaving_batch=True)
        assert all(alloc.held_tokens(sid) == g.held_tokens for sid in g.seq_ids)
    assert alloc.pool_reserved_blocks() == 0
    ticks.clear_heaps()  # asserts the books are empty


def test_finishes_come_out_in_admission_order_and_decisions_when_due() -> None:
    spec = PoolSpec(capacity_tokens=100_000)
    alloc = ALLOCATORS["best_fit"].model_validate({"kind": "best_fit"}).build(spec)
    ticks = DecodeTicks(alloc)
    groups = []
    for i, (output, room) in enumerate([(30, 5), (10, 50), (10, 2), (40, 9)]):
        assert alloc.allocate(i, 100) is not None
        g = Group(i, 0.0, 100, output)
        g.seq_ids = [i]
        g.held_tokens = g.synced_tokens = 100
        g.limit_tokens = 100 + room
        g.generated_tokens = 1
        g.order = i
        ticks.join(g)
        groups.append(g)
    assert not any(g.pooled for g in groups)
    assert ticks.next_decision_tick() == 3  # the member with 2 slots of room, at step 3
    assert [g.request_id for g in ticks.due()] == []
    ticks.advance(2, 2)
    assert [g.request_id for g in ticks.due()] == [2]
    ticks.advance(7, 7)
    assert ticks.next_finish_done() == 9
    assert [g.request_id for g in ticks.pop_finished()] == [1, 2]
