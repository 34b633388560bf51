"""vLLM v1's chunked prefill (``allocate_per_chunk``, its gate, the watermark, the
chunk cap, adaptive or not) on the paged pool (the scenario refuses it on other policies: a contiguous
policy extending chunk by chunk can thrash forever): the decode ticks change nothing (the stepped
reference path makes the same decisions, events and pool states), whatever the
preemption mode, group width or prefix sharing; and every run ends."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_scheduler_ticks import drive, rows_strategy

from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.engine.batch import ClientRetry, SchedulerConfig

PER_CHUNK_KINDS = [
    kind for kind in ALLOCATORS if parse_allocator({"kind": kind}).why_not_per_chunk() is None
]
"""The registered kinds that allow ``allocate_per_chunk`` (their config's
``why_not_per_chunk`` is None), each drawn with its defaults; then paged's variants."""
POLICIES = (
    *({"kind": kind} for kind in PER_CHUNK_KINDS),
    {"kind": "paged", "block_size_tokens": 4},
    {"kind": "paged", "block_size_tokens": 4, "reuse_uncached_first": True},
    {"kind": "paged", "cache_generated_blocks": True, "reuse_uncached_first": True},
)


@given(
    policy=st.sampled_from(POLICIES),
    rows=rows_strategy,
    capacity=st.sampled_from([500, 1_000, 2_000, 50_000]),
    preemption=st.sampled_from(["recompute", "swap", "fail"]),
    max_num_seqs=st.sampled_from([3, 8, 64]),
    gate=st.booleans(),
    watermark_tokens=st.sampled_from([0, 0, 16, 64]),
    cap=st.sampled_from([0, 0, 32, 100]),
    adaptive=st.booleans(),
    probes=st.sets(st.integers(0, 300), max_size=12),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ticks_change_nothing_when_allocating_per_chunk(
    policy: dict[str, Any],
    rows: list[tuple[float, int, int, int, int]],
    capacity: int,
    preemption: str,
    max_num_seqs: int,
    gate: bool,
    watermark_tokens: int,
    cap: int,
    adaptive: bool,
    probes: set[int],
) -> None:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=128,
        chunked_prefill=True,
        preemption=preemption,  # type: ignore[arg-type]
        retry=ClientRetry(1),
        max_seq_tokens=4096,
        swap_s_per_token=1e-6,
        copy_s_per_token=1e-7,
        allocate_per_chunk=True,
        reserve_full_prompt=gate,
        watermark_tokens=watermark_tokens,
        long_prefill_token_threshold=cap,
        long_prefill_adaptive=adaptive,
    )
    want = drive(policy, capacity, config, rows, probes, ticks=False)
    got = drive(policy, capacity, config, rows, probes, ticks=True)
    assert got == want
    done = [entry for entry in want if entry[0] == "done"]
    assert len(done) == len(rows)  # every request ends (none loops forever)
