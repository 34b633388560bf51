"""The free-extent index of the contiguous policies: coalescing free list over a pool of
token slots, with first / best / next / worst fit placement.

Why these structures (the pool runs for days and holds thousands of free extents, so no
operation may scan the free list):

* ``_size_at`` (start -> size) and ``_start_ending_at`` (end -> start): O(1) neighbour
  lookup, so a released extent merges with free neighbours on both sides at once.
* ``_by_size``: a sorted multiset of ``size << shift | start`` integers (one int compares
  faster than a tuple), bucketed like ``sortedcontainers.SortedList`` but without its
  positional index, which every ``sl[i]`` after a change rebuilds. Best fit is two
  ``bisect`` calls (smallest size >= need, lowest address among equal sizes); the
  largest extent, and so worst fit, is the last element.
* first / next fit only: ``LowestFitIndex``, extents keyed by their *last* slot (so
  carving from the front of an extent changes one size and moves no key) in at most
  8,192 address buckets under a dense max segment tree. "Lowest address with size >=
  need" (from 0, or from the roving pointer for next fit) is one climb-and-descent of
  depth <= 13 plus a scan of one bucket's few extents.

Invariants (checked by the property tests): extents are disjoint, none empty, no two
adjacent (coalesced), ``free_tokens`` is their total, and all views agree.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Literal, get_args

Fit = Literal["first_fit", "best_fit", "next_fit", "worst_fit"]
FITS: tuple[Fit, ...] = get_args(Fit)
"""The fits ``Fit`` names, in its order (one list: a new fit is one ``Fit`` value)."""


class SortedInts:
    """Sorted distinct ints in buckets of at most ``2 * load`` (``SortedList``'s layout):
    add, remove and pop-the-smallest->=x cost two C ``bisect`` calls and one list
    shift of a bucket."""

    __slots__ = ("_lists", "_load", "_maxes")

    def __init__(self, load: int = 500) -> None:
        self._lists: list[list[int]] = []
        self._maxes: list[int] = []
        self._load = load

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._lists)

    def __bool__(self) -> bool:
        return bool(self._maxes)

    def __iter__(self) -> Iterator[int]:
        for bucket in self._lists:
            yield from bucket

    def last(self) -> int | None:
        maxes = self._maxes
        return maxes[-1] if maxes else None

    def clear(self) -> None:
        self._lists.clear()
        self._maxes.clear()

    def add(self, value: int) -> None:
        maxes, lists = self._maxes, self._lists
        if not maxes:
            lists.append([value])
            maxes.append(value)
            return
        pos = bisect_right(maxes, value)
        if pos == len(maxes):
            pos -= 1
            lists[pos].append(value)
            maxes[pos] = value
        else:
            insort(lists[pos], value)
        bucket = lists[pos]
        if len(bucket) > self._load << 1:
            half = bucket[self._load :]
            del bucket[self._load :]
            maxes[pos] = bucket[-1]
            lists.insert(pos + 1, half)
            maxes.insert(pos + 1, half[-1])

    def remove(self, value: int) -> None:
        pos = bisect_left(self._maxes, value)
        bucket = self._lists[pos]
        i = bisect_left(bucket, value)
        if bucket[i] != value:
            raise KeyError(value)
        self._delete(pos, bucket, i)

    def pop_ceiling(self, value: int) -> int | None:
        """Remove and return the smallest element >= ``value`` (None if there is none)."""
        maxes = self._maxes
        pos = bisect_left(maxes, value)
        if pos == len(maxes):
            return None
        bucket = self._lists[pos]
        i = bisect_left(bucket, value)
        found = bucket[i]
        self._delete(pos, bucket, i)
        return found

    def _delete(self, pos: int, bucket: list[int], i: int) -> None:
        del bucket[i]
        if not bucket:
            del self._lists[pos]
            del self._maxes[pos]
        elif i == len(bucket):
            self._maxes[pos] = bucket[-1]


class LowestFitIndex:
    """Lowest-address search for first / next fit: free extents keyed by their last slot.

    The address space is cut into at most 8,192 buckets of ``2**bucket_shift`` slots; a
    dense max segment tree (a flat list) over the buckets holds the largest extent ending
    in each bucket, and each bucket keeps the last slots of its extents in address order.
    A search is one climb-and-descent of the tree (depth <= 13) and a scan of one
    bucket; an update rewrites one bucket maximum and its path, stopping at the first
    unchanged ancestor. A bucket holds few extents in practice (each is followed by a
    live buffer); the scan is linear in them.
    """

    __slots__ = ("_bucket_shift", "_lasts", "_leaf0", "_max", "_size_of")

    def __init__(self, capacity_tokens: int) -> None:
        self._bucket_shift = max(0, (capacity_tokens - 1).bit_length() - 13)
        buckets = ((capacity_tokens - 1) >> self._bucket_shift) + 1
        self._leaf0 = 1 << (buckets - 1).bit_length()
        self._max = [0] * (2 * self._leaf0)
        self._lasts: dict[int, list[int]] = {}  # bucket -> last slots, ascending
        self._size_of: dict[int, int] = {}  # last slot -> extent size

    def set(self, last: int, size: int) -> None:
        """The extent ending at slot ``last`` now has ``size`` slots (0: no extent)."""
        size_of = self._size_of
        bucket = last >> self._bucket_shift
        old = size_of.get(last, 0)
        if size:
            size_of[last] = size
            if not old:
                insort(self._lasts.setdefault(bucket, []), last)
        else:
            del size_of[last]
            lasts = self._lasts[bucket]
            lasts.remove(last)
            if not lasts:
                del self._lasts[bucket]
        tree = self._max
        i = bucket + self._leaf0
        if size >= tree[i]:  # a new maximum: ancestors only grow
            while i and tree[i] < size:
                tree[i] = size
                i >>= 1
            return
        if old < tree[i]:
            return  # the bucket's maximum was another extent
        lasts_now = self._lasts.get(bucket)
        best = max([size_of[x] for x in lasts_now]) if lasts_now else 0
        while i:
            if tree[i] == best:
                return
            tree[i] = best
            sibling = tree[i ^ 1]
            if sibling > best:
                best = sibling
            i >>= 1

    def lowest(self, size: int, from_slot: int) -> int | None:
        """Last slot of the lowest extent ending at or after ``from_slot`` with at least
        ``size`` slots; None if there is none."""
        tree, leaf0, size_of = self._max, self._leaf0, self._size_of
        bucket = from_slot >> self._bucket_shift
        if bucket >= leaf0:
            return None
        i = bucket + leaf0
        if tree[i] >= size:
            for last in self._lasts[bucket]:
                if last >= from_slot and size_of[last] >= size:
                    return last
        while True:  # the next subtree to the right with a large enough maximum
            while i & 1:
                i >>= 1
            if i == 0:
                return None
            i += 1
            if tree[i] >= size:
                break
        while i < leaf0:
            i <<= 1
            if tree[i] < size:
                i += 1
        for last in self._lasts[i - leaf0]:
            if size_of[last] >= size:
                return last
        raise AssertionError("bucket maximum out of date")


class FreeExtentIndex:
    """Free extents of a ``capacity_tokens``-slot pool, all free at construction.

    ``take(size)`` carves ``size`` slots from the front of the extent the fit picks and
    returns their start, or None when no extent is large enough (nothing changes then);
    ``give(start, size)`` returns slots to the pool, merging with free neighbours.
    """

    __slots__ = (
        "_by_size",
        "_mask",
        "_rover",
        "_shift",
        "_size_at",
        "_start_ending_at",
        "_tree",
        "capacity_tokens",
        "fit",
        "free_tokens",
    )

    rounds_up = False  # a request gets exactly the slots it asks for

    def __init__(self, capacity_tokens: int, fit: Fit = "best_fit") -> None:
        if capacity_tokens <= 0:
            raise ValueError(f"capacity_tokens must be > 0, got {capacity_tokens}")
        if fit not in FITS:
            raise ValueError(f"unknown fit {fit!r}; allowed: {', '.join(FITS)}")
        self.capacity_tokens = capacity_tokens
        self.fit: Fit = fit
        self._shift = capacity_tokens.bit_length()
        self._mask = (1 << self._shift) - 1
        self._size_at: dict[int, int] = {}
        self._start_ending_at: dict[int, int] = {}
        self._by_size = SortedInts()
        # Address tree only where the fit reads it; a leaf is an extent's last slot.
        self._tree = LowestFitIndex(capacity_tokens) if fit in ("first_fit", "next_fit") else None
        self._rover = 0
        self.free_tokens = 0
        self.give(0, capacity_tokens)

    # -- reading ------------------------------------------------------------------------
    def largest_tokens(self) -> int:
        """Size of the largest free extent (0 when none); O(1)."""
        maxes = self._by_size._maxes
        return maxes[-1] >> self._shift if maxes else 0

    def extent_count(self) -> int:
        return len(self._size_at)

    def extents(self) -> list[tuple[int, int]]:
        """(start, size) of every free extent in address order; O(n log n)."""
        return sorted(self._size_at.items())

    def grant_tokens(self, size: int) -> int:
        """Slots a ``size``-slot request is given (exactly ``size`` here)."""
        return size

    # -- placement ----------------------------------------------------------------------
    def take(self, size: int) -> int | None:
        """Carve ``size`` slots (> 0) from the front of the extent the fit picks; None if
        none fits. The extent's end does not move, so its address-tree leaf stays put."""
        fit = self.fit
        shift = self._shift
        by_size = self._by_size
        ends = self._start_ending_at
        tree = self._tree
        if tree is None:
            if fit == "best_fit":
                key = by_size.pop_ceiling(size << shift)
                if key is None:
                    return None
            else:  # worst fit
                key = by_size.last()
                if key is None or key >> shift < size:
                    return None
                by_size.remove(key)
            start = key & self._mask
            ext = key >> shift
        else:
            leaf = tree.lowest(size, self._rover if fit == "next_fit" else 0)
            if leaf is None and fit == "next_fit":
                leaf = tree.lowest(size, 0)
            if leaf is None:
                return None
            start = ends[leaf + 1]
            ext = leaf + 1 - start
            by_size.remove(ext << shift | start)
            tree.set(leaf, ext - size)
            self._rover = start + size
        del self._size_at[start]
        end = start + ext
        if ext > size:
            rest = start + size
            self._size_at[rest] = ext - size
            ends[end] = rest
            by_size.add((ext - size) << shift | rest)
        else:
            del ends[end]
        self.free_tokens -= size
        return start

    def give(self, start: int, size: int) -> None:
        """Return ``[start, start + size)`` to the pool, merging with free neighbours.
        Raises on a range outside the pool or starting at a free slot (a double free)."""
        end = start + size
        if size <= 0 or start < 0 or end > self.capacity_tokens:
            raise ValueError(f"cannot free [{start}, {end}) in a pool of {self.capacity_tokens}")
        size_at = self._size_at
        if start in size_at:
            raise ValueError(f"double free: slot {start} is already free")
        self.free_tokens += size
        by_size, shift, ends, tree = self._by_size, self._shift, self._start_ending_at, self._tree
        # Entries about to be overwritten are not deleted first.
        right = size_at.pop(end, None)
        if right is not None:
            by_size.remove(right << shift | end)
            end += right
        left_start = ends.pop(start, None)
        if left_start is not None:
            by_size.remove((start - left_start) << shift | left_start)
            if tree is not None:
                tree.set(start - 1, 0)
            start = left_start
        size_at[start] = end - start
        ends[end] = start
        by_size.add((end - start) << shift | start)
        if tree is not None:
            tree.set(end - 1, end - start)

    def remove_extent(self, start: int) -> int:
        """Take the whole free extent starting at ``start`` out of the pool (compaction
        reuses its slots); returns its size."""
        size = self._size_at.pop(start)
        del self._start_ending_at[start + size]
        self._by_size.remove(size << self._shift | start)
        if self._tree is not None:
            self._tree.set(start + size - 1, 0)
        self.free_tokens -= size
        return size

    def size_at(self, start: int) -> int | None:
        """Size of the free extent starting at ``start`` (None when none starts there)."""
        return self._size_at.get(start)
