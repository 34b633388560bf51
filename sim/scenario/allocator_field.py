"""An ``allocator:`` mapping of a scenario (the replica's, a pool's, an offload tier's)
parsed into its policy's config, its errors worded as the scenario's fields."""

from __future__ import annotations

from pydantic import ValidationError

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.errors import validation_lines


def allocator_from(value: object) -> AllocatorConfig:
    """``value`` as an allocator config (a config is taken as is), else ValueError: a
    mapping without a known ``kind`` gets its did-you-mean, a bad field its line as
    ``allocator.FIELD`` reads it (``KIND: FIELD ...``)."""
    if isinstance(value, AllocatorConfig):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping with a 'kind' (one of {', '.join(ALLOCATORS)})")
    try:
        return parse_allocator(value)
    except ValidationError as e:
        raise ValueError(
            "; ".join(
                line.removeprefix("allocator: ")
                for line in validation_lines(
                    "allocator",
                    e,
                    value,
                    prefix=str(value["kind"]),
                    model=ALLOCATORS.get(value["kind"]),
                )
            )
        ) from None
