"""A run's request records, compact and columnar: when a request ends for good its
``Group`` is held in a list; a batch at a time the held groups' record fields are read
into one list per column (:class:`RecordColumns`, named as
``sim.results.frames.RECORD_FIELDS``) and copied into preallocated numpy arrays, one
per column, and the groups are let go, so a run holds objects only for the requests in
flight and the last batch ended (one ``Group`` costs ~0.7 KB; a record row ~0.1 KB).
Compiled with the engine (``sim/build.py``): one end is two list appends, with no
tuple, no record object and no object-dtype array per request (the status is kept as
its index in :data:`STATUSES`).

The run registers each request as it arrives (:meth:`Records.start`; a single replica's
whole trace at once, kept alive by its feed: :meth:`Records.keep_all`, whose ends only
keep the group, its fields copied a batch at a time) and its replica's outlet calls
:meth:`Records.end` when it ends for good (ok, refused with no retry left, lost, timed
out). Requests still queued or running when the run stops are recorded ``unfinished`` by
:meth:`Records.close`. The frame is the one ``sim.results.frames.request_frame`` makes of
the same groups. Ends are counted here, once: the run stops when every request has
ended (``on_all_ended``, called once, when the last of the ``capacity`` ends)."""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import numpy as np
import pandas as pd
from mypy_extensions import mypyc_attr

from sim.engine.batch import Group, Status
from sim.results.frames import RECORD_FIELDS, records_frame

FLUSH_ROWS = 65_536
"""Ended groups held before their records are copied into the arrays (~45 MB of them)."""
KEPT_COPY_ROWS = 4_096
"""Ended groups' records made into lists and copied at a time: the lists' boxed numbers
are freed and their memory reused chunk after chunk (all at once, a run's worth of
them would be fresh memory, given back after: measured ~7 % slower on the Azure case)."""

STATUSES: tuple[str, ...] = get_args(Status)
"""Every request status, in the order of their codes (the ``status`` column's values)."""
_STATUS_CODE: dict[str, int] = {status: i for i, status in enumerate(STATUSES)}


class RecordColumns:
    """Ended requests' records not yet copied out: one list per column, each named as
    the record field it holds (``RECORD_FIELDS``; ``status`` as codes into
    :data:`STATUSES`). A test holds the names to ``RECORD_FIELDS``."""

    def __init__(self) -> None:
        self.request_id: list[int] = []
        self.arrival_s: list[float] = []
        self.prompt_tokens: list[int] = []
        self.output_tokens: list[int] = []
        self.generated_tokens: list[int] = []
        self.num_seqs: list[int] = []
        self.admit_s: list[float] = []
        self.first_token_s: list[float] = []
        self.finish_s: list[float] = []
        self.status: list[int] = []
        self.preemptions: list[int] = []
        self.retries: list[int] = []
        self.peak_reserved_tokens: list[int] = []
        self.cached_tokens: list[int] = []
        self.prefix_queried_tokens: list[int] = []
        self.prefix_hit_tokens: list[int] = []
        self.preempted_queried_tokens: list[int] = []
        self.preempted_hit_tokens: list[int] = []
        self.replica: list[int] = []
        """The replica it ended on (-1: none); not a record field of ``Group``."""

    def add(self, g: Group, replica_id: int) -> None:
        """Append ``g``'s record (every field of ``RECORD_FIELDS``) and its replica."""
        self.request_id.append(g.request_id)
        self.arrival_s.append(g.arrival_s)
        self.prompt_tokens.append(g.prompt_tokens)
        self.output_tokens.append(g.output_tokens)
        self.generated_tokens.append(g.generated_tokens)
        self.num_seqs.append(g.num_seqs)
        self.admit_s.append(g.admit_s)
        self.first_token_s.append(g.first_token_s)
        self.finish_s.append(g.finish_s)
        self.status.append(_STATUS_CODE[g.status])
        self.preemptions.append(g.preemptions)
        self.retries.append(g.retries)
        self.peak_reserved_tokens.append(g.peak_reserved_tokens)
        self.cached_tokens.append(g.cached_tokens)
        self.prefix_queried_tokens.append(g.prefix_queried_tokens)
        self.prefix_hit_tokens.append(g.prefix_hit_tokens)
        self.preempted_queried_tokens.append(g.preempted_queried_tokens)
        self.preempted_hit_tokens.append(g.preempted_hit_tokens)
        self.replica.append(replica_id)

    def __len__(self) -> int:
        return len(self.request_id)


def _unfinished(groups: list[Group]) -> list[Group]:
    """Those of ``groups`` that have not ended (status ``unfinished``), in order."""
    return [g for g in groups if g.status == "unfinished"]


def _column_dtype(name: str, dtype: str) -> Any:
    """The array a column is kept in: its own dtype; ``status`` codes as int8."""
    return np.int8 if name == "status" else np.dtype(dtype)


