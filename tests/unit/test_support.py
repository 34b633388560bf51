"""The test helpers that derive policy lists from the registry: every registered kind
is in them, a newly registered kind joins them without editing a test, and a list that
misses a kind fails its coverage check."""

from __future__ import annotations

from typing import Literal, get_args

import pytest
from support.allocators import (
    assert_covers_registry,
    assert_pool_accounting,
    build_allocator,
    fit_kinds,
    kv_manager_kinds,
    pooled_kinds,
    registered_kinds,
    registry_configs,
    small_pool,
)

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.config import BestFitConfig
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.extents import Fit
from policies.allocators.registry import ALLOCATORS, parse_allocator


class _NewFitConfig(BestFitConfig):
    """A policy registered after the tests were written."""

    kind: Literal["new_fit"] = "new_fit"  # type: ignore[assignment]

    def build(self, spec: PoolSpec) -> Allocator:
        return BestFitConfig().build(spec)


def test_registry_configs_give_every_kind_its_defaults_then_the_variants() -> None:
    variant = {"kind": "paged", "block_size_tokens": 4}
    configs = registry_configs(variant)
    assert configs[:-1] == [{"kind": kind} for kind in sorted(ALLOCATORS)]
    assert configs[-1] == variant
    assert_covers_registry(configs)


def test_a_newly_registered_kind_joins_the_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALLOCATORS, "new_fit", _NewFitConfig)
    assert "new_fit" in registered_kinds()
    assert {"kind": "new_fit"} in registry_configs()
    assert build_allocator("new_fit", 1_000).allocate(0, 10) is not None
    with pytest.raises(AssertionError, match="new_fit"):
        assert_covers_registry([{"kind": kind} for kind in ALLOCATORS if kind != "new_fit"])


def test_a_misspelt_variant_fails_at_once() -> None:
    with pytest.raises(ValueError):
        registry_configs({"kind": "paged", "block_size": 4})


def test_the_pooled_family_is_found() -> None:
    assert {"paged", "vm_paged"} <= set(pooled_kinds()) <= set(ALLOCATORS)


def test_the_kv_managers_are_found_by_their_flag() -> None:
    assert {"hybrid_kv", "split_pools", "window_pools"} <= set(kv_manager_kinds())
    assert "paged" not in kv_manager_kinds()


def test_pool_accounting_catches_a_leak() -> None:
    assert_pool_accounting(10, 5, 85, 100, 85)
    assert_pool_accounting([10, 0], [5, 0], [85, 100], [100, 100], [80, 100])
    with pytest.raises(AssertionError):
        assert_pool_accounting([10, 0], [5, 0], [85, 99], [100, 100], [80, 99])
    with pytest.raises(AssertionError):
        assert_pool_accounting(10, 5, 85, 100, 86)  # largest extent beyond free


def test_fit_kinds_are_the_registered_contiguous_fits() -> None:
    """Every fit of the extent index is a registered kind, built as a contiguous
    allocator (a fit dropped from the registry would silently leave its tests)."""
    assert fit_kinds() == sorted(get_args(Fit))
    for kind in fit_kinds():
        assert isinstance(
            parse_allocator({"kind": kind}).build(small_pool(1024)), ContiguousAllocator
        )
