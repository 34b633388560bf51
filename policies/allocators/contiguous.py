"""Contiguous variable-size policies (first / best / next / worst fit) and the machinery
the static, buddy and compaction policies share.

A request owns one contiguous buffer of slots: its prompt plus ``initial_extra_tokens``
at admission (the seed's "start with 64 more tokens"). Decoding fills the buffer; when
it is full the request asks for a larger buffer (by a factor or a fixed chunk), the old
and the new coexist while the held tokens are copied (as ``torch.cat`` does), then the
old one is freed and merges with its free neighbours. Copied tokens are counted in
``AllocStats.copied_tokens_total`` so the engine can charge copy time. A fork copies the
parent's held tokens into a buffer of the parent's size (no sharing).

Invariants: live buffers are disjoint; ``used + reserved_unused + free == capacity``
(every slot is in exactly one live buffer or free); every counter in ``stats()`` is kept
running, so reading it never scans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from policies.allocators.base import Allocation, Allocator, AllocStats, PoolSpec

# A live request's record: [start slot, reserved slots, held tokens] (a list: mutated
# in place on the hot path and by compaction).
_START, _RESERVED, _HELD = 0, 1, 2


class Placer(Protocol):
    """Where buffers go: a free-extent index (fits) or a buddy system."""

    free_tokens: int
    rounds_up: bool
    """True when ``grant_tokens(size)`` may exceed ``size``."""

    def take(self, size: int) -> int | None: ...
    def give(self, start: int, size: int) -> None: ...
    def grant_tokens(self, size: int) -> int: ...
    def largest_tokens(self) -> int: ...
    def extent_count(self) -> int: ...
    def extents(self) -> list[tuple[int, int]]: ...


class ContiguousAllocator(Allocator):
    """One contiguous buffer per request, placed by ``placer``, grown by reallocation.

    ``growth_chunk_tokens`` > 0 grows by whole chunks; otherwise by ``growth_factor``.
    Either way the new buffer holds at least the tokens asked for.
    """

    def __init__(
        self,
        spec: PoolSpec,
        placer: Placer,
        *,
        initial_extra_tokens: int = 64,
        growth_factor: float = 2.0,
        growth_chunk_tokens: int = 0,
    ) -> None:
        super().__init__(spec)
        if initial_extra_tokens < 0 or growth_factor <= 1.0 or growth_chunk_tokens < 0:
            raise ValueError("need initial_extra_tokens >= 0, growth_factor > 1, chunk >= 0")
        self._placer = placer
        self._initial_extra_tokens = initial_extra_tokens
        self._growth_factor = growth_factor
        self._growth_chunk_tokens = growth_chunk_tokens
        self._live: dict[int, list[int]] = {}
        self._held_total = 0
        self._reserved_total = 0
        self._copied_total = 0
        self._moved_total = 0
        self._moved_in_op = 0
        #: Places a new buffer: the placer's ``take``, or a hook that can compact first.
        self._place: Callable[[int], int | None] = placer.take
        self._grant: Callable[[int], int] | None = placer.grant_tokens if placer.rounds_up else None

    # -- policy hooks (static and compaction override) -----------------------------------
    def _admit_tokens(self, tokens: int, reserve_tokens: int | None) -> int:
        """Buffer size asked for at admission."""
        return max(1, tokens + self._initial_extra_tokens)

    def _grown_tokens(self, reserved: int, need: int) -> int | None:
        """Buffer size asked for when ``need`` tokens no longer fit in ``reserved``
        (None: this policy never grows)."""
        chunk = self._growth_chunk_tokens
        if chunk:
            return reserved + chunk * -(-(need - reserved) // chunk)
        return max(need, math.ceil(reserved * self._growth_factor))

    def _release(self, rec: list[int]) -> None:
        """Give a live buffer back to the placer (on free, and after growth copied it)."""
        self._placer.give(rec[_START], rec[_RESERVED])

    # -- the operations -------------------------------------------------------------------
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        self._check_new(request_id, self._live, tokens)
        size = self._admit_tokens(tokens, reserve_tokens)
        self._moved_in_op = 0
        start = self._place(size)
        granted = size if self._grant is None else self._grant(size)
        if start is None:
            self._refuse(granted)
            return None
        self._live[request_id] = [start, granted, tokens]
        self._held_total += tokens
        self._reserved_total += granted
        return Allocation(request_id, granted, 0, self._moved_in_op)

    def extend(self, request_id: int, tokens: int) -> bool:
        rec = self._live.get(request_id)
        if rec is None:
            raise KeyError(f"request {request_id} is not live")
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        held = rec[_HELD] + tokens
        if held <= rec[_RESERVED]:
            rec[_HELD] = held
            self._held_total += tokens
            return True
        return self._grow(rec, held)

    def _grow(self, rec: list[int], need: int) -> bool:
        size = self._grown_tokens(rec[_RESERVED], need)
        if size is None:
            self._refuse(need)
            return False
        self._moved_in_op = 0
        start = self._place(size)  # the old buffer is still live: both coexist
        granted = size if self._grant is None else self._grant(size)
        if start is None:
            self._refuse(granted)
            return False
        self._release(rec)
        self._copied_total += rec[_HELD]
        self._reserved_total += granted - rec[_RESERVED]
        self._held_total += need - rec[_HELD]
        rec[_START], rec[_RESERVED], rec[_HELD] = start, granted, need
        return True

    def fork(self, parent_id: int, child_id: int) -> bool:
        parent = self._record(parent_id)
        self._check_new(child_id, self._live)
        size = parent[_RESERVED]
        self._moved_in_op = 0
        start = self._place(size)
        granted = size if self._grant is None else self._grant(size)
        if start is None:
            self._refuse(granted)
            return False
        held = parent[_HELD]  # re-read: compaction may have moved the parent
        self._live[child_id] = [start, granted, held]
        self._held_total += held
        self._reserved_total += granted
        self._copied_total += held
        return True

    def free(self, request_id: int) -> None:
        rec = self._live.pop(request_id, None)
        if rec is None:
            raise KeyError(f"request {request_id} is not live")
        self._release(rec)
        self._held_total -= rec[_HELD]
        self._reserved_total -= rec[_RESERVED]

    # -- reading --------------------------------------------------------------------------
    def stats(self) -> AllocStats:
        placer = self._placer
        return AllocStats(
            capacity_tokens=self.spec.capacity_tokens,
            used_tokens=self._held_total,
            reserved_unused_tokens=self._reserved_total - self._held_total,
            shared_tokens=0,
            free_tokens=placer.free_tokens,
            largest_free_extent_tokens=placer.largest_tokens(),
            free_extent_count=placer.extent_count(),
            copied_tokens_total=self._copied_total,
            moved_tokens_total=self._moved_total,
        )

    def held_tokens(self, request_id: int) -> int:
        return self._record(request_id)[_HELD]

    def reserved_tokens(self, request_id: int) -> int:
        return self._record(request_id)[_RESERVED]

    def free_extent_sizes(self) -> list[int]:
        return [size for _, size in self._placer.extents()]

    def live_request_ids(self) -> list[int]:
        return list(self._live)

    def _extents_of(self, request_id: int) -> list[tuple[int, int]]:
        """Debug view for tests: the (start, size) slot ranges the request owns."""
        rec = self._record(request_id)
        return [(rec[_START], rec[_RESERVED])]

    def _free_extents(self) -> list[tuple[int, int]]:
        """Debug view for tests: (start, size) of every free extent, by address."""
        return self._placer.extents()

    def _record(self, request_id: int) -> list[int]:
        rec = self._live.get(request_id)
        if rec is None:
            raise KeyError(f"request {request_id} is not live")
        return rec


# -- configuration -------------------------------------------------------------------------
