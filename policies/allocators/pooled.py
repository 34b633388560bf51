"""The pooled-growth seam: policies whose growth draws interchangeable blocks.

A *pooled* policy (``paged``: fixed-size blocks; ``vm_paged``: page groups mapped on
demand) grows a sequence past its headroom by taking whole blocks of
``pool_block_tokens`` slots from one shared free pool, and any free block serves any
sequence. The engine's decode ticks (``sim.engine.ticks``) use that to grow a whole
batch in O(1): before a step (or a run of steps) they draw the blocks every pooled
sequence will cross into, in one call, into a *growth reservoir*
(:meth:`PooledAllocator.reserve_pool_blocks`); each sequence takes its own blocks from
there when it is next synced (:meth:`PooledAllocator.extend_reserved`). The allocator
sees the same draws, in the same order relative to every free and admission, as one
``extend`` per block boundary would have made.

This module keeps the reservoir's books once for every pooled policy, and the one routine
that draws a sequence's blocks (:meth:`PooledAllocator._take_blocks`: check, refuse with
the need, or draw in ``extend``'s order), which every ``allocate``, ``extend`` and copying
``fork`` of a pooled policy goes through. A policy keeps ``_free_blocks`` (what
``pool_free_blocks()`` answers) and implements the three questions and the two moves
below; everything else is here::

    blocks_to_extend(seq, tokens)      blocks extend(seq, tokens) would draw
    growth_is_pooled(seq)              growth of seq draws plain blocks and nothing else
    _pooled_need(seq, tokens)          blocks a pooled growth draws (seq checked pooled)
    _draw_free_blocks(n)               take n free blocks exactly as extend would
    _grow_from_reservoir(seq, blocks, tokens)   hand reserved blocks and tokens to seq
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from policies.allocators.base import Allocator, PoolSpec


@mypyc_attr(allow_interpreted_subclasses=True)
class PooledAllocator(Allocator):
    """Base of pooled policies: growth beyond ``headroom_tokens`` takes interchangeable
    blocks of ``pool_block_tokens`` slots from a shared pool (see the module docstring).

    Reservoir blocks count as owned, unused memory (``reserved_unused_tokens``) until a
    sequence takes them; ``free`` never touches the reservoir."""

    def __init__(self, spec: PoolSpec, block_tokens: int) -> None:
        super().__init__(spec)
        self.pool_block_tokens: int = block_tokens
        """Slots per block (a paged block, a vAttention page group)."""
        self._reservoir_blocks = 0
        self._free_blocks = 0
        """Blocks growth can draw without failing (evictable cached blocks included); the
        policy keeps it: its pool size at first, less what it draws, plus what it frees."""

    # -- what each pooled policy answers ---------------------------------------------
    def pool_free_blocks(self) -> int:
        """Blocks growth can draw without failing (evictable cached blocks included)."""
        return self._free_blocks

    def blocks_to_extend(self, request_id: int, tokens: int) -> int:
        """Blocks ``extend(request_id, tokens)`` would draw."""
        raise NotImplementedError

    def growth_is_pooled(self, request_id: int) -> bool:
        """True when growing this sequence by any t >= 0 tokens draws exactly
        ceil((held + t) / B) - ceil(held / B) plain blocks from the pool (B =
        ``pool_block_tokens``) and has no other effect (no copy, no cache change), and
        the sequence holds exactly ceil(held / B) blocks now."""
        raise NotImplementedError

    def _pooled_need(self, request_id: int, tokens: int) -> int:
        """Blocks a growth of ``tokens`` draws; raises ValueError (naming the request)
        unless the sequence's growth is pooled."""
        raise NotImplementedError

    def _draw_free_blocks(self, blocks: int) -> None:
        """Take ``blocks`` (<= ``pool_free_blocks()``) out of the free pool, in the order
        ``extend`` would take them now (same queue, same cache evictions)."""
        raise NotImplementedError

    def _grow_from_reservoir(self, request_id: int, blocks: int, tokens: int) -> None:
        """Give ``request_id`` ``blocks`` blocks already taken from the reservoir and
        ``tokens`` more held tokens."""
        raise NotImplementedError

    # -- drawing a sequence's blocks (shared) -----------------------------------------
    def _take_blocks(self, blocks: int) -> bool:
        """Draw ``blocks`` (>= 0) free blocks for a sequence, as ``extend`` draws them; or,
        when fewer are free, record the refusal (its need: ``blocks`` whole blocks) and
        return False with nothing taken."""
        if blocks > self._free_blocks:
            self._refuse(blocks * self.pool_block_tokens)
            return False
        if blocks:
            self._draw_free_blocks(blocks)
        return True

    # -- the reservoir (shared) -------------------------------------------------------
    def reserve_pool_blocks(self, blocks: int) -> bool:
        """Take ``blocks`` (>= 0) plain blocks out of the free pool into the growth
        reservoir, drawing them exactly as ``extend`` would at this moment. False when
        fewer are free: nothing is taken and no failure is recorded."""
        if blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {blocks}")
        if blocks > self.pool_free_blocks():
            return False
        if blocks:
            self._draw_free_blocks(blocks)
            self._reservoir_blocks += blocks
        return True

    def extend_reserved(self, request_id: int, tokens: int) -> None:
        """``extend(request_id, tokens)`` of a sequence whose growth is pooled, taking the
        blocks it needs from the reservoir instead of the free pool. Raises ValueError
        when the reservoir holds fewer blocks than needed or the growth is not pooled."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        need = self._pooled_need(request_id, tokens)
        if need > self._reservoir_blocks:
            raise ValueError(
                f"request {request_id} needs {need} reserved blocks, the reservoir "
                f"holds {self._reservoir_blocks}"
            )
        self._reservoir_blocks -= need
        self._grow_from_reservoir(request_id, need, tokens)

    def pool_reserved_blocks(self) -> int:
        """Blocks in the growth reservoir."""
        return self._reservoir_blocks


def as_pooled(allocator: Allocator) -> PooledAllocator | None:
    """The allocator as a pooled policy, or None when its growth is not pooled."""
    return allocator if isinstance(allocator, PooledAllocator) else None
