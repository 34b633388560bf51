"""Allocators for tests: every registered policy built on a small pool, the variants a
test adds on top, and the pool accounting every policy keeps.

Tests that should cover every policy take their list from :func:`registry_configs`
(one default config per kind in ``policies.allocators.registry.ALLOCATORS``, then the
test's extra variants), so a newly registered policy is tested without editing them;
:func:`assert_covers_registry` fails a test whose list misses a registered kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from policies.allocators.base import Allocator, AllocStats, PoolSpec
from policies.allocators.extents import Fit
from policies.allocators.pooled import as_pooled
from policies.allocators.registry import ALLOCATORS, parse_allocator

KV_BYTES_PER_TOKEN = 2 * 32 * 4096 * 2
"""llama-2-7b's K and V bytes per token (32 layers, 4096 wide, bf16): 512 KiB. Gives
the byte-sized policies realistic units: a default ``vm_paged`` page group is 256
tokens (64 KiB pages: 8), a ``caching`` segment of 2 MiB is 4 tokens."""

Config = dict[str, Any]


def registered_kinds() -> list[str]:
    """Every allocator kind a scenario may name, sorted."""
    return sorted(ALLOCATORS)


def fit_kinds() -> list[str]:
    """Every registered kind that places contiguous buffers by one of the extent index's
    fits (``policies.allocators.extents.Fit``), sorted."""
    return sorted(kind for kind in ALLOCATORS if kind in get_args(Fit))


def kv_manager_kinds() -> list[str]:
    """Every registered kind whose config declares itself a KV manager
    (``AllocatorConfig.kv_manager``: memory split by layer kind), sorted."""
    return sorted(kind for kind, cls in ALLOCATORS.items() if cls.kv_manager)


def registry_configs(*extras: Mapping[str, Any]) -> list[Config]:
    """``{"kind": kind}`` for every registered kind (its defaults), then ``extras``:
    variants a test adds on top (prefix caching, small pages, ...), each validated here
    so a misspelt field fails at collection."""
    configs = [{"kind": kind} for kind in registered_kinds()] + [dict(e) for e in extras]
    for config in configs:
        parse_allocator(config)
    return configs


def config_id(config: Mapping[str, Any]) -> str:
    """A pytest id: the kind, then the other values (``paged-4-True``)."""
    return "-".join(str(v) for v in config.values())


def assert_covers_registry(configs: Iterable[Mapping[str, Any]]) -> None:
    """Every registered kind appears (at least once) in ``configs``."""
    missing = set(ALLOCATORS) - {c["kind"] for c in configs}
    assert not missing, f"registered allocator kinds not tested: {sorted(missing)}"


def small_pool(
    capacity_tokens: int,
    *,
    max_seq_tokens: int = 4096,
    kv_bytes_per_token: int = KV_BYTES_PER_TOKEN,
) -> PoolSpec:
    """A pool of ``capacity_tokens`` slots of a llama-2-7b replica on one GPU."""
    return PoolSpec(
        capacity_tokens=capacity_tokens,
        kv_bytes_per_token=kv_bytes_per_token,
        max_seq_tokens=max_seq_tokens,
    )


def build_allocator(
    config: Mapping[str, Any] | str, capacity_tokens: int, **pool: Any
) -> Allocator:
    """A fresh allocator of ``config`` (a ``{kind: ..., ...}`` mapping, or a kind for its
    defaults), validated by the registry and built on :func:`small_pool` (``pool``:
    its keyword arguments)."""
    data = {"kind": config} if isinstance(config, str) else dict(config)
    return parse_allocator(data).build(small_pool(capacity_tokens, **pool))


def kinds_building(cls: type) -> list[str]:
    """The registered kinds whose default allocator is a ``cls`` (a policy family)."""
    return [k for k in registered_kinds() if isinstance(build_allocator(k, 4096), cls)]


def is_pooled(alloc: Allocator) -> bool:
    """Whether ``alloc`` grows sequences by interchangeable blocks of a shared pool: the
    pooled-growth seam (``policies.allocators.pooled``) applies."""
    return as_pooled(alloc) is not None


def pooled_kinds() -> list[str]:
    """The registered kinds whose default allocator is pooled."""
    return [k for k in registered_kinds() if is_pooled(build_allocator(k, 4096))]


def assert_pool_accounting(
    used_tokens: int | npt.ArrayLike,
    reserved_unused_tokens: int | npt.ArrayLike,
    free_tokens: int | npt.ArrayLike,
    capacity_tokens: int | npt.ArrayLike,
    largest_free_extent_tokens: int | npt.ArrayLike,
) -> None:
    """The invariant of ``policies.allocators.base``: ``used + reserved_unused + free ==
    capacity``, none negative, and ``0 <= largest_free_extent <= free``. Takes one
    snapshot's numbers or whole columns (a run's timeseries), element by element."""
    used, unused, free, capacity, largest = (
        np.asarray(x)
        for x in (
            used_tokens,
            reserved_unused_tokens,
            free_tokens,
            capacity_tokens,
            largest_free_extent_tokens,
        )
    )
    bad = np.flatnonzero(np.atleast_1d(used + unused + free != capacity))
    assert bad.size == 0, f"used + reserved_unused + free != capacity at {bad[:5].tolist()}"
    assert (used >= 0).all() and (unused >= 0).all() and (free >= 0).all()
    assert ((largest >= 0) & (largest <= free)).all(), "largest free extent > free"


def check_pool(alloc: Allocator) -> AllocStats:
    """``alloc``'s stats, after asserting :func:`assert_pool_accounting` on them."""
    s = alloc.stats()
    assert_pool_accounting(
        s.used_tokens,
        s.reserved_unused_tokens,
        s.free_tokens,
        s.capacity_tokens,
        s.largest_free_extent_tokens,
    )
    return s


def prefix_hashes(family: int, variant: int, tokens: int, block_tokens: int) -> list[int]:
    """Chained-hash stand-ins covering every block of a ``tokens``-token prompt (the
    partial last one too): blocks 0-1 depend on the family only, later ones on the
    variant too, so prompts share 0, 2 or all of their leading blocks."""
    n = -(-tokens // block_tokens)
    return [family * 1000 + (j if j < 2 else 100 * (variant + 1) + j) for j in range(n)]
