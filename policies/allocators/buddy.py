"""Buddy allocation: power-of-two blocks with split and merge.

A request asks for ``n`` slots and gets the smallest power-of-two block >= ``n`` (and >=
``min_block_tokens``); the rounding is reserved-but-unused (internal fragmentation).
A free block merges with its buddy (the block ``addr ^ size``) whenever both are free,
so two adjacent free blocks that are not buddies stay separate extents: a request can
use only one block, and the largest *usable* extent is the largest free block.

A pool that is not a power of two is a forest of maximal power-of-two roots, one per set
bit of the capacity, largest first (12 slots: [0, 8) and [8, 12)). Each root starts at a
multiple of its own size, so ``addr ^ size`` is still the buddy inside it; a block never
merges past its root because its buddy would lie outside the pool and is never free.
Slots in roots smaller than ``min_block_tokens`` are free but never allocated.

Growth is by reallocation to the next power of two (double the block), as in the
contiguous policies; ``BuddyConfig`` builds a ``ContiguousAllocator`` over ``BuddyBlocks``.
"""

from __future__ import annotations

from sortedcontainers import SortedList


class BuddyBlocks:
    """Free power-of-two blocks of a ``capacity_tokens``-slot pool, per order.

    ``take(size)`` returns the start of the lowest-addressed free block of the smallest
    order that fits, split down to ``grant_tokens(size)`` slots; ``give(start, size)``
    frees a granted block and merges buddies upward.
    """

    __slots__ = ("_free_by_order", "_min_order", "_order_at", "capacity_tokens", "free_tokens")

    rounds_up = True  # a request gets the next power of two

    def __init__(self, capacity_tokens: int, min_block_tokens: int = 1) -> None:
        if capacity_tokens <= 0:
            raise ValueError(f"capacity_tokens must be > 0, got {capacity_tokens}")
        if min_block_tokens <= 0 or min_block_tokens & (min_block_tokens - 1):
            raise ValueError(f"min_block_tokens must be a power of two, got {min_block_tokens}")
        self.capacity_tokens = capacity_tokens
        self._min_order = min_block_tokens.bit_length() - 1
        top = capacity_tokens.bit_length()
        self._free_by_order: list[SortedList] = [SortedList() for _ in range(top)]
        self._order_at: dict[int, int] = {}  # free block start -> its order
        self.free_tokens = capacity_tokens
        start = 0
        for order in range(top - 1, -1, -1):  # the forest of maximal roots
            if capacity_tokens >> order & 1:
                self._add(start, order)
                start += 1 << order

    def grant_tokens(self, size: int) -> int:
        return 1 << max(self._min_order, (size - 1).bit_length())

    def take(self, size: int) -> int | None:
        want = max(self._min_order, (size - 1).bit_length())
        free_by_order = self._free_by_order
        for order in range(want, len(free_by_order)):
            if free_by_order[order]:
                break
        else:
            return None
        start: int = free_by_order[order].pop(0)
        del self._order_at[start]
        while order > want:  # split, keeping the lower half
            order -= 1
            self._add(start + (1 << order), order)
        self.free_tokens -= 1 << want
        return start

    def give(self, start: int, size: int) -> None:
        order = size.bit_length() - 1
        if size != 1 << order or start & (size - 1) or start + size > self.capacity_tokens:
            raise ValueError(f"[{start}, {start + size}) is not a block of this pool")
        if start in self._order_at:
            raise ValueError(f"double free: block at {start} is already free")
        self.free_tokens += size
        order_at = self._order_at
        while True:
            buddy = start ^ (1 << order)
            if order_at.get(buddy) != order:
                break
            del order_at[buddy]
            self._free_by_order[order].remove(buddy)
            start &= ~(1 << order)
            order += 1
        self._add(start, order)

    def largest_tokens(self) -> int:
        """The largest free block; O(log capacity)."""
        for order in range(len(self._free_by_order) - 1, -1, -1):
            if self._free_by_order[order]:
                return 1 << order
        return 0

    def extent_count(self) -> int:
        return len(self._order_at)

    def extents(self) -> list[tuple[int, int]]:
        return sorted((start, 1 << order) for start, order in self._order_at.items())

    def _add(self, start: int, order: int) -> None:
        self._order_at[start] = order
        self._free_by_order[order].add(start)
