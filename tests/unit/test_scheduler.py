"""Scheduler stories: the pure iteration-level scheduler driven step by step over real
allocators, asserting the step log, the event log and the per-request records.

Every step takes ``STEP_S`` (plus any stall the step reports), so times are hand-checkable:
a request admitted at t prefills in the step ending at t + 0.01 and emits its first token
there; each later step emits one more token.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.allocators import build_allocator
from support.scheduler import STEP_S, SchedulerDriver

from policies.allocators.base import Allocator
from sim.engine.batch import ClientRetry, Group, SchedulerConfig


def paged(capacity_tokens: int, **kw: Any) -> Allocator:
    """A paged pool of 16-token blocks, prefix caching off unless asked."""
    return build_allocator({"kind": "paged", "prefix_caching": False, **kw}, capacity_tokens)


def static_max(capacity_tokens: int, max_tokens: int) -> Allocator:
    """Fixed spans of ``max_tokens`` placed first-fit: a checkerboard is easy to build."""
    return build_allocator(
        {"kind": "static", "mode": "max", "max_tokens": max_tokens}, capacity_tokens
    )


def best_fit(capacity_tokens: int, **kw: Any) -> Allocator:
    return build_allocator({"kind": "best_fit", **kw}, capacity_tokens)


def cfg(**kw: Any) -> SchedulerConfig:
    return SchedulerConfig(**kw)


# -- token accounting ------------------------------------------------------------------


def test_one_request_prefills_then_decodes_one_token_per_step() -> None:
    alloc = paged(10_000)
    g = Group(0, 0.0, 100, 10)
    held_by_step: list[int] = []
    d = SchedulerDriver(cfg(), alloc).add(g)
    # Watch the allocator at every step: the last step holds P + O - 1 slots.
    d.before_end_step = lambda: held_by_step.append(d.pool().used_tokens)
    d.run()
    assert d.steps[0].prefill == [(0, 100)] and d.steps[0].decoding == []
    assert all(s.decoding == [0] and s.prefill == [] for s in d.steps[1:])
    assert len(d.steps) == 10  # one prefill step + O - 1 decode steps
    assert held_by_step == list(range(100, 110))  # O - 1 growths, last at P + O - 1
    assert g.status == "ok" and g.admit_s == 0.0
    assert g.first_token_s == pytest.approx(0.01)  # TTFT: one step after admission
    assert g.finish_s == pytest.approx(0.10)  # O steps
    assert g.peak_reserved_tokens == 112  # 7 blocks of 16 cover 109 slots
    assert d.pool().used_tokens == 0 and d.pool().free_tokens == 10_000 // 16 * 16


def test_a_single_output_token_needs_no_growth() -> None:
    d = SchedulerDriver(cfg(), paged(1_000)).add(Group(0, 0.0, 30, 1)).run()
    (g,) = d.done
    assert len(d.steps) == 1 and g.first_token_s == g.finish_s == pytest.approx(0.01)


def test_decode_kv_tokens_count_the_held_context() -> None:
    d = SchedulerDriver(cfg(), paged(10_000)).add(Group(0, 0.0, 50, 4)).run()
    # Prefill reads its 50 tokens; decode step k reads 50 + k held slots.
    assert [s.kv_tokens for s in d.steps] == [50, 51, 52, 53]


# -- preemption --------------------------------------------------------------------------


def _two_growing(preemption: str, **kw: Any) -> SchedulerDriver:
    """Two 100+100 requests on 20 blocks: both fit at admission, growth runs out at the
    step that needs an 11th block each (after 61 tokens)."""
    d = SchedulerDriver(cfg(preemption=preemption, **kw), paged(320))
    return d.add(Group(0, 0.0, 100, 100), Group(1, 0.0, 100, 100)).run()


def test_recompute_preempts_the_most_recent_and_reprefills_its_context() -> None:
    d = _two_growing("recompute")
    assert d.kinds() == [("growth_failure", 0), ("preemption", 1), ("admission_failure", 1)]
    t_fail = d.events[0][0]
    assert t_fail == pytest.approx(0.61)
    recompute = [(s.end_s, c) for s in d.steps for rid, c in s.prefill if rid == 1][1:]
    # Admitted again once request 0 finishes; it re-prefills its whole context.
    assert [t for t, _ in recompute] == [pytest.approx(1.01)]
    assert recompute[0][1] >= 100 + 61 - 1
    r = d.by_id()
    assert r[0].status == r[1].status == "ok"
    assert (r[0].preemptions, r[1].preemptions) == (0, 1)
    assert d.sched.preemptions_total == 1
    assert r[0].finish_s == pytest.approx(1.00)
    # The first token keeps its time; 61 tokens were out, the re-prefill emits the 62nd.
    assert r[1].first_token_s == pytest.approx(0.01)
    assert r[1].finish_s == pytest.approx(1.01 + 38 * STEP_S)


def test_a_recomputed_request_holds_prompt_plus_output_minus_one_at_its_last_step() -> None:
    d = _two_growing("recompute")
    r = d.by_id()
    # 61 tokens were out: the re-prefill computes prompt + all 61 (the last one's KV was
    # never stored) and emits the 62nd, leaving P + 62 - 1 slots held.
    assert [c for s in d.steps for rid, c in s.prefill if rid == 1] == [100, 100 + 61]
    assert r[0].held_tokens == 100 + 100 - 1
    assert r[1].held_tokens == 100 + 100 - 1


def test_swap_moves_the_victim_out_and_back_without_recompute() -> None:
    swap_s_per_token = 1e-5
    d = _two_growing("swap", swap_s_per_token=swap_s_per_token)
    assert [k for k, _ in d.kinds()][:2] == ["growth_failure", "preemption"]
    assert d.kinds()[1] == ("preemption", 1)
    # Only the initial prefill of request 1: no recompute on its return.
    assert [c for s in d.steps for rid, c in s.prefill if rid == 1] == [100]
    stalls = [s for s in d.steps if s.stall_s > 0]
    # One stall to swap 160 held slots out, one to bring them back.
    assert len(stalls) == 2
    assert [s.stall_s for s in stalls] == [pytest.approx(160 * swap_s_per_token)] * 2
    r = d.by_id()
    assert r[1].status == "ok" and r[1].preemptions == 1
    assert r[1].first_token_s == pytest.approx(0.01)
    # Request 0 is slowed by the swap-out stall; request 1 comes back in the step after
    # it finished (that step also carries the swap-in stall) and decodes 39 more tokens.
    stall_s = stalls[0].stall_s
    assert r[0].finish_s == pytest.approx(1.00 + stall_s)
    assert r[1].finish_s == pytest.approx(r[0].finish_s + stall_s + 39 * STEP_S)


def test_fail_preemption_fails_the_request_that_cannot_grow() -> None:
    d = _two_growing("fail")
    r = d.by_id()
    assert d.kinds() == [("growth_failure", 0)]
    assert r[0].status == "failed-capacity" and r[0].finish_s == pytest.approx(0.61)
    assert r[1].status == "ok" and r[1].preemptions == 0
    assert d.sched.preemptions_total == 0


def test_swapping_a_half_prefilled_request_keeps_its_remaining_prefill() -> None:
    # Request 0 decodes; request 1's 1900-token prompt prefills 15 tokens a step when the
    # pool runs out and request 1 (the most recent) is swapped out mid-prefill.
    d = SchedulerDriver(
        cfg(preemption="swap", chunked_prefill=True, max_num_batched_tokens=16), paged(3008)
    )
    d.add(Group(0, 0.0, 1000, 500), Group(1, 0.05, 1900, 50)).run()
    r = d.by_id()
    assert ("preemption", 1) in d.kinds()
    assert sum(c for s in d.steps for rid, c in s.prefill if rid == 1) >= 1900
    assert r[1].status == "ok" and r[1].first_token_s > r[1].admit_s


# -- admission failures, queueing, retries ---------------------------------------------------


def test_reject_with_retries_backs_off_exponentially_then_gives_up() -> None:
    # Request 0 holds 7 to 19 blocks of 20 for 2 s; request 1 needs 16: refused each time.
    d = SchedulerDriver(cfg(on_admission_failure="reject", retry=ClientRetry(2, 0.5)), paged(320))
    d.add(Group(0, 0.0, 100, 200), Group(1, 0.005, 250, 5)).run()
    r = d.by_id()
    assert [k for k in d.kinds()] == [("admission_failure", 1)] * 3
    times = [t for t, _ in d.events]
    # Refused at the first boundary after arrival, then at +0.5 s and +1.0 s (doubling).
    assert times == pytest.approx([0.01, 0.51, 1.51])
    assert [delay for _, _, delay in d.retries] == [0.5, 1.0]
    assert r[1].status == "rejected-capacity" and r[1].retries == 2
    assert r[1].finish_s == pytest.approx(1.51)
    assert r[0].status == "ok"


@pytest.mark.parametrize("attempts", [0, 1, 3, 6])
def test_client_retry_doubles_counts_each_try_and_spans_the_sum_of_its_delays(
    attempts: int,
) -> None:
    retry = ClientRetry(attempts, 0.25)
    g = Group(0, 0.0, 10, 1)
    delays = []
    while (delay_s := retry.next_try(g)) is not None:
        delays.append(delay_s)
        assert g.retries == len(delays)
    assert delays == [0.25 * 2**n for n in range(attempts)]
    assert delays == [retry.delay_s(n) for n in range(1, attempts + 1)]
    assert retry.span_s() == sum(delays)  # what the run-cost check bounds


def test_a_retry_that_finds_memory_is_served() -> None:
    d = SchedulerDriver(cfg(on_admission_failure="reject", retry=ClientRetry(3, 0.5)), paged(320))
    d.add(Group(0, 0.0, 100, 30), Group(1, 0.005, 250, 5)).run()
    g = d.by_id()[1]
    assert g.status == "ok" and g.retries == 1  # request 0 is gone after 0.30 s
    assert g.admit_s == pytest.approx(0.51)
    assert g.first_token_s == pytest.approx(0.52)


def _checkerboard(**kw: Any) -> SchedulerDriver:
    """Static 100-slot spans over 300 slots: requests 0 and 2 finish at once, request 1
    holds the middle span for 0.5 s. Request 3 then needs a 149-slot span: 200 slots are
    free but the largest extent is 100 (fragmentation). Request 4 is small."""
    d = SchedulerDriver(cfg(**kw), static_max(300, 100))
    return d.add(
        Group(0, 0.0, 99, 1),
        Group(1, 0.0, 50, 50),
        Group(2, 0.0, 99, 1),
        Group(3, 0.02, 149, 1),
        Group(4, 0.03, 20, 3),
    )


def test_a_fragmentation_refusal_is_recorded_with_the_pool_state() -> None:
    d = _checkerboard(on_admission_failure="reject").run()
    r = d.by_id()
    ((t, e),) = [(t, e) for t, e in d.events if e.request_id == 3]
    assert t == pytest.approx(0.02)  # the first boundary after its arrival
    assert (e.kind, e.cause, e.need_tokens, e.free_tokens, e.largest_free_extent_tokens) == (
        "admission_failure",
        "fragmentation",
        149,
        200,
        100,
    )
    assert r[3].status == "rejected-fragmentation" and r[3].retries == 0
    assert r[4].status == "ok"


def test_head_of_line_blocks_the_queue_behind_a_blocked_request() -> None:
    d = _checkerboard(head_of_line=True).run()
    r = d.by_id()
    assert r[1].finish_s == pytest.approx(0.50)
    assert r[3].admit_s == pytest.approx(0.50) and r[3].status == "ok"
    assert r[4].admit_s >= r[3].admit_s  # waited behind request 3
    assert [k for k, rid in d.kinds() if rid == 3] == ["admission_failure"]  # tried once


def test_skip_ahead_lets_a_small_request_pass_a_blocked_big_one() -> None:
    d = _checkerboard(head_of_line=False).run()
    r = d.by_id()
    assert r[4].admit_s == pytest.approx(0.03)
    assert r[4].finish_s < r[3].admit_s == pytest.approx(0.50)
    assert r[3].status == r[4].status == "ok"


def test_a_request_too_big_for_an_empty_pool_is_rejected_as_capacity() -> None:
    d = SchedulerDriver(cfg(), paged(320)).add(Group(0, 0.0, 400, 5), Group(1, 0.0, 50, 2)).run()
    r = d.by_id()
    assert d.kinds() == [("admission_failure", 0)]
    assert r[0].status == "rejected-capacity" and r[0].finish_s == 0.0
    assert r[1].status == "ok"


def test_queue_timeout_ends_a_waiting_request() -> None:
    d = SchedulerDriver(cfg(queue_timeout_s=0.5), paged(320))
    d.add(Group(0, 0.0, 100, 200), Group(1, 0.005, 250, 5)).run()
    g = d.by_id()[1]
    assert g.status == "timed-out" and g.finish_s == pytest.approx(0.51)  # first boundary
    assert d.sched.next_timeout_s() is None


# -- sequence length limits and batch limits ---------------------------------------------


def test_too_long_prompts_are_rejected_and_outputs_truncated() -> None:
    d = SchedulerDriver(cfg(max_seq_tokens=256), paged(10_000))
    d.add(Group(0, 0.0, 256, 5), Group(1, 0.0, 200, 100)).run()
    r = d.by_id()
    assert r[0].status == "rejected-too-long" and r[0].finish_s == 0.0
    assert r[1].status == "ok" and r[1].target_tokens == r[1].generated_tokens == 56
    assert r[1].output_tokens == 100  # the record keeps what the trace said
    assert r[1].finish_s == pytest.approx(56 * STEP_S)
    assert r[1].held_tokens == 255  # prompt + output - 1 < max_seq_tokens


def test_max_num_seqs_caps_the_batch() -> None:
    d = SchedulerDriver(cfg(max_num_seqs=2), paged(10_000))
    d.add(*(Group(i, 0.0, 10, 3) for i in range(3))).run()
    assert d.steps[0].prefill == [(0, 10), (1, 10)]
    r = d.by_id()
    assert r[2].admit_s == pytest.approx(0.03)  # after the first two finish
    assert max(len(s.decoding) + len(s.prefill) for s in d.steps) == 2


def test_max_num_batched_tokens_defers_a_prefill_to_the_next_step() -> None:
    d = SchedulerDriver(cfg(max_num_batched_tokens=150), paged(10_000))
    d.add(Group(0, 0.0, 100, 5), Group(1, 0.0, 100, 5)).run()
    assert d.steps[0].prefill == [(0, 100)]
    assert d.steps[1].prefill == [(1, 100)] and d.steps[1].decoding == [0]
    assert d.by_id()[1].first_token_s == pytest.approx(0.02)


def test_chunked_prefill_splits_a_long_prompt_across_steps() -> None:
    d = SchedulerDriver(cfg(chunked_prefill=True, max_num_batched_tokens=64), paged(10_000))
    d.add(Group(0, 0.0, 10, 20), Group(1, 0.015, 200, 2)).run()
    chunks = [(s.decoding, s.prefill) for s in d.steps if any(r == 1 for r, _ in s.prefill)]
    # Request 0 decodes in every step and takes one token of the 64-token budget.
    assert chunks == [([0], [(1, 63)]), ([0], [(1, 63)]), ([0], [(1, 63)]), ([0], [(1, 11)])]
    g = d.by_id()[1]
    assert g.admit_s == pytest.approx(0.02)
    assert g.first_token_s == pytest.approx(0.06) and g.status == "ok"


# -- forks and prefix caching -------------------------------------------------------------


def test_parallel_sampling_shares_the_prompt_on_paged() -> None:
    alloc = paged(10_000)
    d = SchedulerDriver(cfg(), alloc).add(Group(0, 0.0, 100, 20, num_seqs=3))
    d.run(until_s=0.01)
    s = d.pool()
    assert s.shared_tokens == 112  # the prompt's 7 blocks, once for 3 sequences
    assert s.used_tokens == 100 and s.copied_tokens_total == 0
    d.run(until_s=0.02)
    s = d.pool()
    # The first decode write copies the shared partly filled block for two of the three.
    assert s.shared_tokens == 96 and s.copied_tokens_total == 2 * 4
    assert s.used_tokens == 96 + 3 * (4 + 1)
    d.run()
    (g,) = d.done
    assert g.status == "ok" and g.finish_s > 0.20 - 1e-9 and len(g.seq_ids) == 3
    assert d.steps[0].prefill == [(0, 100)]  # the prompt is computed once
    assert all(s.kv_tokens == 3 * (100 + i) for i, s in enumerate(d.steps[1:], start=1))
    assert d.pool().used_tokens == 0 and d.pool().shared_tokens == 0


def test_parallel_sampling_copies_on_best_fit() -> None:
    alloc = best_fit(10_000)
    d = SchedulerDriver(cfg(), alloc).add(Group(0, 0.0, 100, 20, num_seqs=3))
    d.run(until_s=0.01)
    s = d.pool()
    assert s.shared_tokens == 0 and s.used_tokens == 300
    assert s.copied_tokens_total == 200  # two forks copy the prompt
    d.run()
    assert d.done[0].status == "ok" and d.pool().used_tokens == 0


def test_a_cached_prefix_shortens_the_second_prefill() -> None:
    alloc = paged(10_000, prefix_caching=True)
    hashes = tuple(range(1, 7))  # 6 full 16-token blocks of a 100-token prompt
    d = SchedulerDriver(cfg(), alloc)
    d.add(
        Group(0, 0.0, 100, 3, prefix_hashes=hashes), Group(1, 1.0, 100, 3, prefix_hashes=hashes)
    ).run()
    r = d.by_id()
    assert r[0].cached_tokens == 0 and r[1].cached_tokens == 96
    prefills = [c for s in d.steps for _, c in s.prefill]
    assert prefills == [100, 4]


def test_a_fully_cached_prompt_still_computes_one_token() -> None:
    alloc = paged(10_000, prefix_caching=True)
    hashes = tuple(range(1, 5))  # 64-token prompt, 4 full blocks
    d = SchedulerDriver(cfg(), alloc)
    d.add(
        Group(0, 0.0, 64, 2, prefix_hashes=hashes), Group(1, 1.0, 64, 2, prefix_hashes=hashes)
    ).run()
    assert d.by_id()[1].cached_tokens == 63
    assert [c for s in d.steps for _, c in s.prefill] == [64, 1]


# -- bugs ---------------------------------------------------------------------------------


def test_a_group_wider_than_max_num_seqs_is_refused_not_stuck() -> None:
    d = SchedulerDriver(cfg(max_num_seqs=2), paged(10_000))
    d.add(Group(0, 0.0, 10, 5, num_seqs=3)).run()
    assert not d.sched.waiting
    assert d.done and d.done[0].status.startswith("rejected")


def test_a_swapped_out_request_stays_out_until_its_growth_fits() -> None:
    # Request 1's 664-slot buffer is full at 0.66 s and the 728-slot buffer it needs does
    # not fit beside it while request 0 runs (until 1.5 s).
    alloc = build_allocator({"kind": "first_fit", "growth_chunk_tokens": 64}, 1500)
    d = SchedulerDriver(cfg(preemption="swap"), alloc)
    d.add(Group(0, 0.0, 100, 150), Group(1, 0.005, 600, 100)).run()
    r = d.by_id()
    assert r[0].status == r[1].status == "ok"
    assert d.kinds().count(("preemption", 1)) == 1
    assert r[1].preemptions == 1
