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

Each table is defined once, by name: :class:`SampleTable` and :class:`EventTable` list
their columns in order (their fields, so :data:`SAMPLE_COLUMNS` and :data:`EVENT_COLUMNS`
are read off them), and a hook appends one value to each column by name;
:func:`~sim.results.frames.frame` takes the columns as they are. A new metric is a field
here and the line that appends it.

Why a list per column, not a row object or tuple per row: a keyword call per row (a
``NamedTuple``, a dataclass ``__init__``) costs ~1 µs a row in the pure build (failure
samples: ~100k in a day's run) and a generated ``__init__`` stays interpreted in the
compiled build; a row object costs as little as a tuple to fill, but turning 100k row
objects into columns by name (a generic attribute read per cell) was 1.5-2x slower than
the tuples in the compiled build. Appending to a list per column costs ~0.2 µs a row
more than a tuple in the pure build and little in the compiled one, and the frame needs
no transposition at all. A column a path forgets to append to is caught by ``frame``
(the columns' lengths differ). Column types are exactly the types of the values
appended (as in the tuples before: the same values, boxed the same way in both builds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from policies.allocators.base import KvWaste
from sim.engine.batch import SchedEvent
from sim.engine.offload_record import OffloadSamples
from sim.results.frames import columns_of, frame, start_columns

if TYPE_CHECKING:
    from sim.engine.replica import Replica, RestartMode


@dataclass(slots=True, eq=False)
class SampleTable:
    """The timeseries table as it is recorded: a list per column. One row per sample of
    a replica's pool and batch at ``time_s``."""

    time_s: list[float]
    replica: list[int]
    trigger: list[str]
    """``periodic`` (every ``sample_interval_s``), ``failure`` (an allocation failure) or
    ``final`` (the end of the run)."""
    up: list[bool]
    uptime_s: list[float]
    capacity_tokens: list[int]
    used_tokens: list[int]
    reserved_unused_tokens: list[int]
    shared_tokens: list[int]
    free_tokens: list[int]
    cached_free_tokens: list[int]
    largest_free_extent_tokens: list[int]
    free_extent_count: list[int]
    largest_contiguous_free_block_ratio: list[float]
    """NaN when nothing is free."""
    share_token_states: list[float]
    share_reservation: list[float]
    """NaN on failure samples (the split needs every sequence's reservation)."""
    share_internal_fragmentation: list[float]
    """NaN on failure samples."""
    share_external_fragmentation_free: list[float]
    running_requests: list[int]
    running_seqs: list[int]
    waiting_requests: list[int]
    preemptions_total: list[int]

    # Written out: empty columns (a dataclass field default per column would repeat
    # ``field(default_factory=list)`` on every line).
    def __init__(self) -> None:
        start_columns(self)


@dataclass(slots=True, eq=False)
class EventTable:
    """The event log as it is recorded: a list per column. One row per allocation
    failure, preemption or restart."""

    time_s: list[float]
    replica: list[int]
    kind: list[str]
    """``admission_failure``, ``growth_failure``, ``preemption`` or ``restart``."""
    request_id: list[int]
    """-1 for a restart."""
    need_tokens: list[int]
    free_tokens: list[int]
    largest_free_extent_tokens: list[int]
    free_share: list[float]
    cause: list[str]
    """``fragmentation`` or ``capacity`` for a failure or preemption; empty for a
    restart."""
    uptime_s: list[float]
    detail: list[str]
    """``recompute`` or ``swap`` for a preemption; the mode and downtime of a restart."""

    def __init__(self) -> None:
        start_columns(self)

    def add(
        self,
        *,
        time_s: float,
        replica: int,
        kind: str,
        request_id: int = -1,
        need_tokens: int = 0,
        free_tokens: int = 0,
        largest_free_extent_tokens: int = 0,
        free_share: float = math.nan,
        cause: str = "",
        uptime_s: float = math.nan,
        detail: str = "",
    ) -> None:
        """Append one row, every column by name (the keywords are the columns, in
        order: a test holds them to the fields). The defaults are those of a row about
        no request and no pool (a fleet's ``route-refused``, an alert)."""
        self.time_s.append(time_s)
        self.replica.append(replica)
        self.kind.append(kind)
        self.request_id.append(request_id)
        self.need_tokens.append(need_tokens)
        self.free_tokens.append(free_tokens)
        self.largest_free_extent_tokens.append(largest_free_extent_tokens)
        self.free_share.append(free_share)
        self.cause.append(cause)
        self.uptime_s.append(uptime_s)
        self.detail.append(detail)


@dataclass(slots=True, eq=False)
class KvWasteTable:
    """A KV manager's waste by cause (``policies.allocators.base.KvWaste``), one row per
    sample as shares of capacity: NaN on failure samples and for single-pool policies.
    ``timeseries.parquet`` gains these columns only in runs of a KV manager (every
    other run's table is as before). Padding, window reserve, reserved ahead and partial
    blocks split the internal fragmentation and reservation; the stranded pool is part
    of external fragmentation & free."""

    share_padding: list[float]
    share_window_reserve: list[float]
    share_reserved_ahead: list[float]
    share_partial_blocks: list[float]
    share_stranded_pool: list[float]

    def __init__(self) -> None:
        start_columns(self)

    def add(self, w: KvWaste | None, capacity_tokens: int) -> None:
        if w is None:
            for column in (
                self.share_padding,
                self.share_window_reserve,
                self.share_reserved_ahead,
                self.share_partial_blocks,
                self.share_stranded_pool,
            ):
                column.append(math.nan)
            return
        self.share_padding.append(w.padding / capacity_tokens)
        self.share_window_reserve.append(w.window_reserve / capacity_tokens)
        self.share_reserved_ahead.append(w.reserved_ahead / capacity_tokens)
        self.share_partial_blocks.append(w.partial_blocks / capacity_tokens)
        self.share_stranded_pool.append(w.stranded / capacity_tokens)


SAMPLE_COLUMNS: tuple[str, ...] = columns_of(SampleTable)
KV_WASTE_COLUMNS: tuple[str, ...] = columns_of(KvWasteTable)
EVENT_COLUMNS: tuple[str, ...] = columns_of(EventTable)


@dataclass
class Recorder:
    """Collects the timeseries and the event log as the simulation runs; :meth:`frames`
    turns them into DataFrames. A replica's outlet (``sim.engine.outlet``) hands it the
    replica's events and restarts; the run samples every replica periodically. The
    requests' records are kept apart (``sim.simulate.records.Records``)."""

    samples: SampleTable = field(default_factory=SampleTable)
    events: EventTable = field(default_factory=EventTable)
    kv_waste: KvWasteTable = field(default_factory=KvWasteTable)
    kv_managed: bool = False
    """Whether any sample was of a KV manager (its columns then join the timeseries)."""
    offload: OffloadSamples = field(default_factory=OffloadSamples)
    """Offload tiers' columns (``sim.engine.offload_record``): joined in runs with tiers."""

    # -- what a replica reports -----------------------------------------------------
    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        now_s, uptime_s = replica.now_s, replica.uptime_s  # read once: the driver's clock
        self.events.add(
            time_s=now_s,
            replica=replica.replica_id,
            kind=event.kind,
            request_id=event.request_id,
            need_tokens=event.need_tokens,
            free_tokens=event.free_tokens,
            largest_free_extent_tokens=event.largest_free_extent_tokens,
            free_share=event.free_tokens / replica.capacity_tokens,
            cause=event.cause,
            uptime_s=uptime_s,
            detail=event.detail,
        )
        if event.kind != "preemption":
            # Reported from inside the replica's step: its state is current (no
            # observation, which would re-enter the replica).
            self._sample(replica, "failure", event.pending_tokens, now_s, uptime_s)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        s = replica.allocator.stats()
        self.events.add(
            time_s=replica.now_s,
            replica=replica.replica_id,
            kind="restart",
            free_tokens=s.free_tokens,
            largest_free_extent_tokens=s.largest_free_extent_tokens,
            free_share=s.free_tokens / s.capacity_tokens,
            uptime_s=replica.uptime_s,
            detail=f"{mode} downtime_s={downtime_s:g}",
        )

    # -- sampling ---------------------------------------------------------------------
    def sample(self, replica: Replica, trigger: str = "periodic") -> None:
        """Record the replica's pool and batch as of now (``periodic`` or ``final``),
        brought up to now first (``Replica.observe``)."""
        replica.observe()
        self._sample(replica, trigger, 0, replica.now_s, replica.uptime_s)

    def _sample(
        self, replica: Replica, trigger: str, pending_tokens: int, now_s: float, uptime_s: float
    ) -> None:
        """Record the replica's pool and batch, current at ``now_s`` (its uptime then:
        ``uptime_s``). A failure sample is taken at the failure's event:
        ``pending_tokens`` is the growth the allocator had not been told of then
        (``SchedEvent.pending_tokens``)."""
        sched = replica.sched
        alloc = replica.allocator
        # Reservation vs internal fragmentation needs every sequence's reservation: done
        # on periodic samples (the time-weighted breakdown); failure samples record the
        # pool's signals only and leave the split missing. They do not tell the allocator
        # of deferred growth either (that is O(batch) allocator calls at every failure):
        # deferred growth only turns reserved slots into used ones, so it is added here.
        reservation: float = math.nan
        waste: KvWaste | None = None
        if trigger == "failure":
            s = alloc.stats()
            pending = pending_tokens
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
            waste = alloc.kv_waste()
            if waste is not None:
                self.kv_managed = True
        cap = s.capacity_tokens
        ratio = s.largest_contiguous_free_block_ratio
        t = self.samples
        t.time_s.append(now_s)
        t.replica.append(replica.replica_id)
        t.trigger.append(trigger)
        t.up.append(replica.up)
        t.uptime_s.append(uptime_s)
        t.capacity_tokens.append(cap)
        t.used_tokens.append(s.used_tokens)
        t.reserved_unused_tokens.append(s.reserved_unused_tokens)
        t.shared_tokens.append(s.shared_tokens)
        t.free_tokens.append(s.free_tokens)
        t.cached_free_tokens.append(s.cached_free_tokens)
        t.largest_free_extent_tokens.append(s.largest_free_extent_tokens)
        t.free_extent_count.append(s.free_extent_count)
        t.largest_contiguous_free_block_ratio.append(math.nan if ratio is None else ratio)
        t.share_token_states.append(s.used_tokens / cap)
        t.share_reservation.append(reservation / cap)
        t.share_internal_fragmentation.append((s.reserved_unused_tokens - reservation) / cap)
        t.share_external_fragmentation_free.append(s.free_tokens / cap)
        t.running_requests.append(len(sched.running))
        t.running_seqs.append(sched.running_seqs)
        t.waiting_requests.append(len(sched.waiting))
        t.preemptions_total.append(sched.preemptions_total)
        self.kv_waste.add(waste, cap)
        self.offload.add(sched.offload)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(timeseries, events)."""
        samples = frame(self.samples)
        if self.kv_managed:
            samples = pd.concat([samples, frame(self.kv_waste)], axis=1)
        if self.offload.kinds:
            samples = pd.concat([samples, self.offload.frame()], axis=1)
        return samples, frame(self.events)
