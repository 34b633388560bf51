"""Virtual-memory paged KV cache (vAttention-like): contiguous virtual, paged physical.

Each request gets its own contiguous *virtual* range of the maximum size, so kernels see
an unpaged KV tensor; virtual space is never the constraint. Physical memory is mapped
on demand, one page at a time, as the request grows (vAttention, Prabhu et al., 2024).

Page size in tokens. vAttention keeps, on every GPU, one virtual buffer per layer for K
and one for V (``buffers_per_token`` = 2 x num_layers of them; under tensor parallelism
each GPU's buffers hold its share of the KV heads) and maps a physical page of
``page_bytes`` into each buffer together, so one page *group* holds::

    page_tokens = page_bytes * buffers_per_token // gpu_kv_bytes_per_token

tokens, at least 1 (``gpu_kv_bytes_per_token`` = ``PoolSpec.gpu_kv_bytes_per_token``: one
token's K and V over all layers on one GPU, i.e. the replica's bytes / tensor_parallel).
Every GPU of the replica maps the same pages for the same tokens, so one GPU's page
groups are the replica's. Examples in fp16: Llama-2-7B (32 layers, 524,288 bytes per
token) at tp=1: 2 MiB pages hold 256 tokens, 64 KiB pages 8; Llama-2-13B (40 layers,
819,200 bytes per token): 204 tokens per 2 MiB page at tp=1, 409 at tp=2.
The pool is ``capacity_tokens // page_tokens`` page groups; a remainder smaller than one
group is not part of the pool (``stats().capacity_tokens`` is the whole-page capacity).

Internal fragmentation is the unfilled part of a request's last page group
(``reserved_unused_tokens``). Free pages are interchangeable, so all free memory is one
usable extent and a refusal is always a *capacity* failure. There is no prefix sharing:
``prefix_hashes`` are ignored and ``fork`` copies the parent's tokens into new pages
(counted in ``copied_tokens_total``).

Growth is always pooled (a request maps exactly ceil(held / page_tokens) page groups and
growing maps only new ones), so the engine may take it in bulk: ``reserve_pool_blocks``
maps page groups into a growth reservoir (owned, unused: in ``reserved_unused_tokens``)
and ``extend_reserved`` hands them to a request. ``free`` never touches the reservoir.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.allocators.base import Allocation, AllocStats, PoolSpec, blocks_for
from policies.allocators.pooled import PooledAllocator


def page_tokens_for(page_bytes: int, buffers_per_token: int, gpu_kv_bytes_per_token: int) -> int:
    """Tokens one page group holds (at least 1); see the module docstring.

    ``gpu_kv_bytes_per_token`` is one GPU's share of a token's KV (all layers, K and V),
    ``buffers_per_token`` the K/V buffers it is spread over on that GPU (2 x num_layers).
    """
    return max(1, page_bytes * buffers_per_token // gpu_kv_bytes_per_token)


class VmPagedAllocator(PooledAllocator):
    """Per-request contiguous virtual ranges backed by pages mapped on demand."""

    def __init__(self, spec: PoolSpec, *, page_tokens: int) -> None:
        super().__init__(spec, page_tokens)
        if page_tokens <= 0:
            raise ValueError(f"page_tokens must be > 0, got {page_tokens}")
        self.num_pages = spec.capacity_tokens // page_tokens
        if self.num_pages == 0:
            raise ValueError(
                f"pool of {spec.capacity_tokens} tokens is smaller than one "
                f"{page_tokens}-token page group (are PoolSpec.kv_bytes_per_token, "
                f"{spec.kv_bytes_per_token} bytes, and tensor_parallel, "
                f"{spec.tensor_parallel}, the model's?)"
            )
        self.page_tokens = page_tokens
        self._held: dict[int, int] = {}
        self._pages: dict[int, int] = {}
        self._free_blocks = self.num_pages
        self._used_tokens = 0
        self._copied_tokens = 0

    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        self._check_new(request_id, self._held, tokens)
        need = blocks_for(tokens, self.page_tokens)
        if not self._take_blocks(need):
            return None
        self._held[request_id] = tokens
        self._pages[request_id] = need
        self._used_tokens += tokens
        return Allocation(request_id, need * self.page_tokens)

    def extend(self, request_id: int, tokens: int) -> bool:
        held = self._live(request_id)
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        pages = self._pages[request_id]
        need = blocks_for(held + tokens, self.page_tokens) - pages
        if need > 0:  # the last page group is full: map more
            if not self._take_blocks(need):
                return False
            self._pages[request_id] = pages + need
        self._held[request_id] = held + tokens
        self._used_tokens += tokens
        return True

    def fork(self, parent_id: int, child_id: int) -> bool:
        """Copy the parent's tokens into the child's own pages (no sharing)."""
        self._check_new(child_id, self._held)
        held = self._live(parent_id)
        pages = self._pages[parent_id]
        if not self._take_blocks(pages):
            return False
        self._held[child_id] = held
        self._pages[child_id] = pages
        self._used_tokens += held
        self._copied_tokens += held
        return True

    def free(self, request_id: int) -> None:
        try:
            held = self._held.pop(request_id)
        except KeyError:
            raise KeyError(f"request {request_id} is not live (double free?)") from None
        self._free_blocks += self._pages.pop(request_id)
        self._used_tokens -= held

    def stats(self) -> AllocStats:
        pt = self.page_tokens
        free = self._free_blocks * pt
        capacity = self.num_pages * pt
        return AllocStats(
            capacity_tokens=capacity,
            used_tokens=self._used_tokens,
            reserved_unused_tokens=capacity - free - self._used_tokens,
            shared_tokens=0,
            free_tokens=free,
            largest_free_extent_tokens=free,
            free_extent_count=1 if free else 0,
            copied_tokens_total=self._copied_tokens,
        )

    def copied_tokens_total(self) -> int:
        return self._copied_tokens

    def free_and_largest_tokens(self) -> tuple[int, int]:
        free = self._free_blocks * self.page_tokens
        return free, free

    def held_tokens(self, request_id: int) -> int:
        return self._live(request_id)

    def reserved_tokens(self, request_id: int) -> int:
        self._live(request_id)
        return self._pages[request_id] * self.page_tokens

    def free_extent_sizes(self) -> list[int]:
        free = self._free_blocks * self.page_tokens
        return [free] if free else []

    def blocks_to_extend(self, request_id: int, tokens: int) -> int:
        return self._pages_to_grow(request_id, self._live(request_id), tokens)

    def growth_is_pooled(self, request_id: int) -> bool:
        """Always True for a live request (growth only maps new page groups)."""
        self._live(request_id)
        return True

    def _pooled_need(self, request_id: int, tokens: int) -> int:
        return self._pages_to_grow(request_id, self._live(request_id), tokens)

    def _pages_to_grow(self, request_id: int, held: int, tokens: int) -> int:
        """Page groups a live request holding ``held`` tokens maps to hold ``tokens``
        more (0 while its last group has room)."""
        return max(0, blocks_for(held + tokens, self.page_tokens) - self._pages[request_id])

    def _draw_free_blocks(self, blocks: int) -> None:
        self._free_blocks -= blocks

    def _grow_from_reservoir(self, request_id: int, blocks: int, tokens: int) -> None:
        self._pages[request_id] += blocks
        self._held[request_id] += tokens
        self._used_tokens += tokens

    def _live(self, request_id: int) -> int:
        try:
            return self._held[request_id]
        except KeyError:
            raise KeyError(f"request {request_id} is not live") from None
