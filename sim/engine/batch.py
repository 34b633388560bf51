"""What the scheduler works on: its configuration, a request's *group* of sequences with
its record, one step's inputs to the latency model, and the events it reports.

A request is a group of ``n`` sequences (parallel sampling / beam width) that prefill
together, share the prompt through ``Allocator.fork`` and decode in lockstep. While a
group decodes on the decode ticks (``sim.engine.ticks``) its ``held_tokens`` and
``generated_tokens`` fields are stale: the scheduler materialises them before anything
outside it reads them (``Scheduler.sync_allocator``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from policies.allocators.base import FailureCause
from sim.engine.offload import OffloadSpec

Preemption = Literal["recompute", "swap", "fail"]
OnAdmissionFailure = Literal["queue", "reject"]
Status = Literal[
    "ok",
    "rejected-fragmentation",
    "rejected-capacity",
    "rejected-too-long",
    "failed-fragmentation",
    "failed-capacity",
    "timed-out",
    "failed-lost",
    "unfinished",
]


@dataclass(frozen=True, slots=True)
class ClientRetry:
    """How a client retries a request that was refused or lost: up to ``attempts`` more
    tries, try ``n`` (1, 2, ...) sent ``backoff_s * 2**(n - 1)`` seconds after the failure
    it answers (exponential backoff, doubling). The one definition the engine (a single
    replica's clients), the fleet (its clients) and the run-cost check use."""

    attempts: int = 0
    backoff_s: float = 1.0

    def delay_s(self, attempt: int) -> float:
        """Seconds between a failure and try ``attempt`` (1-based) that answers it."""
        return self.backoff_s * 2 ** (attempt - 1)

    def span_s(self) -> float:
        """Seconds from a first failure to the last try, if every try fails at once:
        ``backoff_s * (2**attempts - 1)``."""
        return self.backoff_s * (2**self.attempts - 1)

    def next_try(self, g: Group) -> float | None:
        """``g`` failed: if its client tries again, the attempt is counted
        (:meth:`Group.new_attempt`) and the delay before it returned; None when no try
        is left (the request ends with the failure's status)."""
        if g.retries >= self.attempts:
            return None
        g.new_attempt()
        return self.delay_s(g.retries)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Past-the-edge scheduler settings (validated in ``sim.scenario``)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = False
    preemption: Preemption = "recompute"
    on_admission_failure: OnAdmissionFailure = "queue"
    head_of_line: bool = True
    retry: ClientRetry = ClientRetry()
    """Client retries of a refused request (a fleet's clients use the same)."""
    queue_timeout_s: float | None = None
    max_seq_tokens: int = 4096
    swap_s_per_token: float = 0.0
    """Host<->device transfer time per KV token (swap preemption)."""
    copy_s_per_token: float = 0.0
    """Device memcpy time per KV token (reallocation copies, compaction moves)."""
    allocate_per_chunk: bool = False
    """vLLM v1's chunked prefill: admission allocates the prefix hits and the first
    chunk; each later chunk allocates as it runs, running groups scheduled in admission
    order (a prefill chunk may leave later decoders without budget for the step). False:
    admission allocates the whole prompt. Single-sequence groups only (a group of
    several sequences allocates its whole prompt)."""
    reserve_full_prompt: bool = True
    """vLLM's ``scheduler_reserve_full_isl`` (with ``allocate_per_chunk``): admit only
    when the whole prompt's blocks fit now, not just the first chunk's."""
    watermark_tokens: int = 0
    """vLLM's watermark (``int(watermark * num_gpu_blocks)`` blocks): free memory a
    waiting request must leave when admitted while anything runs."""
    long_prefill_token_threshold: int = 0
    """vLLM's cap on one request's prefill chunk per step (0: none), applied while more
    than one request is running or waiting at the step's start."""
    long_prefill_adaptive: bool = False
    """vLLM's ``long_prefill_token_threshold_adaptive``: the cap is at least
    ``max_num_batched_tokens`` over the requests running or waiting at the step's start
    (a fair share of the budget)."""
    offload: OffloadSpec | None = None
    """KV offload tiers below the GPU pool (``sim.engine.offload``); None: none."""


@dataclass(slots=True, eq=False)
class Group:
    """One request on one replica: its sequences' shared progress and its record."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    num_seqs: int = 1
    prefix_hashes: Sequence[int] = ()
    target_tokens: int = 0
    """Tokens the engine generates per sequence: ``output_tokens`` as the trace says, at
    least 1 (the step that finishes the prefill emits the first token, as vLLM's
    ``max_tokens >= 1``) and at most ``max_seq_tokens - prompt_tokens`` (generation stops
    at the maximum sequence length). Set by ``Scheduler.submit``; ``output_tokens``
    stays as written."""
    seq_ids: list[int] = field(default_factory=list)
    held_tokens: int = 0
    """Slots each sequence holds (equal across the group's sequences)."""
    synced_tokens: int = 0
    """Held tokens the allocator has been told of (single-sequence groups defer growth
    inside their headroom; see ``Scheduler.sync_allocator``)."""
    limit_tokens: int = 0
    """Held tokens up to which growth needs no allocator decision."""
    prefill_left_tokens: int = 0
    generated_tokens: int = 0
    swapped: bool = False
    in_batch: bool = False
    enqueued_s: float = 0.0
    blocked: tuple[int, int] | None = None
    """(free, largest free extent) when admission last failed; retried once either grows."""
    # -- the record ---------------------------------------------------------------
    admit_s: float = math.nan
    first_token_s: float = math.nan
    finish_s: float = math.nan
    status: Status = "unfinished"
    preemptions: int = 0
    retries: int = 0
    peak_reserved_tokens: int = 0
    cached_tokens: int = 0
    # vLLM's prefix-cache accounting (``record_prefix_cache_stats``, once per admission;
    # ``sim.engine.admission``): a first admission (of each client attempt: a retry is a
    # new request to the server) counts as a new request's, a re-admission after a
    # preemption apart, as ``PrefixCacheStats`` counts them.
    prefix_queried_tokens: int = 0
    """Tokens looked up at first admissions (the prompt: vLLM's ``queries``)."""
    prefix_hit_tokens: int = 0
    """Hit tokens at first admissions (vLLM's ``hits``; with no retry, the request's
    ``num_cached_tokens``)."""
    preempted_queried_tokens: int = 0
    """Tokens looked up at re-admissions after a preemption (the prompt and the tokens
    generated before it: vLLM's ``preempted_queries``)."""
    preempted_hit_tokens: int = 0
    """Hit tokens at those re-admissions (vLLM's ``preempted_hits``)."""
    allocates_per_chunk: bool = False
    """Placed for chunked prefill as vLLM v1 places it (``SchedulerConfig.
    allocate_per_chunk``): ``held_tokens`` counts the prompt computed so far plus the
    step's chunk; each chunk extends the allocation as it is scheduled."""
    # -- decode-tick bookkeeping (sim.ticks) ---------------------------------------------
    order: int = 0
    """Admission order (the batch's position; re-admission takes a new one)."""
    tick_id: int = 0
    """This group's registration with the decode ticks (0: not on them; its fields are
    explicit). Heap entries carry it, so entries of a group that left go stale."""
    pooled: bool = False
    """On the ticks with pooled growth (blocks drawn in bulk; ``sim.engine.ticks``)."""
    held_base: int = 0
    """On the ticks: ``held_tokens == held_base + ticks.tick``."""
    generated_base: int = 0
    """On the ticks: ``generated_tokens == generated_base + ticks.done``."""
    # -- retention (sim.scenario.retention) ----------------------------------------------
    retain_s: float = 0.0
    """Seconds its sequences stay allocated after an ``ok`` finish (0: freed then; inf:
    until the process restarts)."""
    retain_until_s: float = math.inf
    """Absolute time by which retained sequences are freed at the latest."""

    def __init__(
        self,
        request_id: int,
        arrival_s: float,
        prompt_tokens: int,
        output_tokens: int,
        num_seqs: int = 1,
        prefix_hashes: Sequence[int] = (),
    ) -> None:
        # Written out (the dataclass keeps it): a generated __init__ is interpreted even
        # in the compiled build, and one Group is made per request.
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.num_seqs = num_seqs
        self.prefix_hashes = prefix_hashes
        self.target_tokens = output_tokens
        self.seq_ids = []
        self.held_tokens = 0
        self.synced_tokens = 0
        self.limit_tokens = 0
        self.prefill_left_tokens = 0
        self.generated_tokens = 0
        self.swapped = False
        self.in_batch = False
        self.enqueued_s = 0.0
        self.blocked = None
        self.admit_s = math.nan
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.status = "unfinished"
        self.preemptions = 0
        self.retries = 0
        self.peak_reserved_tokens = 0
        self.cached_tokens = 0
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0
        self.preempted_queried_tokens = 0
        self.preempted_hit_tokens = 0
        self.allocates_per_chunk = False
        self.order = 0
        self.tick_id = 0
        self.pooled = False
        self.held_base = 0
        self.generated_base = 0
        self.retain_s = 0.0
        self.retain_until_s = math.inf

    def end(self, status: Status, now_s: float) -> None:
        """The request ends for good at ``now_s`` with ``status`` (its record is final)."""
        self.status = status
        self.finish_s = now_s

    def new_attempt(self) -> None:
        """The client tries again (a retry): counted, and nothing of the failed attempt
        is kept (no memory, no tokens, no admission)."""
        self.retries += 1
        self.seq_ids = []
        self.held_tokens = 0
        self.generated_tokens = 0
        self.prefill_left_tokens = 0
        self.admit_s = self.first_token_s = math.nan

    @property
    def final_tokens(self) -> int:
        """Slots each sequence holds when it finishes."""
        return self.prompt_tokens + self.target_tokens - 1


def remove_group(groups: list[Group], g: Group) -> None:
    """``groups.remove(g)`` by identity (a Group equals only itself): the scan compares
    pointers and touches no other group (``list.remove`` calls an equality test on each
    one it passes, reading its type: a cache miss each in a fleet's large working set).
    Raises ValueError when ``g`` is not in ``groups``, as ``list.remove`` does."""
    for i in range(len(groups)):
        if groups[i] is g:
            del groups[i]
            return
    raise ValueError("remove_group(groups, g): g is not in groups")


def admission_order(g: Group) -> int:
    """Sort key: the batch's order (``Group.order``)."""
    return g.order


def groups_from_columns(
    ids: list[int],
    arrivals_s: list[float],
    prompt_tokens: list[int],
    output_tokens: list[int],
    num_seqs: list[int],
    prefix_hashes: list[tuple[int, ...]],
    retain_s: list[float] | None = None,
    retain_until_s: list[float] | None = None,
) -> list[Group]:
    """One Group per row of equal-length columns (a trace's, in arrival order);
    ``retain_s`` / ``retain_until_s``: each request's retention (default: none)."""
    groups = [
        Group(ids[i], arrivals_s[i], prompt_tokens[i], output_tokens[i], num_seqs[i], h)
        for i, h in enumerate(prefix_hashes)
    ]
    if retain_s is not None:
        for g, r in zip(groups, retain_s, strict=True):
            g.retain_s = r
    if retain_until_s is not None:
        for g, u in zip(groups, retain_until_s, strict=True):
            g.retain_until_s = u
    return groups


@dataclass(slots=True)
class Step:
    """What one iteration runs (inputs to the latency model) and who is in it."""

    prefill_tokens: int = 0
    decode_seqs: int = 0
    kv_tokens: int = 0
    stall_s: float = 0.0
    preempted: bool = False
    prefill_chunks: list[tuple[Group, int]] = field(default_factory=list)
    stepped: list[Group] = field(default_factory=list)
    """Decoding groups stepped one by one in this step: those not on the decode ticks
    (the ticking ones decode too; ``Scheduler.step_decoding`` lists every one)."""

    def __init__(self) -> None:  # written out: see Group.__init__
        self.prefill_tokens = 0
        self.decode_seqs = 0
        self.kv_tokens = 0
        self.stall_s = 0.0
        self.preempted = False
        self.prefill_chunks = []
        self.stepped = []


EventKind = Literal["admission_failure", "growth_failure", "preemption"]


@dataclass(slots=True)
class SchedEvent:
    """An allocation failure or a preemption, with the pool state at that moment."""

    kind: EventKind
    request_id: int
    need_tokens: int
    free_tokens: int
    largest_free_extent_tokens: int
    cause: FailureCause
    detail: str = ""
    """For a preemption: ``recompute``, ``swap`` or (under ``preemption: fail``) nothing."""
    pending_tokens: int = 0
    """For a failure: growth the allocator has not been told of at that moment (deferred
    inside headroom, taken on the decode ticks, or taken earlier in the step being
    grown): the pool's used tokens are this much higher than ``stats()`` says."""

    # Written out (the dataclass keeps it): a generated __init__ stays interpreted in the
    # compiled build. Not frozen for the same reason (a frozen one must set fields through
    # object.__setattr__); treat instances as immutable snapshots.
    def __init__(
        self,
        kind: EventKind,
        request_id: int,
        need_tokens: int,
        free_tokens: int,
        largest_free_extent_tokens: int,
        cause: FailureCause,
        detail: str = "",
        pending_tokens: int = 0,
    ) -> None:
        self.kind = kind
        self.request_id = request_id
        self.need_tokens = need_tokens
        self.free_tokens = free_tokens
        self.largest_free_extent_tokens = largest_free_extent_tokens
        self.cause = cause
        self.detail = detail
        self.pending_tokens = pending_tokens
