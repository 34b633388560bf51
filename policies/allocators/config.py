"""Base of every allocator policy's configuration (validated at the scenario edge)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from policies.allocators.base import Allocator, PoolSpec


class AllocatorConfig(BaseModel):
    """A policy as a scenario names it: ``{kind: best_fit, ...parameters}``.

    Subclasses fix ``kind`` to a ``Literal`` and give every parameter bounds and a
    docstring; ``build`` makes a fresh allocator (a restart builds a new one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str

    def build(self, spec: PoolSpec) -> Allocator:
        raise NotImplementedError
