"""A model of the PyTorch CUDA caching allocator holding KV caches as growing tensors.

This is how a naive serving stack (Hugging Face generate, a custom fork) keeps its KV
cache: one tensor per request, grown by reallocation (``torch.cat``-style: allocate a new
tensor, copy, free the old, so both coexist at the peak), on top of PyTorch's caching
allocator (``c10/cuda/CUDACachingAllocator.cpp``). Internally everything is bytes of one
GPU: ``tokens * PoolSpec.gpu_kv_bytes_per_token``, the device has ``capacity_tokens *
gpu_kv_bytes_per_token``. Under tensor parallelism every GPU of the replica holds its
share of each tensor in its own caching allocator and makes the same decisions, so one
GPU's allocator stands for the replica, and PyTorch's byte thresholds below apply to
per-GPU sizes (a tensor is 1/tp of the replica's bytes).

Modelled from PyTorch:

* sizes round up to 512 B; requests <= 1 MiB use the *small* pool, larger the *large*;
* segments come from the device (``cudaMalloc``): 2 MiB for small requests, 20 MiB for
  requests < 10 MiB, else the request rounded up to 2 MiB;
* a request takes the best-fitting (smallest, then lowest address) cached free block of
  its pool; a free block serves only requests that fit inside it; the block is split when
  the remainder is >= 512 B (small pool) or > 1 MiB (large pool), else the request keeps
  the whole block;
* a freed block merges with free neighbours of its segment;
* when nothing fits and the device has no room for a new segment, every fully free
  segment is released (``cudaFree``) and the segment allocation retried. Deviation: the
  release happens only when it makes the retry succeed, so a refusal leaves the state
  unchanged (PyTorch releases even when the retry then fails; totals are the same).
* ``expandable_segments``: one segment per pool whose virtual range grows at its end,
  mapped in pages of 2 MiB (small pool) / 20 MiB (large pool), as PyTorch's
  ``ExpandableSegment`` does. Modelling choice: pages that no allocated block touches are
  unmapped at once (PyTorch unmaps them on the release-and-retry path; the outcome of an
  allocation is the same), so mapped pages are exactly those touched by allocated blocks.

Not modelled: streams, ``max_split_size_mb``, garbage-collection thresholds, graph pools.

Statistics. ``free_tokens`` = device memory outside segments (or unmapped) + cached free
blocks. ``largest_free_extent_tokens`` is what one request can still get: the largest
cached free block, or the device memory outside segments plus the fully free segments a
retry would release (device memory is obtained only as whole segments; CUDA's own
physical fragmentation is not modelled). With expandable segments it is the unmapped
device memory (a request of that size maps at the segment end); partly used pages at
block edges count as free but not in the extent. A free extent is a cached free block,
plus one for the memory outside segments. Requests with a 0-token tensor own no block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sortedcontainers import SortedList

from policies.allocators.base import Allocation, Allocator, AllocStats, PoolSpec, blocks_for

MIN_BLOCK_BYTES = 512
SMALL_SIZE_BYTES = 1 << 20
SMALL_BUFFER_BYTES = 2 << 20
LARGE_BUFFER_BYTES = 20 << 20
MIN_LARGE_ALLOC_BYTES = 10 << 20
ROUND_LARGE_BYTES = 2 << 20
_LARGE_POOL_BASE = LARGE_BUFFER_BYTES << 32  # expandable: the large pool starts on a page


def round_size_bytes(nbytes: int) -> int:
    """PyTorch ``round_size``: at least 512 B, a multiple of 512 B."""
    return max(MIN_BLOCK_BYTES, blocks_for(nbytes, MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def segment_size_bytes(size_bytes: int) -> int:
    """PyTorch ``get_allocation_size``: the segment a new ``cudaMalloc`` asks for."""
    if size_bytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return blocks_for(size_bytes, ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


class _Block:
    """A block of a segment; segments are doubly linked lists of blocks by address."""

    __slots__ = ("addr", "free", "next", "prev", "size", "small")

    def __init__(
        self, addr: int, size: int, small: bool, prev: _Block | None, nxt: _Block | None
    ) -> None:
        self.addr = addr
        self.size = size
        self.small = small
        self.free = True
        self.prev = prev
        self.next = nxt


class _Tensor:
    """A request's KV tensor: ``held`` tokens in room for ``cap`` tokens."""

    __slots__ = ("block", "cap", "held")

    def __init__(self, held: int, cap: int, block: _Block | None) -> None:
        self.held = held
        self.cap = cap
        self.block = block


