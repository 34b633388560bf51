"""The one registry of allocator policies: ``kind`` name -> config class.

A scenario names a policy as ``{kind: best_fit, ...}``; :func:`parse_allocator`
validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policies.allocators import config as cfg
from policies.allocators.config import AllocatorConfig
from policies.registry import build_registry as registry_of
from policies.registry import parse_kind


def build_registry(classes: Iterable[type[AllocatorConfig]]) -> dict[str, type[AllocatorConfig]]:
    """A registry from config classes; naming a kind twice is an error."""
    return registry_of(classes, "allocator")


def _policy_classes() -> list[type[AllocatorConfig]]:
    # Keep this list explicit: one line per policy family.
    return [
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
    ]


ALLOCATORS: dict[str, type[AllocatorConfig]] = build_registry(_policy_classes())


def parse_allocator(data: Mapping[str, Any]) -> AllocatorConfig:
    """Validate a ``{kind: ..., ...}`` mapping (``policies.registry.parse_kind``)."""
    return parse_kind(ALLOCATORS, data, "allocator")
