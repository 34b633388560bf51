"""A run's request records, compact and columnar: when a request ends for good its
``Group`` is held in a list; a batch at a time the held groups' record fields
(``sim.results.frames.RECORD_FIELDS``) are copied into preallocated numpy arrays, one
per column (:func:`copy_records`), and the groups are let go, so a run holds objects only for the requests in
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
"""Ended groups' records copied at a time: each column's list of boxed numbers is freed
and its memory reused chunk after chunk (all at once, a run's worth of them would be
fresh memory, given back after: measured ~7 % slower on the Azure case)."""

STATUSES: tuple[str, ...] = get_args(Status)
"""Every request status, in the order of their codes (the ``status`` column's values)."""
_STATUS_CODE: dict[str, int] = {status: i for i, status in enumerate(STATUSES)}


def copy_records(
    arrays: dict[str, Any], replicas: Any, at: int, groups: list[Group], on: list[int]
) -> None:
    """Write ``groups``' records (every field of ``RECORD_FIELDS``; ``status`` as its
    code into :data:`STATUSES`) into rows ``at`` .. ``at + len(groups)`` of ``arrays``,
    and the replica each ended on (``on``) into ``replicas``: a column at a time, each
    one list made in one compiled loop over the groups and converted by numpy in one.
    A test holds the columns written here to ``RECORD_FIELDS``."""
    end = at + len(groups)
    arrays["request_id"][at:end] = [g.request_id for g in groups]
    arrays["arrival_s"][at:end] = [g.arrival_s for g in groups]
    arrays["prompt_tokens"][at:end] = [g.prompt_tokens for g in groups]
    arrays["output_tokens"][at:end] = [g.output_tokens for g in groups]
    arrays["generated_tokens"][at:end] = [g.generated_tokens for g in groups]
    arrays["num_seqs"][at:end] = [g.num_seqs for g in groups]
    arrays["admit_s"][at:end] = [g.admit_s for g in groups]
    arrays["first_token_s"][at:end] = [g.first_token_s for g in groups]
    arrays["finish_s"][at:end] = [g.finish_s for g in groups]
    arrays["status"][at:end] = [_STATUS_CODE[g.status] for g in groups]
    arrays["preemptions"][at:end] = [g.preemptions for g in groups]
    arrays["retries"][at:end] = [g.retries for g in groups]
    arrays["peak_reserved_tokens"][at:end] = [g.peak_reserved_tokens for g in groups]
    arrays["cached_tokens"][at:end] = [g.cached_tokens for g in groups]
    arrays["prefix_queried_tokens"][at:end] = [g.prefix_queried_tokens for g in groups]
    arrays["prefix_hit_tokens"][at:end] = [g.prefix_hit_tokens for g in groups]
    arrays["preempted_queried_tokens"][at:end] = [g.preempted_queried_tokens for g in groups]
    arrays["preempted_hit_tokens"][at:end] = [g.preempted_hit_tokens for g in groups]
    replicas[at:end] = on


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
        time (:func:`copy_records`), and let the groups go."""
        ended, on = self._ended, self._ended_on
        self._ended, self._ended_on = [], []
        self._copy(ended, on)

    def _copy(self, groups: list[Group], on: list[int]) -> None:
        for start in range(0, len(groups), KEPT_COPY_ROWS):
            stop = min(start + KEPT_COPY_ROWS, len(groups))
            copy_records(self.arrays, self.replicas, self.count, groups[start:stop], on[start:stop])
            self.count += stop - start

    def close(self) -> None:
        """Record the requests still queued or running (``unfinished``, replica -1)."""
        self._flush()
        kept = self._kept
        unfinished = list(self.live.values()) if kept is None else _unfinished(kept)
        self._copy(unfinished, [-1] * len(unfinished))
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
