"""The pooled policies' one block-drawing routine (``PooledAllocator._take_blocks``) and
the one ceil division (``blocks_for``): every ``allocate``, ``extend`` and copying
``fork`` of a pooled policy draws through it, so all refuse alike -- nothing taken, the
need recorded in whole blocks -- and draw what ``blocks_to_extend`` promised."""

from __future__ import annotations

import math

import pytest
from support.allocators import assert_pool_accounting, build_allocator, pooled_kinds

from policies.allocators.base import blocks_for
from policies.allocators.pooled import PooledAllocator, as_pooled


@pytest.mark.parametrize("block", [1, 2, 16, 512, 2**20, 2**31 - 1])
@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 2**31, 2**62 + 1])
def test_blocks_for_is_the_exact_ceiling(size: int, block: int) -> None:
    """Exact in integers where a float ceiling is not (sizes past 2**53)."""
    n = blocks_for(size, block)
    assert n * block >= size > (n - 1) * block
    if size < 2**53:
        assert n == math.ceil(size / block)


def pooled(kind: str, capacity_tokens: int) -> PooledAllocator:
    allocator = as_pooled(build_allocator(kind, capacity_tokens))
    assert allocator is not None, kind
    return allocator


@pytest.mark.parametrize("kind", pooled_kinds())
def test_a_refused_draw_takes_nothing_and_names_its_need_in_whole_blocks(kind: str) -> None:
    a = pooled(kind, 4096)
    bt = a.pool_block_tokens
    free_blocks = a.pool_free_blocks()
    assert a.allocate(1, (free_blocks - 1) * bt) is not None
    assert a.pool_free_blocks() == 1
    before = a.stats()
    assert a.allocate(2, 2 * bt - 1) is None  # two blocks, one free
    failure = a.last_failure()
    assert failure is not None and failure.need_tokens == 2 * bt
    assert a.stats() == before
    assert a.blocks_to_extend(1, 2 * bt) == 2
    assert a.extend(1, 2 * bt) is False
    failure = a.last_failure()
    assert failure is not None and failure.need_tokens == 2 * bt
    assert a.stats() == before and a.held_tokens(1) == (free_blocks - 1) * bt


@pytest.mark.parametrize("kind", pooled_kinds())
def test_each_draw_takes_what_blocks_to_extend_promised(kind: str) -> None:
    a = pooled(kind, 8192)
    bt = a.pool_block_tokens
    total = a.pool_free_blocks()
    assert a.allocate(1, bt + 1) is not None
    assert a.pool_free_blocks() == total - 2
    for tokens in (0, bt - 1, 1, 3 * bt, 5):
        promised = a.blocks_to_extend(1, tokens)
        free = a.pool_free_blocks()
        assert a.extend(1, tokens)
        assert free - a.pool_free_blocks() == promised
        assert a.reserved_tokens(1) == blocks_for(a.held_tokens(1), bt) * bt
    s = a.stats()
    assert_pool_accounting(
        s.used_tokens,
        s.reserved_unused_tokens,
        s.free_tokens,
        s.capacity_tokens,
        s.largest_free_extent_tokens,
    )
