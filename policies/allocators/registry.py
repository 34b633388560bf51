"""The one registry of allocator policies: ``kind`` name -> config class.

A scenario names a policy as ``{kind: best_fit, ...}``; :func:`parse_allocator`
validates it against the class registered for that kind.
"""

# fragsim: pure: reads the pydantic configs; not on the hot path
from __future__ import annotations

from collections.abc import Mapping

from policies.allocators import config as cfg
from policies.allocators.config import AllocatorConfig
from policies.registry import Registry

# One line per kind; a kind listed twice is an error naming both classes.
ALLOCATORS: Registry[AllocatorConfig] = Registry(
    "allocator",
    [
        # contiguous family (static, contiguous fits, buddy, compaction)
        cfg.StaticConfig,
        cfg.FirstFitConfig,
        cfg.BestFitConfig,
        cfg.NextFitConfig,
        cfg.WorstFitConfig,
        cfg.BuddyConfig,
        cfg.CompactionConfig,
        # paged family (paged, vm_paged, caching)
        cfg.PagedConfig,
        cfg.VmPagedConfig,
        cfg.CachingConfig,
        # KV managers of hybrid / sliding-window models (one pool, split pools, per window)
        cfg.HybridKvConfig,
        cfg.SplitPoolsConfig,
        cfg.WindowPoolsConfig,
    ],
)


def parse_allocator(data: Mapping[str, object]) -> AllocatorConfig:
    """Validate a ``{kind: ..., ...}`` mapping against ALLOCATORS (``Registry.parse``)."""
    return ALLOCATORS.parse(data)
