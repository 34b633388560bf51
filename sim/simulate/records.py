"""A run's request records, compact: a request's ``Group`` is let go soon after it ends;
its record fields are copied into a preallocated numpy record array a batch at a time, so
a run holds objects only for the requests in flight (one ``Group`` alive for the whole
run costs ~0.7 KB; a record row ~0.1 KB).

The run registers each request as it arrives (:meth:`Records.start`; a single replica's
whole trace at once) and its replica's outlet calls :meth:`Records.end` when it ends for
good (ok, refused with no retry left, lost, timed out). Requests still queued or running
when the run stops are recorded ``unfinished`` by :meth:`Records.close`. The frame is the
one ``sim.results.frames.request_frame`` makes of the same groups. Ends are counted here,
once: the run stops when every request has ended (``on_count``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from sim.engine.batch import Group
from sim.results.frames import REQUEST_RECORD, record_of, records_frame

FLUSH_ROWS = 65_536
"""Ended groups kept as objects before their records are copied out in one pass."""


class Records:
    """Ended requests' records (at most ``capacity``), and the live ones by id."""

    def __init__(self, capacity: int) -> None:
        self.rows = np.empty(capacity, dtype=REQUEST_RECORD)
        self.replicas = np.full(capacity, -1, dtype=np.int64)
        self.count = 0
        """Records copied into ``rows``."""
        self._ended: list[Group] = []
        self._ended_replicas: list[int] = []
        self.live: dict[int, Group] = {}
        """Requests arrived and not ended, by request id (insertion: arrival order)."""
        self.ended = 0
        """Requests ended so far."""
        self.last_finish_s = 0.0
        """When the latest end was (a replica's clock, which may run ahead of the
        environment's)."""
        self.on_count: Callable[[int], None] | None = None
        """Called with :attr:`ended` after each end."""

    def start(self, g: Group) -> None:
        self.live[g.request_id] = g

    def end(self, g: Group, replica_id: int) -> None:
        """``g`` ended for good on ``replica_id`` (-1: none) with its status and finish
        time set: counted, and its record kept."""
        del self.live[g.request_id]
        self._ended.append(g)
        self._ended_replicas.append(replica_id)
        if len(self._ended) >= FLUSH_ROWS:
            self._flush()
        self.ended += 1
        if g.finish_s > self.last_finish_s:
            self.last_finish_s = g.finish_s
        if self.on_count is not None:
            self.on_count(self.ended)

    def _flush(self) -> None:
        """Copy the ended groups' records out (one pass), and let the groups go."""
        n, k = len(self._ended), self.count
        self.rows[k : k + n] = np.fromiter(
            map(record_of, self._ended), dtype=REQUEST_RECORD, count=n
        )
        self.replicas[k : k + n] = self._ended_replicas
        self.count = k + n
        self._ended = []
        self._ended_replicas = []

    def close(self) -> None:
        """Record the requests still queued or running (``unfinished``, replica -1)."""
        self._flush()
        live = list(self.live.values())
        self._ended, self._ended_replicas = live, [-1] * len(live)
        self._flush()
        self.live.clear()
        self.on_count = None

    def frame(self, prefix_cache: bool = False) -> pd.DataFrame:
        """The requests table, sorted by request id (``prefix_cache``: with the prefix
        cache's columns); the records are let go once it is made (the table holds the
        only copy from then on: a run's memory peak is while its outputs are
        assembled)."""
        n = self.count
        out = records_frame(self.rows[:n], self.replicas[:n], prefix_cache)
        self.rows = np.empty(0, dtype=REQUEST_RECORD)
        self.replicas = np.empty(0, dtype=np.int64)
        self.count = 0
        return out
