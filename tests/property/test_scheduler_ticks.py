"""Decode ticks change nothing: the scheduler with ``ticks=True`` (the default: decoding
groups on a global counter, pooled growth drawn in bulk) makes the same steps, the same
allocator decisions, the same events with the same pool state and the same records as
with ``ticks=False`` (every group stepped one by one), over every allocator policy and
preemption mode, tight pools included.

Samples are compared too: at random steps the driver reads the pool as a failure
sample would (``unsynced_tokens`` added, nothing synced) and as a periodic sample does
(after ``sync_allocator``).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.registry import ALLOCATORS
from policies.allocators.vm_paged import VmPagedAllocator
from sim.engine.scheduler import Group, Scheduler, SchedulerConfig

POLICIES: list[dict[str, Any]] = [
    {"kind": "paged", "block_size_tokens": 4},
    {"kind": "paged", "block_size_tokens": 16, "prefix_caching": True},
    {"kind": "vm_paged", "page_tokens": 8},
    {"kind": "best_fit"},
    {"kind": "first_fit"},
    {"kind": "static", "mode": "pow2"},
    {"kind": "buddy"},
    {"kind": "compaction"},
    {"kind": "caching"},
]


def build(policy: dict[str, Any], capacity_tokens: int) -> Allocator:
    spec = PoolSpec(capacity_tokens=capacity_tokens, max_seq_tokens=4096)
    if policy["kind"] == "vm_paged":
        return VmPagedAllocator(spec, page_tokens=policy["page_tokens"])
    return ALLOCATORS[policy["kind"]].model_validate(policy).build(spec)


def _nan_as_none(x: float) -> float | None:
    """Logs compare with ``==``: NaN equals itself only as the same object, which a
    compiled build (unboxed floats) does not keep."""
    return None if math.isnan(x) else x


def drive(
    policy: dict[str, Any],
    capacity_tokens: int,
    config: SchedulerConfig,
    rows: list[tuple[float, int, int, int, int]],
    probes: set[int],
    ticks: bool,
) -> list[Any]:
    """Run the scheduler as the replica's exact mode does (constant 10 ms steps) and
    log everything observable."""
    log: list[Any] = []
    now = 0.0
    alloc = build(policy, capacity_tokens)
    pending: list[tuple[float, int, Group]] = []
    tie = 0

    def push(t: float, g: Group) -> None:
        nonlocal tie
        heapq.heappush(pending, (t, tie, g))
        tie += 1

    sched = Scheduler(
        config,
        alloc,
        on_event=lambda e: log.append(("event", now, e, pool_at_failure())),
        on_retry=lambda g, d: push(round(now + d, 9), g),
        on_done=lambda g: log.append(
            (
                "done",
                g.request_id,
                g.status,
                _nan_as_none(g.admit_s),
                _nan_as_none(g.first_token_s),
                _nan_as_none(g.finish_s),
                g.preemptions,
                g.retries,
                g.peak_reserved_tokens,
                g.cached_tokens,
            )
        ),
        ticks=ticks,
    )

    def pool_at_failure() -> tuple[int, ...]:
        s = alloc_now().stats()
        u = sched.unsynced_tokens()
        return (s.used_tokens + u, s.reserved_unused_tokens - u, s.free_tokens)

    def alloc_now() -> Allocator:
        return sched.allocator

    for i, (t, prompt, output, width, prefix) in enumerate(rows):
        hashes = tuple(range(prefix)) if prefix else ()
        push(t, Group(i, t, prompt, output, width, hashes))
    for n in range(5_000):
        while pending and pending[0][0] <= now + 1e-12:
            sched.submit(heapq.heappop(pending)[2], now)
        step = sched.begin_step(now)
        if step is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        decoding = [g.request_id for g in sched.step_decoding(step)]
        now = round(now + 0.01 + step.stall_s, 9)
        log.append(
            (
                "step",
                [(g.request_id, c) for g, c in step.prefill_chunks],
                decoding,
                step.decode_seqs,
                step.kv_tokens,
                round(step.stall_s, 12),
            )
        )
        sched.end_step(step, now)
        if n in probes:
            sched.sync_allocator()
            log.append(("sample", sched.allocator.stats(), len(sched.running)))
    return log


rows_strategy = st.lists(
    st.tuples(
        st.floats(0, 0.5, allow_nan=False).map(lambda x: round(x, 3)),
        st.integers(1, 200),
        st.integers(1, 300),
        st.sampled_from([1, 1, 1, 1, 2, 3]),
        st.sampled_from([0, 0, 4, 9]),
    ),
    min_size=1,
    max_size=40,
).map(lambda rs: sorted(rs, key=lambda r: r[0]))


@given(
    policy=st.sampled_from(POLICIES),
    rows=rows_strategy,
    capacity=st.sampled_from([500, 1_000, 2_000, 50_000]),
    preemption=st.sampled_from(["recompute", "swap", "fail"]),
    max_num_seqs=st.sampled_from([3, 8, 64]),
    chunked=st.booleans(),
    probes=st.sets(st.integers(0, 300), max_size=12),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ticks_change_nothing(
    policy: dict[str, Any],
    rows: list[tuple[float, int, int, int, int]],
    capacity: int,
    preemption: str,
    max_num_seqs: int,
    chunked: bool,
    probes: set[int],
) -> None:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=512,
        chunked_prefill=chunked,
        preemption=preemption,  # type: ignore[arg-type]
        retry_attempts=1,
        max_seq_tokens=4096,
        swap_s_per_token=1e-6,
        copy_s_per_token=1e-7,
    )
    want = drive(policy, capacity, config, rows, probes, ticks=False)
    got = drive(policy, capacity, config, rows, probes, ticks=True)
    assert got == want


def _random_rows(seed: int, n: int) -> list[tuple[float, int, int, int, int]]:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.exponential(0.02, n).cumsum()).round(3)
    return [
        (
            float(arrivals[i]),
            int(rng.integers(1, 400)),
            int(rng.integers(1, 400)),
            int(rng.choice([1, 1, 1, 1, 2, 4])),
            int(rng.choice([0, 0, 5, 12])),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p['kind']}-{len(p)}")
@pytest.mark.parametrize("preemption", ["recompute", "swap", "fail"])
def test_ticks_change_nothing_on_long_tight_runs(policy: dict[str, Any], preemption: str) -> None:
    config = SchedulerConfig(
        max_num_seqs=32,
        max_num_batched_tokens=1024,
        preemption=preemption,  # type: ignore[arg-type]
        retry_attempts=2,
        max_seq_tokens=4096,
        swap_s_per_token=1e-6,
        copy_s_per_token=1e-7,
    )
    rows = _random_rows(len(preemption) * 7 + len(policy), 150)
    probes = set(range(0, 3000, 37))
    want = drive(policy, 3_000, config, rows, probes, ticks=False)
    got = drive(policy, 3_000, config, rows, probes, ticks=True)
    assert got == want
    assert sum(1 for e in want if e[0] == "event") > 10  # the pool was tight
