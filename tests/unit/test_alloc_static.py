"""Static reservation as usage stories: the seed's internal fragmentation, Orca's three
modes, and the allocator underneath."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.allocators.base import PoolSpec
from policies.allocators.registry import parse_allocator
from policies.allocators.static import StaticAllocator


def _build(capacity: int, max_seq_tokens: int = 4_096, **config: object) -> StaticAllocator:
    alloc = parse_allocator({"kind": "static", **config}).build(
        PoolSpec(capacity, max_seq_tokens=max_seq_tokens)
    )
    assert isinstance(alloc, StaticAllocator)
    return alloc


def test_seed_capital_of_france_wastes_997_per_mille_of_its_reservation() -> None:
    alloc = _build(80_000)
    got = alloc.allocate(1, 8, reserve_tokens=12)
    assert got is not None and got.reserved_tokens == 4_096
    assert alloc.extend(1, 4)
    s = alloc.stats()
    assert s.used_tokens == 12 and s.reserved_unused_tokens == 4_084
    assert round(s.reserved_unused_tokens / 4_096, 3) == 0.997


def test_max_mode_admits_floor_capacity_over_max_requests_then_refuses_for_capacity() -> None:
    alloc = _build(10 * 4_096 + 100)
    for rid in range(10):
        assert alloc.allocate(rid, 8) is not None
    assert alloc.allocate(10, 8) is None
    failure = alloc.last_failure()
    assert failure is not None and failure.cause == "capacity" and failure.need_tokens == 4_096


def test_a_configured_max_tokens_overrides_the_stacks_max_sequence_length() -> None:
    alloc = _build(10_000, max_tokens=1_000)
    got = alloc.allocate(1, 10)
    assert got is not None and got.reserved_tokens == 1_000


@pytest.mark.parametrize(("mode", "reserved"), [("pow2", 1_024), ("oracle", 600)])
def test_pow2_and_oracle_size_the_reservation_from_the_final_length(
    mode: str, reserved: int
) -> None:
    alloc = _build(10_000, mode=mode)
    got = alloc.allocate(1, 100, reserve_tokens=600)
    assert got is not None and got.reserved_tokens == reserved
    assert alloc.headroom_tokens(1) == reserved - 100
    with pytest.raises(ValueError, match="reserve_tokens"):
        alloc.allocate(2, 100)


def test_extending_past_the_reservation_is_refused_and_changes_nothing() -> None:
    alloc = _build(10_000, mode="oracle")
    alloc.allocate(1, 100, reserve_tokens=150)
    assert alloc.extend(1, 50)
    assert not alloc.extend(1, 1)
    assert alloc.held_tokens(1) == 150 and alloc.reserved_tokens(1) == 150
    assert alloc.last_failure() is not None


def test_buddy_placement_rounds_the_span_to_a_power_of_two() -> None:
    alloc = _build(10_000, mode="oracle", placement="buddy")
    got = alloc.allocate(1, 100, reserve_tokens=600)
    assert got is not None and got.reserved_tokens == 1_024


def test_fork_reserves_another_span_and_copies_the_held_tokens() -> None:
    alloc = _build(10_000)
    alloc.allocate(1, 300)
    assert alloc.fork(1, 2)
    assert alloc.reserved_tokens(2) == 4_096 and alloc.held_tokens(2) == 300
    assert alloc.stats().copied_tokens_total == 300
    assert not alloc.fork(1, 3)  # a third 4,096-slot span does not fit


def test_config_rejects_unknown_modes_and_bad_block_sizes() -> None:
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "static", "mode": "median"})
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "static", "placement": "buddy", "min_block_tokens": 3})
