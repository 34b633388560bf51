"""The one registry of autoscalers: ``kind`` name -> config class.

A fleet scenario names an autoscaler as ``{kind: kv_target, ...}``;
:func:`parse_autoscaler` validates it against the class registered for that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policies.autoscale import config as cfg
from policies.autoscale.config import AutoscalerConfig
from policies.registry import build_registry as registry_of
from policies.registry import parse_kind


def build_registry(
    classes: Iterable[type[AutoscalerConfig]],
) -> dict[str, type[AutoscalerConfig]]:
    """A registry from config classes; naming a kind twice is an error."""
    return registry_of(classes, "autoscaler")


def _autoscaler_classes() -> list[type[AutoscalerConfig]]:
    # Keep this list explicit: one line per autoscaler.
    return [
        cfg.NoAutoscalerConfig,
        cfg.NaiveConfig,
        cfg.KvTargetConfig,
        cfg.QueueConfig,
        cfg.RunbookConfig,
    ]


AUTOSCALERS: dict[str, type[AutoscalerConfig]] = build_registry(_autoscaler_classes())


def parse_autoscaler(data: Mapping[str, Any]) -> AutoscalerConfig:
    """Validate a ``{kind: ..., ...}`` mapping (``policies.registry.parse_kind``)."""
    return parse_kind(AUTOSCALERS, data, "autoscaler")
