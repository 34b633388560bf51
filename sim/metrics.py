"""What a run records: periodic and failure-time samples of every replica's pool, the
allocation-failure / preemption / restart event log, and finished requests.

Definitions (DESIGN.md, the seeds):

* ``largest_contiguous_free_block_ratio`` = largest usable free extent / total free;
  missing (NaN) when nothing is free, never alerted on.
* Waste breakdown as shares of KV capacity: *token states* (slots holding tokens),
  *reservation* (reserved slots the request's own future tokens will fill), *internal
  fragmentation* (reserved slots it will never fill), *external fragmentation & free*
  (everything not reserved). The four add up to 1.
* A failure is *fragmentation* when total free >= the need but no usable extent is
  large enough, *capacity* otherwise (the allocator classifies it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sim.scheduler import Group, SchedEvent

if TYPE_CHECKING:
    from sim.replica import Replica, RestartMode

SAMPLE_COLUMNS = (
    "time_s",
    "replica",
    "trigger",
    "up",
    "uptime_s",
    "capacity_tokens",
    "used_tokens",
    "reserved_unused_tokens",
    "shared_tokens",
    "free_tokens",
    "cached_free_tokens",
    "largest_free_extent_tokens",
    "free_extent_count",
    "largest_contiguous_free_block_ratio",
    "share_token_states",
    "share_reservation",
    "share_internal_fragmentation",
    "share_external_fragmentation_free",
    "running_requests",
    "running_seqs",
    "waiting_requests",
    "preemptions_total",
)
EVENT_COLUMNS = (
    "time_s",
    "replica",
    "kind",
    "request_id",
    "need_tokens",
    "free_tokens",
    "largest_free_extent_tokens",
    "free_share",
    "cause",
    "uptime_s",
    "detail",
)
REQUEST_COLUMNS = (
    "request_id",
    "replica",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "num_seqs",
    "admit_s",
    "first_token_s",
    "finish_s",
    "status",
    "preemptions",
    "retries",
    "peak_reserved_tokens",
    "cached_tokens",
)


@dataclass
class Recorder:
    """Collects rows as the simulation runs; :meth:`frames` turns them into DataFrames.

    Implements the replica hooks (``on_event``, ``on_done``, ``on_restart``)."""

    samples: list[tuple[object, ...]] = field(default_factory=list)
    events: list[tuple[object, ...]] = field(default_factory=list)
    done: list[Group] = field(default_factory=list)
    """Ended requests, in the order they ended (unfinished ones appended at the end)."""
    done_replicas: list[int] = field(default_factory=list)
    """The replica each of ``done`` ended on (-1: unfinished)."""
    done_count: int = 0
    on_count: Callable[[int], None] | None = None
    """Called with the number of ended requests after each one ends."""
    last_finish_s: float = 0.0
    """When the most recently ended request ended (a replica's clock, which may be
    ahead of ``env.now``)."""

    # -- replica hooks --------------------------------------------------------------
    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        capacity = replica.allocator.stats().capacity_tokens
        self.events.append(
            (
                replica.now_s,
                replica.replica_id,
                event.kind,
                event.request_id,
                event.need_tokens,
                event.free_tokens,
                event.largest_free_extent_tokens,
                event.free_tokens / capacity,
                event.cause,
                replica.uptime_s,
                event.detail,
            )
        )
        if event.kind != "preemption":
            self.sample(replica, trigger="failure")

    def on_done(self, replica: Replica, group: Group) -> None:
        self.done_count += 1
        # Fast mode may report a request refused at its arrival after a later finish.
        self.last_finish_s = max(self.last_finish_s, group.finish_s)
        self.done.append(group)
        self.done_replicas.append(replica.replica_id)
        if self.on_count is not None:
            self.on_count(self.done_count)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        s = replica.allocator.stats()
        self.events.append(
            (
                replica.now_s,
                replica.replica_id,
                "restart",
                -1,
                0,
                s.free_tokens,
                s.largest_free_extent_tokens,
                s.free_tokens / s.capacity_tokens,
                "",
                replica.uptime_s,
                f"{mode} downtime_s={downtime_s:g}",
            )
        )

    # -- sampling ---------------------------------------------------------------------
    def sample(self, replica: Replica, trigger: str = "periodic") -> None:
        """Record the replica's pool and batch as of now."""
        replica.observe()
        sched = replica.sched
        alloc = replica.allocator
        # Reservation vs internal fragmentation needs every sequence's reservation: done
        # on periodic samples (the time-weighted breakdown); failure samples record the
        # pool's signals only and leave the split missing. They do not tell the allocator
        # of deferred growth either (that is O(batch) allocator calls at every failure):
        # deferred growth only turns reserved slots into used ones, so it is added here.
        reservation: float = math.nan
        if trigger == "failure":
            s = alloc.stats()
            pending = sched.unsynced_tokens()
            if pending:
                s = s.with_growth_applied(pending)
        else:
            sched.sync_allocator()
            s = alloc.stats()
            reserved_to_fill = 0
            reserved_of = alloc.reserved_tokens
            for g in sched.running:
                final, held = g.final_tokens, g.held_tokens
                for sid in g.seq_ids:
                    reserved_to_fill += max(0, min(reserved_of(sid), final) - held)
            reservation = float(min(reserved_to_fill, s.reserved_unused_tokens))
        cap = s.capacity_tokens
        ratio = s.largest_contiguous_free_block_ratio
        self.samples.append(
            (
                replica.now_s,
                replica.replica_id,
                trigger,
                replica.up,
                replica.uptime_s,
                cap,
                s.used_tokens,
                s.reserved_unused_tokens,
                s.shared_tokens,
                s.free_tokens,
                s.cached_free_tokens,
                s.largest_free_extent_tokens,
                s.free_extent_count,
                math.nan if ratio is None else ratio,
                s.used_tokens / cap,
                reservation / cap,
                (s.reserved_unused_tokens - reservation) / cap,
                s.free_tokens / cap,
                len(sched.running),
                sched.running_seqs,
                len(sched.waiting),
                sched.preemptions_total,
            )
        )

    def finish(self, groups: list[Group]) -> None:
        """Close the run: requests still queued or running are recorded ``unfinished``."""
        for g in groups:
            if g.status == "unfinished":
                self.done.append(g)
                self.done_replicas.append(-1)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(requests, timeseries, events), requests sorted by request id."""
        requests = request_frame(self.done, self.done_replicas)
        return requests, frame(self.samples, SAMPLE_COLUMNS), frame(self.events, EVENT_COLUMNS)


def frame(rows: list[tuple[object, ...]], columns: tuple[str, ...]) -> pd.DataFrame:
    """``pd.DataFrame.from_records(rows, columns=columns)``, the same frame, faster.

    A column of only bools, or only ints and floats, is converted by numpy in one C loop
    (bool, int64 or float64: the dtypes pandas infers too); any other column (strings,
    None, mixtures) goes through pandas' own inference, as ``from_records`` would."""
    if not rows:
        return pd.DataFrame.from_records(rows, columns=list(columns))
    data: dict[str, Any] = {}
    for k, name in enumerate(columns):
        values = [row[k] for row in rows]
        array = _numeric(values)
        data[name] = _inferred(name, values) if array is None else array
    return pd.DataFrame(data, columns=list(columns))


