"""Compaction: a contiguous fit policy that defragments when a placement fails for
fragmentation (enough free slots in total, no free extent large enough).

It slides live buffers toward address 0, lowest address first, and stops as soon as
the gap it has opened (all free slots below the next unmoved buffer) is large enough;
then it retries the placement, which now succeeds. A buffer that moves copies its held
tokens (its reserved-but-unused slots carry nothing): those are the *moved tokens*,
reported per admission in ``Allocation.moved_tokens`` and in total in
``AllocStats.moved_tokens_total``; the engine turns them into a stall. A failure for lack
of total free memory (capacity) moves nothing.

Cost: live buffers and free extents tile the pool, so with a map from start slot to live
buffer the pass walks addresses from 0 without sorting anything: O(moved buffers + free
extents below the opened gap), never O(all live requests).
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.allocators.base import Allocation, PoolSpec
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.extents import Fit, FreeExtentIndex

_START, _RESERVED, _HELD = 0, 1, 2


class CompactingAllocator(ContiguousAllocator):
    """A ``ContiguousAllocator`` over a ``FreeExtentIndex`` that compacts on
    fragmentation failures. Keeps ``_owner_at`` (start slot -> live record) in step with
    every placement, growth and free."""

    decisions_read_held = True  # a compaction moves (and charges) only held tokens

    def __init__(
        self,
        spec: PoolSpec,
        fit: Fit = "best_fit",
        *,
        initial_extra_tokens: int = 64,
        growth_factor: float = 2.0,
        growth_chunk_tokens: int = 0,
    ) -> None:
        index = FreeExtentIndex(spec.capacity_tokens, fit)
        super().__init__(
            spec,
            index,
            initial_extra_tokens=initial_extra_tokens,
            growth_factor=growth_factor,
            growth_chunk_tokens=growth_chunk_tokens,
        )
        self._index = index
        self._owner_at: dict[int, list[int]] = {}
        self._place = self._place_or_compact
        self.compaction_count = 0

    # -- keeping _owner_at -----------------------------------------------------------------
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        got = super().allocate(request_id, tokens, reserve_tokens=reserve_tokens)
        if got is not None:
            rec = self._live[request_id]
            self._owner_at[rec[_START]] = rec
        return got

    def _grow(self, rec: list[int], need: int) -> bool:
        ok = super()._grow(rec, need)  # releases the old buffer through _release
        if ok:
            self._owner_at[rec[_START]] = rec
        return ok

    def fork(self, parent_id: int, child_id: int) -> bool:
        ok = super().fork(parent_id, child_id)
        if ok:
            rec = self._live[child_id]
            self._owner_at[rec[_START]] = rec
        return ok

    def _release(self, rec: list[int]) -> None:
        del self._owner_at[rec[_START]]
        super()._release(rec)

    # -- compaction ------------------------------------------------------------------------
    def _place_or_compact(self, size: int) -> int | None:
        index = self._index
        start = index.take(size)
        if start is not None or index.free_tokens < size:
            return start  # placed, or a capacity failure: nothing to compact
        self._compact(size)
        return index.take(size)

    def _compact(self, size: int) -> None:
        """Slide live buffers down, lowest first, until a ``size``-slot gap is open."""
        index, owner_at = self._index, self._owner_at
        capacity = self.spec.capacity_tokens
        addr = cursor = moved = 0  # addr walks the pool; cursor is where buffers slide to
        while addr < capacity:
            free = index.size_at(addr)
            if free is not None:
                index.remove_extent(addr)
                addr += free
                continue
            if addr - cursor >= size:
                break  # the gap below the buffer at addr is large enough
            rec = owner_at.pop(addr)
            if addr != cursor:
                rec[_START] = cursor
                moved += rec[_HELD]
            owner_at[cursor] = rec
            cursor += rec[_RESERVED]
            addr += rec[_RESERVED]
        index.give(cursor, addr - cursor)
        self._moved_in_op += moved
        self._moved_total += moved
        self.compaction_count += 1
