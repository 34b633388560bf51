"""Registries of policy configs (``kind`` name -> pydantic config class), shared by every
policy family (allocators, routers; later restart and autoscaling policies)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

C = TypeVar("C", bound=BaseModel)


def kind_of(cls: type[BaseModel], family: str) -> str:
    """The ``kind`` a config class registers under: its ``kind`` field's default."""
    default = cls.model_fields["kind"].default
    if not isinstance(default, str):
        raise TypeError(f"{cls.__name__}.kind needs a Literal default naming the {family}")
    return default


def build_registry(classes: Iterable[type[C]], family: str) -> dict[str, type[C]]:
    """A registry from config classes; naming a kind twice is an error."""
    registry: dict[str, type[C]] = {}
    for cls in classes:
        kind = kind_of(cls, family)
        if kind in registry:
            raise ValueError(
                f"{family} kind {kind!r} registered twice "
                f"({registry[kind].__name__} and {cls.__name__})"
            )
        registry[kind] = cls
    return registry


def parse_kind(registry: Mapping[str, type[C]], data: Mapping[str, Any], family: str) -> C:
    """Validate a ``{kind: ..., ...}`` mapping against the class ``registry`` holds for
    its kind. Raises ValueError naming the kind and the allowed kinds, or pydantic's
    ValidationError naming the bad field."""
    kind = data.get("kind")
    allowed = ", ".join(sorted(registry))
    if "kind" not in data:
        close = difflib.get_close_matches("kind", [str(k) for k in data], n=1, cutoff=0.5)
        typo = f"; unknown field {close[0]}: did you mean kind?" if close else ""
        raise ValueError(f"needs a kind, one of {allowed}{typo}")
    if not isinstance(kind, str) or kind not in registry:
        raise ValueError(f"unknown {family} kind {kind!r}; allowed: {allowed}")
    return registry[kind].model_validate(dict(data))
