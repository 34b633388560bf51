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

from policies.allocators.base import PoolSpec
from policies.allocators.contiguous import ContiguousAllocator, Placer

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