class CachingAllocator(Allocator):
    """PyTorch-style caching allocator under per-request growing KV tensors."""

    def __init__(
        self, spec: PoolSpec, *, expandable_segments: bool = False, growth_factor: float = 2.0
    ) -> None:
        super().__init__(spec)
        if growth_factor < 1.0:
            raise ValueError(f"growth_factor must be >= 1, got {growth_factor}")
        self._kvb = spec.gpu_kv_bytes_per_token  # one GPU's bytes per token
        self._device_bytes = spec.capacity_tokens * self._kvb
        self._device_free = self._device_bytes  # outside segments / unmapped
        self._expandable = expandable_segments
        self._growth = growth_factor
        self._free_sets: tuple[SortedList, SortedList] = (SortedList(), SortedList())
        self._free_at: dict[int, _Block] = {}
        self._releasable = 0  # bytes of fully free segments
        self._whole_free: dict[int, _Block] = {}  # fully free segments by address
        self._allocated = 0  # bytes in allocated blocks
        self._next_addr = 0
        # expandable: per pool, the last block and the page size; refcounts of edge pages
        self._tail: list[_Block | None] = [None, None]
        self._page = (SMALL_BUFFER_BYTES, LARGE_BUFFER_BYTES)
        self._edge_refs: dict[int, int] = {}
        self._tensors: dict[int, _Tensor] = {}
        self._used_tokens = 0
        self._copied_tokens = 0

    # -- the operations -------------------------------------------------------------
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        """A tensor of exactly ``tokens`` (growth later reallocates)."""
        self._check_new(request_id, self._tensors, tokens)
        block = self._malloc(tokens * self._kvb) if tokens else None
        if tokens and block is None:
            return None
        self._tensors[request_id] = _Tensor(tokens, tokens, block)
        self._used_tokens += tokens
        return Allocation(request_id, self._block_tokens(block))

    def extend(self, request_id: int, tokens: int) -> bool:
        """Grow in place while the tensor has room, else reallocate to
        ``max(held + tokens, ceil(cap * growth_factor))`` tokens, copying ``held``."""
        t = self._live(request_id)
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        if t.held + tokens > t.cap:
            cap = max(t.held + tokens, math.ceil(t.cap * self._growth))
            block = self._malloc(cap * self._kvb)
            if block is None:
                return False
            if t.block is not None:
                self._release(t.block)
            self._copied_tokens += t.held
            t.block, t.cap = block, cap
        t.held += tokens
        self._used_tokens += tokens
        return True

    def fork(self, parent_id: int, child_id: int) -> bool:
        """A copy of the parent's tensor (no sharing)."""
        self._check_new(child_id, self._tensors)
        p = self._live(parent_id)
        block = self._malloc(p.cap * self._kvb) if p.cap else None
        if p.cap and block is None:
            return False
        self._tensors[child_id] = _Tensor(p.held, p.cap, block)
        self._used_tokens += p.held
        self._copied_tokens += p.held
        return True

    def free(self, request_id: int) -> None:
        try:
            t = self._tensors.pop(request_id)
        except KeyError:
            raise KeyError(f"request {request_id} is not live (double free?)") from None
        if t.block is not None:
            self._release(t.block)
        self._used_tokens -= t.held

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: return every fully free segment to the device
        (expandable: drop the free virtual tail of each pool). With nothing live, the
        device is then one free extent."""
        if not self._expandable:
            self._release_free_segments()
            return
        for pool, tail in enumerate(self._tail):
            if tail is not None and tail.free:
                self._remove_free(tail)
                self._tail[pool] = tail.prev
                if tail.prev is not None:
                    tail.prev.next = None

    # -- reading ----------------------------------------------------------------------
    def stats(self) -> AllocStats:
        kvb = self._kvb
        capacity = self.spec.capacity_tokens
        free_bytes = self._device_bytes - self._allocated
        if self._expandable:
            largest_bytes = self._device_free
        else:
            largest_bytes = max(self._device_free + self._releasable, self._largest_block())
        free = free_bytes // kvb
        n_blocks = len(self._free_sets[0]) + len(self._free_sets[1])
        return AllocStats(
            capacity_tokens=capacity,
            used_tokens=self._used_tokens,
            reserved_unused_tokens=capacity - free - self._used_tokens,
            shared_tokens=0,
            free_tokens=free,
            largest_free_extent_tokens=min(free, largest_bytes // kvb),
            free_extent_count=n_blocks + (1 if self._device_free else 0),
            copied_tokens_total=self._copied_tokens,
        )

    def held_tokens(self, request_id: int) -> int:
        return self._live(request_id).held

    def reserved_tokens(self, request_id: int) -> int:
        return self._block_tokens(self._live(request_id).block)

    def headroom_tokens(self, request_id: int) -> int:
        t = self._live(request_id)
        return t.cap - t.held

    def free_extent_sizes(self) -> list[int]:
        kvb = self._kvb
        sizes = [size // kvb for fs in self._free_sets for size, _ in fs]
        if self._device_free:
            sizes.append(self._device_free // kvb)
        return sizes

    def segment_count(self) -> int:
        """Segments obtained from the device and not released (expandable: pools in use)."""
        if self._expandable:
            return sum(tail is not None for tail in self._tail)
        heads = {id(self._head(b)) for b in self._free_at.values()}
        heads.update(id(self._head(t.block)) for t in self._tensors.values() if t.block)
        return len(heads)

    # -- internals --------------------------------------------------------------------
    def _live(self, request_id: int) -> _Tensor:
        try:
            return self._tensors[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None

    def _block_tokens(self, block: _Block | None) -> int:
        return 0 if block is None else block.size // self._kvb

    @staticmethod
    def _head(block: _Block) -> _Block:
        while block.prev is not None:
            block = block.prev
        return block

    def _largest_block(self) -> int:
        small, large = self._free_sets
        return max(small[-1][0] if small else 0, large[-1][0] if large else 0)

    def _malloc(self, nbytes: int) -> _Block | None:
        """A block of at least ``nbytes`` or None (state unchanged, refusal recorded)."""
        size = round_size_bytes(nbytes)
        small = size <= SMALL_SIZE_BYTES
        fs = self._free_sets[0 if small else 1]
        i = fs.bisect_left((size, -1))
        block = self._free_at[fs[i][1]] if i < len(fs) else None
        if self._expandable:
            block = self._expandable_fit(block, size, small)
        elif block is None:
            block = self._new_segment(size, small)
        if block is None:
            self._refuse(blocks_for(nbytes, self._kvb))
            return None
        self._take(block, size)
        return block

    def _new_segment(self, size: int, small: bool) -> _Block | None:
        seg = segment_size_bytes(size)
        if seg > self._device_free:
            if seg > self._device_free + self._releasable:
                return None
            self._release_free_segments()
        self._device_free -= seg
        block = _Block(self._next_addr, seg, small, None, None)
        self._next_addr += seg
        self._insert_free(block)
        return block

    def _release_free_segments(self) -> None:
        """``cudaFree`` every segment that is one free block (PyTorch ``release_cached_blocks``)."""
        for block in list(self._whole_free.values()):
            self._remove_free(block)
            self._device_free += block.size

    def _expandable_fit(self, block: _Block | None, size: int, small: bool) -> _Block | None:
        """Best fit if its pages can be mapped, else grow the pool's segment at its end."""
        pool = 0 if small else 1
        if block is not None:
            taken = size if self._splits(block.size - size, small) else block.size
            if self._pages_to_map(block.addr, taken, pool) * self._page[pool] > self._device_free:
                return None
            return block
        tail = self._tail[pool]
        if tail is not None and tail.free:
            addr = tail.addr
        elif tail is not None:
            addr = tail.addr + tail.size
        else:
            addr = 0 if small else _LARGE_POOL_BASE
        if self._pages_to_map(addr, size, pool) * self._page[pool] > self._device_free:
            return None
        if tail is not None and tail.free:
            self._remove_free(tail)
            tail.size = size
            self._insert_free(tail)
            return tail
        grown = _Block(addr, size, small, tail, None)
        if tail is not None:
            tail.next = grown
        self._tail[pool] = grown
        self._insert_free(grown)
        return grown

    def _pages_to_map(self, addr: int, size: int, pool: int) -> int:
        page = self._page[pool]
        first, last = addr // page, (addr + size - 1) // page
        need = last - first + 1 - (self._edge_refs.get(first, 0) > 0)
        if last != first:
            need -= self._edge_refs.get(last, 0) > 0
        return need

    def _map(self, block: _Block, sign: int) -> None:
        """Expandable: ``sign`` +1 maps the pages an allocated block touches, -1 unmaps
        those no other allocated block touches. Interior pages belong to one block; only
        the first and last page can be shared, so only they carry refcounts."""
        page = self._page[0 if block.small else 1]
        first, last = block.addr // page, (block.addr + block.size - 1) // page
        pages = max(0, last - first - 1)
        refs = self._edge_refs
        for p in {first, last}:
            r = refs.get(p, 0) + sign
            assert r >= 0, f"negative page refcount at page {p}"
            if r == (1 if sign > 0 else 0):
                pages += 1  # page mapped (0 -> 1) or unmapped (1 -> 0)
            if r:
                refs[p] = r
            else:
                del refs[p]
        self._device_free -= sign * pages * page
        assert self._device_free >= 0, "device over-committed"

    @staticmethod
    def _splits(remaining_bytes: int, small: bool) -> bool:
        """PyTorch ``should_split``: small pool >= 512 B left, large pool > 1 MiB left."""
        if small:
            return remaining_bytes >= MIN_BLOCK_BYTES
        return remaining_bytes > SMALL_SIZE_BYTES

    def _take(self, block: _Block, size: int) -> None:
        """Allocate ``size`` bytes from the start of free ``block``, splitting it."""
        self._remove_free(block)
        remaining = block.size - size
        if self._splits(remaining, block.small):
            rest = _Block(block.addr + size, remaining, block.small, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            elif self._expandable:
                self._tail[0 if block.small else 1] = rest
            block.next = rest
            block.size = size
            self._insert_free(rest)
        block.free = False
        self._allocated += block.size
        if self._expandable:
            self._map(block, +1)

    def _release(self, block: _Block) -> None:
        """Free an allocated block, merging it with free neighbours."""
        assert not block.free, "double free of a block"
        self._allocated -= block.size
        if self._expandable:
            self._map(block, -1)
        block.free = True
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                self._remove_free(nb)
                block = self._merge(block, nb)
        self._insert_free(block)

    def _merge(self, a: _Block, b: _Block) -> _Block:
        """Merge adjacent free blocks ``a`` and ``b``; returns the survivor (lower address)."""
        lo, hi = (a, b) if a.addr < b.addr else (b, a)
        lo.size += hi.size
        lo.next = hi.next
        if hi.next is not None:
            hi.next.prev = lo
        elif self._expandable:
            self._tail[0 if lo.small else 1] = lo
        return lo

    def _insert_free(self, block: _Block) -> None:
        self._free_sets[0 if block.small else 1].add((block.size, block.addr))
        self._free_at[block.addr] = block
        if not self._expandable and block.prev is None and block.next is None:
            self._releasable += block.size
            self._whole_free[block.addr] = block

    def _remove_free(self, block: _Block) -> None:
        self._free_sets[0 if block.small else 1].remove((block.size, block.addr))
        del self._free_at[block.addr]
        if not self._expandable and block.prev is None and block.next is None:
            self._releasable -= block.size
            del self._whole_free[block.addr]
