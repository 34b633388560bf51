"""The one registry of routers: ``kind`` name -> config class.

A fleet scenario names a router as ``{kind: least_outstanding, ...}``;
:func:`parse_router` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policies.registry import build_registry as registry_of
from policies.registry import parse_kind
from policies.routing import config as cfg
from policies.routing.config import RouterConfig


def build_registry(classes: Iterable[type[RouterConfig]]) -> dict[str, type[RouterConfig]]:
    """A registry from config classes; naming a kind twice is an error."""
    return registry_of(classes, "router")


def _router_classes() -> list[type[RouterConfig]]:
    # Keep this list explicit: one line per router.
    return [
        cfg.RoundRobinConfig,
        cfg.RandomConfig,
        cfg.LeastOutstandingConfig,
        cfg.ShortestQueueConfig,
        cfg.PowerOfTwoConfig,
        cfg.LeastKvUsageConfig,
        cfg.WeightedConfig,
        cfg.SessionAffinityConfig,
        cfg.LengthPoolsConfig,
        cfg.FragmentationAwareConfig,
    ]


ROUTERS: dict[str, type[RouterConfig]] = build_registry(_router_classes())


def parse_router(data: Mapping[str, Any]) -> RouterConfig:
    """Validate a ``{kind: ..., ...}`` mapping (``policies.registry.parse_kind``)."""
    return parse_kind(ROUTERS, data, "router")
