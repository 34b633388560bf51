"""The one registry helper every policy family uses (allocators, routers, restart
policies, autoscalers): ``kind`` name -> pydantic config class.

A family's ``registry.py`` is one :class:`Registry` built from one explicit list of its
config classes; registering a new kind is its module, its config and one line in that
list. Naming a kind twice is an error that names both classes."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TypeVar

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


def parse_kind(registry: Mapping[str, type[C]], data: Mapping[str, object], family: str) -> C:
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


class Registry(dict[str, type[C]]):
    """One family's registry: ``kind`` -> config class, in the order listed (a dict, so
    every reader and a test's ``monkeypatch.setitem`` work as on any mapping), that
    parses a scenario's ``{kind: ..., ...}`` mapping (:meth:`parse`). ``family`` names
    the family in errors (``"router"``, ``"restart policy"``)."""

    def __init__(self, family: str, classes: Iterable[type[C]]) -> None:
        super().__init__(build_registry(classes, family))
        self.family = family

    def parse(self, data: Mapping[str, object]) -> C:
        """Validate a ``{kind: ..., ...}`` mapping (:func:`parse_kind`)."""
        return parse_kind(self, data, self.family)
