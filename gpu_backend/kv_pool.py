"""The device KV cache: a paged pool mirroring the ``paged`` allocator, and the
contiguous baseline on torch's own allocator.

Paged. Per layer, K and V are ``[num_blocks, block_size, kv_heads, head_dim]`` tensors,
``num_blocks`` the allocator's pool (``PagedAllocator.num_blocks``). The allocator does
not give its private blocks an identity (it counts them: see ``policies.allocators.paged``,
"Block identity"), and the ids it gives shared and prefix-cached blocks are a counter, not
a slot in a pool. :class:`BlockMirror` therefore assigns physical blocks from what the
allocator says about each live sequence -- its block count (``reserved_tokens // block``)
and its leading named ids (``named_block_ids``) -- so that:

* a sequence's table has exactly the allocator's block count;
* position ``i < len(named)`` is the physical block of named id ``named[i]``, shared by
  every sequence that names it (forks, prefix hits);
* every other position is a block no one else holds (copy-on-write: a shared block found
  there is replaced by a fresh copy);
* a sequence the allocator no longer knows releases its blocks.

Hence the physical blocks in use equal the allocator's owned blocks less its growth
reservoir (``pool_reserved_blocks``) at every step (checked by the replay). A cached block
whose last holder left is free to the allocator and is released here too: its content is
not kept, so a later prefix hit reads a block of zeros (the replay's weights are random;
times do not depend on the values).

Contiguous. :class:`ContiguousKV` keeps one ``[layers, 2, tokens, kv_heads, head_dim]``
tensor per sequence on torch's allocator, mirroring a contiguous allocator's reserved
tokens (growth by ``torch.cat``: the new tensor exists beside the old one at the peak), so
on CUDA the caching allocator's real fragmentation is measured (``gpu_backend.snapshot``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from policies.allocators.pooled import as_pooled

if TYPE_CHECKING:
    import torch

    from policies.allocators.base import Allocator
    from policies.allocators.paged import PagedAllocator


class BlockMirror:
    """Physical block tables for the sequences of a ``paged`` allocator (module doc).
    Pure Python: no tensors. ``on_copy(src, dst)`` is called for each copy-on-write."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives 0 first
        self._ref = [0] * num_blocks  # sequences holding each physical block
        self._by_name: dict[int, int] = {}  # allocator named id -> physical block
        self._name_of: dict[int, int] = {}  # physical block -> named id
        self.tables: dict[int, list[int]] = {}
        self.copies: list[tuple[int, int]] = []
        """Copy-on-write copies (src, dst) made by the last :meth:`sync`."""

    @property
    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self._free)

    def sync(self, allocator: PagedAllocator, seq_ids: Iterable[int]) -> None:
        """Bring the tables of ``seq_ids`` (live in ``allocator``) and of every sequence
        known before up to the allocator's state; forget sequences it freed."""
        self.copies = []
        for seq in list(self.tables):
            try:
                allocator.reserved_tokens(seq)
            except KeyError:
                self._release(self.tables.pop(seq))
        for seq in seq_ids:
            self.tables.setdefault(seq, [])
        for seq, table in self.tables.items():
            blocks = allocator.reserved_tokens(seq) // self.block_size
            self._sync_one(table, blocks, allocator.named_block_ids(seq))

    def _sync_one(self, table: list[int], blocks: int, named: Sequence[int]) -> None:
        if len(table) > blocks:
            self._release(table[blocks:])
            del table[blocks:]
        for i in range(blocks):
            old = table[i] if i < len(table) else None
            if i < len(named):
                phys = self._by_name.get(named[i])
                if phys is None:
                    if old is not None and self._ref[old] == 1 and old not in self._name_of:
                        phys = old  # this sequence's private block gets a name (a fork)
                    else:
                        phys = self._take()
                        self._ref[phys] = 0
                    self._by_name[named[i]] = phys
                    self._name_of[phys] = named[i]
                if phys != old:
                    self._ref[phys] += 1
            elif old is not None and (self._ref[old] > 1 or old in self._name_of):
                phys = self._take()  # copy-on-write of a shared block
                self._ref[phys] = 1
                self.copies.append((old, phys))
            elif old is None:
                phys = self._take()
                self._ref[phys] = 1
            else:
                phys = old
            if old is not None and phys != old:
                self._release([old])
            if i < len(table):
                table[i] = phys
            else:
                table.append(phys)

    def _take(self) -> int:
        if not self._free:
            raise AssertionError("block mirror: no free physical block (allocator out of sync)")
        return self._free.pop()

    def _release(self, blocks: Iterable[int]) -> None:
        for b in blocks:
            self._ref[b] -= 1
            assert self._ref[b] >= 0, f"negative refcount on physical block {b}"
            if self._ref[b] == 0:
                name = self._name_of.pop(b, None)
                if name is not None:
                    del self._by_name[name]
                self._free.append(b)

    def slots(self, seq: int, start_tokens: int, count: int) -> list[int]:
        """Slot ids (``block * block_size + offset``) of positions ``[start, start+count)``."""
        table, bs = self.tables[seq], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start_tokens, start_tokens + count)]