@mypyc_attr(allow_interpreted_subclasses=True)
class Records:
    """Ended requests' records (at most ``capacity``), and the live ones by id."""

    def __init__(self, capacity: int, flush_rows: int = FLUSH_ROWS) -> None:
        self.capacity = capacity
        """How many requests the run has: the run is over when this many have ended."""
        self.arrays: dict[str, Any] = {
            name: np.empty(capacity, dtype=_column_dtype(name, dtype))
            for name, dtype in RECORD_FIELDS
        }
        """Each record field's column (``status``: codes into :data:`STATUSES`); the
        first :attr:`count` entries are filled."""
        self.replicas = np.full(capacity, -1, dtype=np.int64)
        self.count = 0
        """Records copied into the arrays."""
        self._pending = RecordColumns()
        self._flush_rows = flush_rows
        """Ended records kept before they are copied (:data:`FLUSH_ROWS`)."""
        self.live: dict[int, Group] = {}
        """Requests arrived and not ended, by request id (insertion: arrival order)."""
        self.ended = 0
        """Requests ended so far."""
        self.last_finish_s = 0.0
        """When the latest end was (a replica's clock, which may run ahead of the
        environment's)."""
        self.on_all_ended: Callable[[], None] | None = None
        """Called once, when the last of the :attr:`capacity` requests has ended."""
        self._kept: list[Group] | None = None
        """The groups of :meth:`keep_all`, in arrival order (None: not kept)."""
        self._ended: list[Group] = []
        """Groups ended and not copied yet, in end order (held until copied)."""
        self._ended_on: list[int] = []
        """The replica each of :attr:`_ended` ended on."""

    def start(self, g: Group) -> None:
        self.live[g.request_id] = g

    def start_all(self, groups: list[Group]) -> None:
        """:meth:`start` each of ``groups``, in order."""
        live = self.live
        for g in groups:
            live[g.request_id] = g

    def keep_all(self, groups: list[Group]) -> None:
        """The run's every request, in arrival order, held alive by the caller for the
        whole run (a single replica's feed): instead of :meth:`start`, and none may be
        started otherwise. An end then keeps only the group and its replica; the
        record fields are copied a batch at a time (:data:`FLUSH_ROWS`) or at
        :meth:`close`, in a tight loop, which gives the same arrays in the same order
        (end order, then the unfinished in arrival order). The groups' record fields
        must not change after they end (they do not: ``Group.end`` is the last write)."""
        assert self._kept is None and not self.live, "keep_all replaces start"
        self._kept = groups

    def end(self, g: Group, replica_id: int) -> None:
        """``g`` ended for good on ``replica_id`` (-1: none) with its status and finish
        time set: counted, and the group held until its record is copied (a batch at a
        time, :meth:`_flush`). Holding the group, not appending its fields, is one
        append per end, and its record is read later in a tight loop: measured 2.3 ->
        ~0.9 us per end on a 16-replica fleet (``bench_fleet --quick``)."""
        if self._kept is None:
            del self.live[g.request_id]
        ended = self._ended
        ended.append(g)
        self._ended_on.append(replica_id)
        if len(ended) >= self._flush_rows:
            self._flush()
        self.ended += 1
        if g.finish_s > self.last_finish_s:
            self.last_finish_s = g.finish_s
        if self.ended == self.capacity and self.on_all_ended is not None:
            self.on_all_ended()

    def _flush(self) -> None:
        """Copy the ended groups' records into the arrays, :data:`KEPT_COPY_ROWS` at a
        time (one slice per column), then any pending ones; the groups are let go."""
        ended, on = self._ended, self._ended_on
        if ended:
            self._ended, self._ended_on = [], []
            for start in range(0, len(ended), KEPT_COPY_ROWS):
                pending = self._pending
                for i in range(start, min(start + KEPT_COPY_ROWS, len(ended))):
                    pending.add(ended[i], on[i])
                self._copy_pending()
        self._copy_pending()

    def _copy_pending(self) -> None:
        """Copy the pending records into the arrays (one slice per column)."""
        pending = self._pending
        n, k = len(pending), self.count
        if not n:
            return
        for name, _ in RECORD_FIELDS:
            self.arrays[name][k : k + n] = getattr(pending, name)
        self.replicas[k : k + n] = pending.replica
        self.count = k + n
        self._pending = RecordColumns()

    def close(self) -> None:
        """Record the requests still queued or running (``unfinished``, replica -1)."""
        self._flush()
        kept = self._kept
        unfinished = list(self.live.values()) if kept is None else _unfinished(kept)
        for g in unfinished:
            self._pending.add(g, -1)
            if len(self._pending) >= self._flush_rows:
                self._flush()
        self._flush()
        assert self.count == self.ended + len(unfinished), "a request started twice"
        self._kept = None
        self.live.clear()
        self.on_all_ended = None

    def frame(self, prefix_cache: bool = False) -> pd.DataFrame:
        """The requests table, sorted by request id (``prefix_cache``: with the prefix
        cache's columns); the records are let go once it is made (the table holds the
        only copy from then on: a run's memory peak is while its outputs are
        assembled)."""
        n = self.count
        columns = {name: array[:n] for name, array in self.arrays.items()}
        columns["status"] = np.array(STATUSES, dtype=object)[columns["status"]]
        out = records_frame(columns, self.replicas[:n], prefix_cache)
        self.arrays = {name: np.empty(0, dtype=a.dtype) for name, a in self.arrays.items()}
        self.replicas = np.empty(0, dtype=np.int64)
        self.count = 0
        return out
