"""What a CUDA caching-allocator snapshot says about fragmentation: pure functions.

``torch.cuda.memory_snapshot()`` is a list of segments (one ``cudaMalloc`` each, or one
expandable segment), each a dict with ``total_size`` and ``blocks``: a list of dicts with
``size`` and ``state`` (``active_allocated``, ``active_pending_free`` or ``inactive``).
An ``inactive`` block is cached free memory; the largest one is the largest request the
allocator can serve without asking the device for a new segment. Nothing here imports
torch, so the analysis is tested on hand-made snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SnapshotSummary:
    """Totals over every segment of a snapshot."""

    segments: int
    reserved_bytes: int
    """Sum of the segments' ``total_size`` (what the device gave the allocator)."""
    allocated_bytes: int
    """Blocks in an ``active_*`` state."""
    inactive_bytes: int
    """Cached free blocks (reserved but not allocated)."""
    inactive_blocks: int
    largest_inactive_bytes: int
    """The largest cached free block (0 when there is none)."""

    @property
    def largest_free_ratio(self) -> float | None:
        """Largest cached free block / all cached free memory (None when none is free)."""
        return self.largest_inactive_bytes / self.inactive_bytes if self.inactive_bytes else None


def summarize_snapshot(segments: Sequence[Mapping[str, Any]]) -> SnapshotSummary:
    """Totals of ``segments`` (``torch.cuda.memory_snapshot()``'s list). A segment
    without ``total_size`` counts its blocks' sizes; unknown block states count as
    allocated (the allocator does not hand them out)."""
    reserved = allocated = inactive = inactive_blocks = largest = 0
    for seg in segments:
        blocks = seg.get("blocks", ())
        reserved += int(seg.get("total_size", sum(int(b["size"]) for b in blocks)))
        for block in blocks:
            size = int(block["size"])
            if block.get("state") == "inactive":
                inactive += size
                inactive_blocks += 1
                largest = max(largest, size)
            else:
                allocated += size
    return SnapshotSummary(len(segments), reserved, allocated, inactive, inactive_blocks, largest)


STAT_KEYS = (
    "reserved_bytes.all.current",
    "allocated_bytes.all.current",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
)


def pick_stats(stats: Mapping[str, Any]) -> dict[str, int]:
    """The few ``torch.cuda.memory_stats()`` counters fragsim reports (0 when absent)."""
    return {key: int(stats.get(key, 0)) for key in STAT_KEYS}