def allocator_blocks_in_use(allocator: Allocator, block_size: int) -> int:
    """Blocks the allocator's live sequences own: owned blocks less the growth reservoir."""
    s = allocator.stats()
    owned = (s.used_tokens + s.reserved_unused_tokens) // block_size
    pooled = as_pooled(allocator)
    return owned - (pooled.pool_reserved_blocks() if pooled is not None else 0)


class PagedKVPool:
    """Per-layer K/V block tensors addressed through a :class:`BlockMirror`."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        import torch

        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.mirror = BlockMirror(num_blocks, block_size)
        self.device = device

    @property
    def block_size(self) -> int:
        return self.mirror.block_size

    def sync(self, allocator: PagedAllocator, seq_ids: Iterable[int]) -> None:
        """Mirror the allocator (see :meth:`BlockMirror.sync`) and apply its copies."""
        self.mirror.sync(allocator, seq_ids)
        for src, dst in self.mirror.copies:
            for cache in (*self.k, *self.v):
                cache[dst].copy_(cache[src])

    def block_tables(self, seqs: Sequence[int]) -> torch.Tensor:
        """``[len(seqs), max_blocks]`` int32 block tables (padded with 0)."""
        import torch

        tables = [self.mirror.tables[s] for s in seqs]
        width = max((len(t) for t in tables), default=0) or 1
        out = torch.zeros((len(seqs), width), dtype=torch.int32)
        for i, t in enumerate(tables):
            if t:
                out[i, : len(t)] = torch.tensor(t, dtype=torch.int32)
        return out.to(self.device)


class ContiguousKV:
    """One contiguous KV tensor per sequence on torch's allocator (module doc)."""

    def __init__(
        self,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.row = (num_layers, 2)
        self.tail = (kv_heads, head_dim)
        self.dtype = dtype
        self.device = device
        self.tensors: dict[int, torch.Tensor] = {}
        self.failures = 0

    def bytes_per_token(self) -> int:
        import torch

        elem = torch.empty((), dtype=self.dtype).element_size()
        return self.row[0] * 2 * self.tail[0] * self.tail[1] * elem

    def resize(self, seq: int, tokens: int) -> bool:
        """Give ``seq`` room for ``tokens``: a new tensor, grown by ``torch.cat`` from the
        old one when it exists (both live at the peak). False (counted in ``failures``)
        when the device is out of memory; the old tensor is kept then."""
        import torch

        old = self.tensors.get(seq)
        have = 0 if old is None else old.shape[2]
        if tokens == have:
            return True
        try:
            if old is None:
                new = torch.zeros(
                    (*self.row, tokens, *self.tail), dtype=self.dtype, device=self.device
                )
            elif tokens > have:
                pad = torch.zeros(
                    (*self.row, tokens - have, *self.tail), dtype=self.dtype, device=self.device
                )
                new = torch.cat((old, pad), dim=2)
                del pad
            else:
                new = old[:, :, :tokens].clone()
        except torch.OutOfMemoryError:
            self.failures += 1
            return False
        self.tensors[seq] = new
        return True

    def free(self, seq: int) -> None:
        self.tensors.pop(seq, None)

    def sync(self, allocator: Allocator, live: Iterable[int]) -> None:
        """Mirror a contiguous allocator: each live sequence's tensor holds its
        ``reserved_tokens``; sequences it freed are dropped."""
        live = set(live)
        for seq in list(self.tensors):
            if seq not in live:
                self.free(seq)
        for seq in sorted(live):
            self.resize(seq, allocator.reserved_tokens(seq))
