"""Diagnoses of an allocator's state, for tests and analysis (not the engine's hot path).

Plain functions over the :class:`~policies.allocators.base.Allocator` contract: they read
only ``stats()`` and ``free_extent_sizes()``, so every policy answers them alike."""

# fragsim: pure: diagnostics for tests and analysis, not on the hot path
from __future__ import annotations

from collections.abc import Sequence

from policies.allocators.base import Allocator, FailureCause, classify


def classify_failure(alloc: Allocator, tokens: int) -> FailureCause:
    """Would a ``tokens``-slot need fail for lack of memory (``"capacity"``) or for
    fragmentation, in ``alloc``'s present state?"""
    s = alloc.stats()
    return classify(tokens, s.free_tokens, s.largest_free_extent_tokens)


def free_extent_histogram(alloc: Allocator, edges_tokens: Sequence[int]) -> list[int]:
    """Counts of ``alloc``'s free extents per bin ``[edges[i], edges[i+1])``, the last
    bin open; extents smaller than ``edges_tokens[0]`` are not counted."""
    counts = [0] * len(edges_tokens)
    for size in alloc.free_extent_sizes():
        for i in range(len(edges_tokens) - 1, -1, -1):
            if size >= edges_tokens[i]:
                counts[i] += 1
                break
    return counts