def _numeric(values: list[object]) -> Any:
    """``values`` as a 1-D numpy array when they are all bools, or all ints and floats
    (the dtypes ``from_records`` infers for those); None otherwise."""
    types = set(map(type, values))
    if not (types == {bool} or (types and types <= {int, float})):
        return None
    try:
        array = np.array(values)
    except (ValueError, OverflowError):
        return None
    return array if array.ndim == 1 and array.dtype.kind in "bif" else None


def request_frame(groups: list[Group], replicas: list[int]) -> pd.DataFrame:
    """The requests table, one row per group sorted by request id (stable), with
    :data:`REQUEST_COLUMNS`: the frame ``frame`` would make of the groups' record fields,
    sorted (ended groups are not touched again, so reading them at the end equals
    reading them when they ended). One pass over the groups, then numpy."""
    if not groups:
        return frame([], REQUEST_COLUMNS)
    ids: list[int] = []
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    seqs: list[int] = []
    admit: list[float] = []
    first: list[float] = []
    finish: list[float] = []
    status: list[object] = []
    preemptions: list[int] = []
    retries: list[int] = []
    peak: list[int] = []
    cached: list[int] = []
    for g in groups:
        ids.append(g.request_id)
        arrival.append(g.arrival_s)
        prompt.append(g.prompt_tokens)
        output.append(g.output_tokens)
        seqs.append(g.num_seqs)
        admit.append(g.admit_s)
        first.append(g.first_token_s)
        finish.append(g.finish_s)
        status.append(g.status)
        preemptions.append(g.preemptions)
        retries.append(g.retries)
        peak.append(g.peak_reserved_tokens)
        cached.append(g.cached_tokens)
    id_array = np.array(ids, dtype=np.int64)
    order = np.argsort(id_array, kind="stable")

    def ints(values: list[int]) -> Any:
        return np.array(values, dtype=np.int64)[order]

    def floats(values: list[float]) -> Any:
        return np.array(values, dtype=np.float64)[order]

    # Statuses are strings: the dtype pandas infers for them, read off the distinct ones.
    status_dtype = _inferred("status", sorted(set(status), key=str)).dtype
    data: dict[str, Any] = {
        "request_id": id_array[order],
        "replica": ints(replicas),
        "arrival_s": floats(arrival),
        "prompt_tokens": ints(prompt),
        "output_tokens": ints(output),
        "num_seqs": ints(seqs),
        "admit_s": floats(admit),
        "first_token_s": floats(first),
        "finish_s": floats(finish),
        "status": pd.Series(np.array(status, dtype=object)[order], dtype=status_dtype),
        "preemptions": ints(preemptions),
        "retries": ints(retries),
        "peak_reserved_tokens": ints(peak),
        "cached_tokens": ints(cached),
    }
    return pd.DataFrame(data, columns=list(REQUEST_COLUMNS))


def _inferred(name: str, values: list[object]) -> pd.Series:
    """A column with the dtype ``from_records`` infers for ``values``."""
    return pd.DataFrame.from_records([(v,) for v in values], columns=[name])[name]
