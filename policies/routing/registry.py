"""The one registry of routers: ``kind`` name -> config class.

A fleet scenario names a router as ``{kind: least_outstanding, ...}``;
:func:`parse_router` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.registry import Registry
from policies.routing import config as cfg
from policies.routing.config import RouterConfig

# One line per kind; a kind listed twice is an error naming both classes.
ROUTERS: Registry[RouterConfig] = Registry(
    "router",
    [
        cfg.RoundRobinConfig,
        cfg.RandomConfig,
        cfg.LeastOutstandingConfig,
        cfg.LeastInFlightConfig,
        cfg.ShortestQueueConfig,
        cfg.PowerOfTwoConfig,
        cfg.LeastKvUsageConfig,
        cfg.WeightedConfig,
        cfg.SessionAffinityConfig,
        cfg.LengthPoolsConfig,
        cfg.FragmentationAwareConfig,
        cfg.PrefillDecodeConfig,
    ],
)


def parse_router(data: Mapping[str, Any]) -> RouterConfig:
    """Validate a ``{kind: ..., ...}`` mapping against ROUTERS (``Registry.parse``)."""
    return ROUTERS.parse(data)
