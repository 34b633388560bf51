"""A decode replica's inbound KV on the scheduler alone (``sim.engine.inbound``): handed
over, reserved at the next step boundary (the allocator's answer: held memory or a
refusal reported as the request's end), joining the batch at the first boundary at or
after its transfer's end -- a decision fast mode cuts its runs at -- and waiting, with
its blocks, while the batch is full."""

from __future__ import annotations

import math
from typing import Any

from support.allocators import build_allocator

from sim.engine.batch import Group, SchedEvent, SchedulerConfig
from sim.engine.inbound import InboundKV
from sim.engine.scheduler import Scheduler

STEP_S = 0.01


def best_fit(capacity_tokens: int) -> Any:
    return build_allocator({"kind": "best_fit"}, capacity_tokens)


def handed(request_id: int, prompt: int, output: int, transfer_s: float, now: float) -> InboundKV:
    """A request whose prefill (one token) ran elsewhere, handed over at ``now``."""
    g = Group(request_id, 0.0, prompt, output)
    g.generated_tokens = 1
    g.admit_s = g.first_token_s = 0.0
    return InboundKV(g, 0, transfer_s, now)


def test_kv_is_held_from_the_reservation_and_joins_when_its_transfer_has_run() -> None:
    sched = Scheduler(SchedulerConfig(), best_fit(10_000))
    kv = handed(7, 500, 4, 0.25, 0.0)
    sched.inbound.add(kv)
    assert sched.steady_steps() == 0  # a reservation is due
    assert sched.begin_step(0.1) is None  # reserved, nothing to run yet
    assert kv.reserved_s == 0.1 and math.isnan(kv.joined_s)
    assert sched.allocator.stats().used_tokens == 501  # the prompt, the first step's slot
    assert sched.next_release_s() == 0.1 + 0.25  # its landing is a decision
    assert sched.begin_step(0.3) is None and math.isnan(kv.joined_s)
    step = sched.begin_step(0.35)
    assert step is not None and step.stepped == [kv.group] and step.decode_seqs == 1
    assert kv.joined_s == 0.35 and not step.prefill_chunks
    now = 0.35 + STEP_S
    sched.end_step(step, now)
    while (step := sched.begin_step(now)) is not None:
        now += STEP_S
        sched.end_step(step, now)
    assert kv.group.status == "ok" and kv.group.generated_tokens == 4
    assert sched.allocator.stats().used_tokens == 0 and sched.next_release_s() == math.inf


def test_a_refused_reservation_is_an_admission_failure_and_the_requests_end() -> None:
    events: list[SchedEvent] = []
    ended: list[Group] = []
    sched = Scheduler(
        SchedulerConfig(), best_fit(1_000), on_event=events.append, on_done=ended.append
    )
    kv = handed(3, 1_200, 10, 0.0, 0.0)
    sched.inbound.add(kv)
    assert sched.begin_step(0.0) is None
    assert kv.refused and kv.settled and math.isnan(kv.reserved_s)
    assert ended == [kv.group] and kv.group.status == "rejected-capacity"
    assert [(e.kind, e.request_id, e.cause) for e in events] == [
        ("admission_failure", 3, "capacity")
    ]
    assert events[0].need_tokens > 1_000  # the pool's capacity: it can never fit
    assert sched.allocator.stats().used_tokens == 0


def test_landed_kv_waits_holding_its_blocks_while_the_batch_is_full() -> None:
    sched = Scheduler(SchedulerConfig(max_num_seqs=1), best_fit(10_000))
    running = Group(0, 0.0, 100, 50)
    sched.submit(running, 0.0)
    step = sched.begin_step(0.0)
    assert step is not None
    sched.end_step(step, STEP_S)
    kv = handed(1, 300, 3, 0.0, STEP_S)
    sched.inbound.add(kv)
    now = STEP_S
    step = sched.begin_step(now)  # reserved, landed at once, no room
    assert step is not None and kv.group not in step.stepped
    assert kv.reserved_s == now and math.isnan(kv.joined_s)
    assert sched.inbound.landed and not sched.inbound.decision_due()
    while math.isnan(kv.joined_s):
        now += STEP_S
        sched.end_step(step, now)
        step = sched.begin_step(now)
        assert step is not None
    assert running.status == "ok" and kv.joined_s == running.finish_s


def test_a_replica_going_down_drops_its_inbound_and_frees_what_it_reserved() -> None:
    sched = Scheduler(SchedulerConfig(), best_fit(10_000))
    reserved, pending = handed(0, 400, 5, 1.0, 0.0), handed(1, 200, 5, 1.0, 0.0)
    sched.inbound.add(reserved)
    assert sched.begin_step(0.0) is None
    sched.inbound.add(pending)
    assert sched.allocator.stats().used_tokens == 401
    assert sched.inbound.take_all() == [pending, reserved]
    assert reserved.dropped and pending.dropped and not sched.inbound.active
    assert sched.allocator.stats().used_tokens == 0 and sched.next_release_s() == math.inf
