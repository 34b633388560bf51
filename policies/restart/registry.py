"""The one registry of restart policies: ``kind`` name -> config class.

A fleet scenario names a restart policy as ``{kind: fragmentation, ...}``;
:func:`parse_restart` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policies.registry import build_registry as registry_of
from policies.registry import parse_kind
from policies.restart import config as cfg
from policies.restart.config import RestartConfig


def build_registry(classes: Iterable[type[RestartConfig]]) -> dict[str, type[RestartConfig]]:
    """A registry from config classes; naming a kind twice is an error."""
    return registry_of(classes, "restart policy")


def _restart_classes() -> list[type[RestartConfig]]:
    # Keep this list explicit: one line per policy.
    return [
        cfg.NoRestartConfig,
        cfg.ScheduledConfig,
        cfg.FragmentationConfig,
        cfg.AlertConfig,
        cfg.RollingConfig,
    ]


RESTART_POLICIES: dict[str, type[RestartConfig]] = build_registry(_restart_classes())


def parse_restart(data: Mapping[str, Any]) -> RestartConfig:
    """Validate a ``{kind: ..., ...}`` mapping (``policies.registry.parse_kind``)."""
    return parse_kind(RESTART_POLICIES, data, "restart policy")
