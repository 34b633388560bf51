"""Replay a trace on the device through the simulator's own scheduler and allocator.

The engine's :class:`~sim.engine.scheduler.Scheduler` over the scenario's ``paged``
allocator plans every step (``begin_step``); the replay runs the planned step on the
device -- the prompt chunks it prefills and the sequences it decodes, through their block
tables (:class:`gpu_backend.kv_pool.PagedKVPool` mirroring the allocator) -- measures it,
and lets the virtual clock advance by the measured time (scaled to full depth) plus the
step's stall, so arrivals are admitted exactly as the simulator would admit them with
that step time. :func:`drive` is the loop, shared with the validation's lock-step check
(the same loop with recorded step times instead of a device).

Token positions, per the scheduler's accounting: a prefill chunk ``c`` of group ``g``
covers positions ``[held - prefill_left, held - prefill_left + c)`` of its first
sequence (forks share the prompt blocks); a decoding sequence feeds the token at
position ``held - 1`` (``begin_step`` grew it by that slot) and attends to ``held``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import pandas as pd
import torch

from gpu_backend.device import time_s
from gpu_backend.kv_pool import PagedKVPool, allocator_blocks_in_use
from gpu_backend.model import DecoderStack, StepBatch
from sim.engine.scheduler import Scheduler
from sim.simulate.columns import make_groups

if TYPE_CHECKING:
    from policies.allocators.base import Allocator
    from policies.allocators.paged import PagedAllocator
    from sim.engine.batch import Group, SchedulerConfig, Step
    from sim.simulate.parts import Parts


@dataclass(frozen=True)
class StepRecord:
    """One replayed step: its shape, its measured time and the pool while it ran."""

    index: int
    start_s: float
    prefill_tokens: int
    prefill_seqs: int
    prefill_sq_tokens: int
    """Sum over the step's prefill chunks of chunk tokens squared."""
    decode_seqs: int
    kv_tokens: int
    measured_s: float
    """Device time scaled to full depth (0 for a lock-step drive)."""
    stall_s: float
    blocks_in_use: int
    """Blocks the live sequences hold while the step runs."""
    warmup: bool


GROUP_FIELDS = (
    "request_id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "generated_tokens",
    "num_seqs",
    "admit_s",
    "first_token_s",
    "finish_s",
    "status",
)


def group_frame(groups: Sequence[Group]) -> pd.DataFrame:
    """Per-request records (the simulator's request-table columns of the same names)."""
    rows = [{name: getattr(g, name) for name in GROUP_FIELDS} for g in groups]
    return pd.DataFrame(rows, columns=list(GROUP_FIELDS))


@dataclass
class ReplayResult:
    steps: list[StepRecord]
    requests: pd.DataFrame
    kernels: str
    layers_run: int

    def steps_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(s) for s in self.steps])


Execute = Callable[["Step", "list[Group]", int], "tuple[float, int]"]
"""``execute(step, decoding, index) -> (duration_s, blocks_in_use)``."""


def drive(
    config: SchedulerConfig,
    allocator: Allocator,
    groups: Sequence[Group],
    execute: Execute,
    max_steps: int | None = None,
) -> list[tuple[float, Step, list[Group], float, int]]:
    """Run ``groups`` (arrival order) through a scheduler over ``allocator``, as the
    replica's exact mode does: queue arrivals and client
    retries by the clock, ``begin_step``, ``sync_allocator``, ``execute`` the step, let
    its duration pass, ``end_step``; jump to the next arrival when idle. Returns per step
    ``(start_s, step, decoding groups, duration_s, blocks_in_use)``."""
    pending: list[tuple[float, int, Group]] = [(g.arrival_s, i, g) for i, g in enumerate(groups)]
    heapq.heapify(pending)
    tie = len(pending)

    def retry(g: Group, delay_s: float) -> None:
        nonlocal tie
        heapq.heappush(pending, (now + delay_s, tie, g))
        tie += 1

    sched = Scheduler(config, allocator, on_retry=retry)
    out: list[tuple[float, Step, list[Group], float, int]] = []
    now = 0.0
    while max_steps is None or len(out) < max_steps:
        while pending and pending[0][0] <= now:
            sched.submit(heapq.heappop(pending)[2], now)
        step = sched.begin_step(now)
        if step is None:
            if not pending:
                break
            now = max(now, pending[0][0])
            continue
        sched.sync_allocator()
        decoding = sched.step_decoding(step)
        duration_s, blocks = execute(step, decoding, len(out))
        out.append((now, step, decoding, duration_s, blocks))
        now += duration_s + step.stall_s
        sched.end_step(step, now)
    return out


