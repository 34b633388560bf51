"""The one registry of autoscalers: ``kind`` name -> config class.

A fleet scenario names an autoscaler as ``{kind: kv_target, ...}``;
:func:`parse_autoscaler` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.autoscale import config as cfg
from policies.autoscale.config import AutoscalerConfig
from policies.registry import Registry

# One line per kind; a kind listed twice is an error naming both classes.
AUTOSCALERS: Registry[AutoscalerConfig] = Registry(
    "autoscaler",
    [
        cfg.NoAutoscalerConfig,
        cfg.NaiveConfig,
        cfg.KvTargetConfig,
        cfg.QueueConfig,
        cfg.RunbookConfig,
    ],
)


def parse_autoscaler(data: Mapping[str, object]) -> AutoscalerConfig:
    """Validate a ``{kind: ..., ...}`` mapping against AUTOSCALERS (``Registry.parse``)."""
    return AUTOSCALERS.parse(data)
