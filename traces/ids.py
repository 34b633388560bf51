"""Request-id uniqueness across the chunks of a streamed trace, in bounded memory.

:class:`UniqueIds` remembers the ids seen so far as a sorted set of disjoint runs of
consecutive integers (``starts[k]..ends[k]``, inclusive), so the usual trace, whose ids
are 0..n-1 or otherwise increase in steps of one, costs one run however long it is;
ids with gaps cost one run per gap (at worst 16 bytes per request). Each chunk costs a
sort of its own ids (skipped when they already increase) plus a binary search of its
runs against the remembered ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traces.validate import ReadContext


def _runs(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of consecutive integers in a sorted array without repeats."""
    breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
    starts = ordered[np.concatenate(([0], breaks))]
    ends = ordered[np.concatenate((breaks - 1, [len(ordered) - 1]))]
    return starts, ends


@dataclass
class UniqueIds:
    """Ids seen so far in one read (never shared between reads)."""

    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def add(self, ctx: ReadContext, ids: np.ndarray) -> None:
        """Check the ids of one chunk, in file order (index ``i`` is data row
        ``ctx.row_offset + i``), then remember them. Raises the :class:`TraceError` of
        ``ctx`` naming the row of the first repeat: within the chunk, the later of the
        two rows; across chunks, the row in this chunk."""
        if len(ids) == 0:
            return
        ids = np.asarray(ids, dtype=np.int64)
        bad: list[int] = []  # candidate rows: the earliest one is reported
        if bool((ids[1:] > ids[:-1]).all()):
            ordered = ids
        else:
            order = np.argsort(ids, kind="stable")
            ordered = ids[order]
            same = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1
            if len(same):  # stable sort: order[p] is a later row than order[p - 1]
                bad.append(int(order[same].min()))
        starts, ends = _runs(ordered)
        if len(self.starts):
            k = np.searchsorted(self.starts, ends, side="right") - 1
            hit = (k >= 0) & (self.ends[np.maximum(k, 0)] >= starts)
            if hit.any():  # the first row whose id was seen in an earlier chunk
                k_ids = np.searchsorted(self.starts, ids, side="right") - 1
                seen = (k_ids >= 0) & (ids <= self.ends[np.maximum(k_ids, 0)])
                bad.append(int(np.argmax(seen)))
        if bad:
            i = min(bad)
            raise self._error(ctx, i, int(ids[i]))
        self._merge(starts, ends)

    def _merge(self, starts: np.ndarray, ends: np.ndarray) -> None:
        if len(self.starts) and starts[0] > self.ends[-1]:  # the usual case: appended
            if starts[0] - 1 == self.ends[-1]:  # continues the last run (no overflow)
                self.ends[-1] = ends[0]
                starts, ends = starts[1:], ends[1:]
            self.starts = np.concatenate((self.starts, starts))
            self.ends = np.concatenate((self.ends, ends))
            return
        all_starts = np.concatenate((self.starts, starts))
        all_ends = np.concatenate((self.ends, ends))
        order = np.argsort(all_starts, kind="stable")
        all_starts, all_ends = all_starts[order], all_ends[order]
        reach = np.maximum.accumulate(all_ends)
        new = np.concatenate(([True], all_starts[1:] - 1 > reach[:-1]))
        self.starts = all_starts[new]
        self.ends = np.maximum.reduceat(all_ends, np.flatnonzero(new))

    @staticmethod
    def _error(ctx: ReadContext, i: int, rid: int) -> Exception:
        return ctx.error(
            i,
            "duplicate request id",
            field="request_id",
            expected="request ids unique over the whole trace",
            got=rid,
        )