def build_batch(
    prefill: Sequence[tuple[Sequence[int], int, int]],
    decode: Sequence[tuple[Sequence[int], int]],
    block_size: int,
    device: torch.device,
) -> StepBatch:
    """A :class:`StepBatch` from block tables: ``prefill`` is ``(table, start, count)``
    per chunk (positions ``[start, start+count)``), ``decode`` is ``(table, context)``
    per sequence (its new token at ``context - 1``)."""
    positions: list[int] = []
    slots: list[int] = []
    for table, start, count in prefill:
        positions.extend(range(start, start + count))
        slots.extend(
            table[p // block_size] * block_size + p % block_size
            for p in range(start, start + count)
        )
    for table, context in decode:
        p = context - 1
        positions.append(p)
        slots.append(table[p // block_size] * block_size + p % block_size)

    def tables(rows: Sequence[Sequence[int]]) -> torch.Tensor:
        width = max((len(r) for r in rows), default=1) or 1
        t = torch.zeros((len(rows), width), dtype=torch.int32)
        for i, r in enumerate(rows):
            t[i, : len(r)] = torch.tensor(list(r), dtype=torch.int32)
        return t.to(device)

    def ints(values: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(list(values), dtype=dtype).to(device)

    starts = [0]
    for _, _, count in prefill:
        starts.append(starts[-1] + count)
    return StepBatch(
        positions=ints(positions, torch.int64),
        slot_mapping=ints(slots, torch.int64),
        prefill_tokens=starts[-1],
        prefill_block_tables=tables([t for t, _, _ in prefill]),
        prefill_context_lens=ints([s + c for _, s, c in prefill], torch.int32),
        query_start_loc=ints(starts, torch.int32),
        decode_block_tables=tables([t for t, _ in decode]),
        decode_context_lens=ints([c for _, c in decode], torch.int32),
    )


def step_batch(pool: PagedKVPool, step: Step, decoding: Sequence[Group]) -> tuple[StepBatch, int]:
    """The device batch of a planned step (after ``pool.sync``) and its KV tokens."""
    tables = pool.mirror.tables
    prefill = []
    for g, chunk in step.prefill_chunks:
        start = g.held_tokens - g.prefill_left_tokens
        prefill.append((tables[g.seq_ids[0]], start, chunk))
    decode = [(tables[s], g.held_tokens) for g in decoding for s in g.seq_ids]
    for table, context in [(t, s + c) for t, s, c in prefill] + decode:
        assert len(table) * pool.block_size >= context, "block table shorter than context"
    kv = sum(s + c for _, s, c in prefill) + sum(c for _, c in decode)
    return build_batch(prefill, decode, pool.block_size, pool.device), kv


def new_pool(stack: DecoderStack, allocator: PagedAllocator, block_size: int) -> PagedKVPool:
    s = stack.shape
    return PagedKVPool(
        stack.layers_run,
        allocator.num_blocks,
        block_size,
        s.num_kv_heads,
        s.head_dim,
        dtype=stack.dtype,
        device=stack.device,
    )


def paged_block_size(parts: Parts) -> int:
    """The scenario's paged block size (ValueError for another allocator kind)."""
    config = parts.allocator
    if getattr(config, "kind", None) != "paged":
        raise ValueError(
            f"the replay needs allocator kind paged, got {getattr(config, 'kind', '?')}"
        )
    return int(config.block_size_tokens)  # type: ignore[attr-defined]


def replay(
    requests: pd.DataFrame,
    parts: Parts,
    stack: DecoderStack,
    *,
    warmup_steps: int = 3,
    max_steps: int | None = None,
) -> ReplayResult:
    """Replay ``requests`` (a canonical trace frame) under ``parts`` (``sim.simulate.parts.
    build_parts`` of a scenario with a ``paged`` allocator) on ``stack``'s device. The
    first ``warmup_steps`` steps run once untimed before their timed run (compilation,
    caches) and are flagged ``warmup``. Checks at every step that the pool's physical
    blocks in use equal the allocator's."""
    block_size = paged_block_size(parts)
    allocator = parts.allocator.build(parts.spec)
    pool = new_pool(stack, allocator, block_size)  # type: ignore[arg-type]
    groups = make_groups(requests)
    kv_of: list[int] = []

    def execute(step: Step, decoding: list[Group], index: int) -> tuple[float, int]:
        seqs = [s for g, _ in step.prefill_chunks for s in g.seq_ids]
        pool.sync(allocator, seqs + [s for g in decoding for s in g.seq_ids])  # type: ignore[arg-type]
        blocks = pool.mirror.blocks_in_use
        expected = allocator_blocks_in_use(allocator, block_size)
        assert blocks == expected, f"step {index}: pool holds {blocks} blocks, allocator {expected}"
        batch, kv = step_batch(pool, step, decoding)
        x = stack.inputs(batch.num_tokens)

        def run() -> None:
            stack.forward(x, batch, pool.k, pool.v)

        warm = index < warmup_steps
        if warm:
            run()
        measured = time_s(run, stack.device) * stack.depth_scale
        kv_of.append(kv)
        return measured, blocks

    done = drive(parts.scheduler, allocator, groups, execute, max_steps)
    records = [
        StepRecord(
            i,
            start,
            step.prefill_tokens,
            len(step.prefill_chunks),
            sum(c * c for _, c in step.prefill_chunks),
            step.decode_seqs,
            kv_of[i],
            duration,
            step.stall_s,
            blocks,
            i < warmup_steps,
        )
        for i, (start, step, _, duration, blocks) in enumerate(done)
    ]
    return ReplayResult(records, group_frame(groups), stack.kernels.name, stack.layers_run)


def lockstep_blocks(
    requests: pd.DataFrame, parts: Parts, durations_s: Sequence[float]
) -> list[tuple[int, int, int, int]]:
    """The simulator's scheduler and allocator (fresh, built from ``parts``) on the clock
    the replay measured: per step ``(prefill_tokens, decode_seqs, kv_tokens,
    blocks_in_use)``, blocks read from the allocator (owned less its reservoir)."""
    block_size = paged_block_size(parts)
    allocator = parts.allocator.build(parts.spec)
    rows: list[tuple[int, int, int, int]] = []

    def execute(step: Step, decoding: list[Group], index: int) -> tuple[float, int]:
        blocks = allocator_blocks_in_use(allocator, block_size)
        rows.append((step.prefill_tokens, step.decode_seqs, step.kv_tokens, blocks))
        return durations_s[index], blocks

    drive(parts.scheduler, allocator, make_groups(requests), execute, len(durations_s))
    return rows
