"""The one registry of restart policies: ``kind`` name -> config class.

A fleet scenario names a restart policy as ``{kind: fragmentation, ...}``;
:func:`parse_restart` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.registry import Registry
from policies.restart import config as cfg
from policies.restart.config import RestartConfig

# One line per kind; a kind listed twice is an error naming both classes.
RESTART_POLICIES: Registry[RestartConfig] = Registry(
    "restart policy",
    [
        cfg.NoRestartConfig,
        cfg.ScheduledConfig,
        cfg.FragmentationConfig,
        cfg.AlertConfig,
        cfg.RollingConfig,
    ],
)


def parse_restart(data: Mapping[str, object]) -> RestartConfig:
    """Validate a ``{kind: ..., ...}`` mapping against RESTART_POLICIES (``Registry.parse``)."""
    return RESTART_POLICIES.parse(data)
