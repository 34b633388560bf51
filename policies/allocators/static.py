"""Static reservation: a fixed contiguous span reserved at admission, never grown.

Modes (the Orca paper's baselines):

* ``max`` — the serving stack's maximum sequence length (``max_tokens``, default
  ``PoolSpec.max_seq_tokens``): FasterTransformer, Orca "max".
* ``pow2`` — the next power of two of the true final length (Orca "pow2").
* ``oracle`` — exactly the true final length (Orca "oracle").

The true final length is the ``reserve_tokens`` the engine passes to ``allocate``
(``pow2`` and ``oracle`` require it). A reservation is never smaller than the prompt. The
span is placed by a contiguous fit or a buddy system underneath (a buddy rounds the span
up to a power of two, and the rounding is owned by the request too). ``extend`` beyond the
reservation answers False (the request has outgrown its buffer); a fork reserves a span
of the parent's size and copies the parent's held tokens.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.buddy import BuddyBlocks
from policies.allocators.config import AllocatorConfig
from policies.allocators.contiguous import ContiguousAllocator, Placer
from policies.allocators.extents import FreeExtentIndex

StaticMode = Literal["max", "pow2", "oracle"]


class StaticAllocator(ContiguousAllocator):
    """One reservation per request, sized by ``mode`` at admission."""

    def __init__(
        self, spec: PoolSpec, placer: Placer, *, mode: StaticMode, max_tokens: int
    ) -> None:
        super().__init__(spec, placer, initial_extra_tokens=0)
        if mode not in ("max", "pow2", "oracle"):
            raise ValueError(f"unknown static mode {mode!r}")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
        self._mode = mode
        self._max_tokens = max_tokens

    def _admit_tokens(self, tokens: int, reserve_tokens: int | None) -> int:
        if self._mode == "max":
            return max(1, tokens, self._max_tokens)
        if reserve_tokens is None:
            raise ValueError(f"static mode {self._mode!r} needs reserve_tokens (final length)")
        final = max(1, tokens, reserve_tokens)
        if self._mode == "oracle":
            return final
        return 1 << (final - 1).bit_length()

    def _grown_tokens(self, reserved: int, need: int) -> int | None:
        return None


class StaticConfig(AllocatorConfig):
    """Reserve a fixed span at admission (max length, power of two, or oracle length)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    kind: Literal["static"] = "static"
    mode: StaticMode = "max"
    """How large a span to reserve: ``max`` length, ``pow2`` of the final length, or the
    exact final length (``oracle``)."""
    max_tokens: int | None = Field(None, ge=1, le=100_000_000)
    """Span reserved in ``max`` mode; None means ``PoolSpec.max_seq_tokens``."""
    placement: Literal["first_fit", "best_fit", "buddy"] = "first_fit"
    """The allocator underneath that places the spans."""
    min_block_tokens: int = Field(1, ge=1, le=1 << 30)
    """With ``placement: buddy``, the smallest block (a power of two)."""

    @field_validator("min_block_tokens")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"min_block_tokens must be a power of two, got {value}")
        return value

    def build(self, spec: PoolSpec) -> Allocator:
        placer: Placer
        if self.placement == "buddy":
            placer = BuddyBlocks(spec.capacity_tokens, self.min_block_tokens)
        else:
            placer = FreeExtentIndex(spec.capacity_tokens, self.placement)
        max_tokens = self.max_tokens if self.max_tokens is not None else spec.max_seq_tokens
        return StaticAllocator(spec, placer, mode=self.mode, max_tokens=max_tokens)
