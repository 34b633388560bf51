"""A fleet's request records, compact: each request's record fields are copied into a
preallocated numpy record array when it ends and its ``Group`` is let go, so a run holds
objects only for the requests in flight (one ``Group`` per request alive for the whole
run costs ~0.7 KB; a record row costs ~0.1 KB).

The fleet makes a request's ``Group`` at its arrival (``sim.runner.GroupColumns``) and
calls :meth:`Records.end` when the request ends for good (ok, refused with no retry
left, lost, timed out); requests still queued or running when the run stops are
recorded ``unfinished`` by :meth:`Records.close`. The frame is the one
``sim.results.frames.request_frame`` makes of the same groups."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.engine.batch import Group
from sim.engine.recorder import Recorder
from sim.results.frames import REQUEST_RECORD, record_of, records_frame


class Records:
    """Ended requests' records (at most ``capacity``), and the live ones by id."""

    def __init__(self, capacity: int, recorder: Recorder) -> None:
        self.rows = np.empty(capacity, dtype=REQUEST_RECORD)
        self.replicas = np.full(capacity, -1, dtype=np.int64)
        self.count = 0
        self.live: dict[int, Group] = {}
        """Requests arrived and not ended, by request id (insertion: arrival order)."""
        self._recorder = recorder

    def start(self, g: Group) -> None:
        self.live[g.request_id] = g

    def end(self, g: Group, replica_id: int) -> None:
        """``g`` ended (its status and finish time set): recorded, let go, counted with
        the recorder (which ends the run when every request has ended)."""
        k = self.count
        self.rows[k] = record_of(g)
        self.replicas[k] = replica_id
        self.count = k + 1
        del self.live[g.request_id]
        rec = self._recorder
        rec.done_count += 1
        if g.finish_s > rec.last_finish_s:
            rec.last_finish_s = g.finish_s
        if rec.on_count is not None:
            rec.on_count(rec.done_count)

    def close(self) -> None:
        """Record the requests still queued or running (``unfinished``, replica -1)."""
        for g in list(self.live.values()):
            k = self.count
            self.rows[k] = record_of(g)
            self.count = k + 1
        self.live.clear()

    def frame(self) -> pd.DataFrame:
        """The requests table, sorted by request id."""
        n = self.count
        return records_frame(self.rows[:n], self.replicas[:n])
