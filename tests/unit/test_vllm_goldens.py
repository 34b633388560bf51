"""fragsim's paged engine equals vLLM 0.33.0's v1 scheduler, step for step, on the
workloads ``tools/vllm_recorder/record.py`` recorded (``tests/golden/vllm/``): every
request's admit, first-token and finish step, preemptions and prefix-cache accounting
(tokens looked up and found, at the first admission and at re-admissions after a
preemption, as vLLM's ``PrefixCacheStats`` counts them), and per step the blocks in
use, the running and waiting counts and the preemptions. ``make vllm-goldens`` records
them again (a newer vLLM: see docs/vllm.md)."""

from __future__ import annotations

import dataclasses

import pytest
from support.vllm_goldens import golden_names, load, replay, run_engine, scheduler_config

from policies.allocators.base import PoolSpec
from policies.allocators.config import BestFitConfig
from sim.engine.scheduler import Scheduler

DECISIONS = (
    "admit_step",
    "first_token_step",
    "finish_step",
    "preemptions",
    "queried_tokens",
    "hit_tokens",
    "preempted_queried_tokens",
    "preempted_hit_tokens",
)
STEP_FIELDS = ("blocks_in_use", "running", "waiting", "preemptions")
MATCHED = (
    "light",
    "heavy",
    "watermark",
    "chunked",
    "chunked-no-reserve",
    "chunked-adaptive",
    "prefix-eviction",
)


def mismatches(golden: list[list[int]], ours: list[list[int]], names: tuple[str, ...]) -> list[str]:
    """The first few rows that differ, said field by field."""
    out = []
    for want, got in zip(golden, ours, strict=False):
        for i, name in enumerate(names, start=1):
            if want[i] != got[i]:
                out.append(f"row {want[0]}: {name} vLLM {want[i]}, fragsim {got[i]}")
    if len(golden) != len(ours):
        out.append(f"rows: vLLM {len(golden)}, fragsim {len(ours)}")
    return out[:10]


def test_every_recorded_workload_is_checked() -> None:
    assert set(golden_names()) == set(MATCHED)
    for name in golden_names():
        assert load(name)["vllm_version"] == "0.33.0"


@pytest.mark.parametrize("ticks", [True, False], ids=["ticks", "stepped"])
@pytest.mark.parametrize("name", MATCHED)
def test_decisions_and_blocks_equal_vllm(name: str, ticks: bool) -> None:
    doc = load(name)
    ours = replay(doc, ticks=ticks)
    assert mismatches(doc["records"], ours.records, DECISIONS) == []
    assert mismatches(doc["steps"], ours.steps, STEP_FIELDS) == []


def test_the_workloads_exercise_what_they_are_named_for() -> None:
    heavy, watermark = load("heavy"), load("watermark")
    assert sum(r[4] for r in heavy["records"]) > 0
    assert watermark["config"]["watermark"] > 0 and sum(r[4] for r in watermark["records"]) > 0
    chunked = load("chunked")
    budget = chunked["config"]["max_num_batched_tokens"]
    assert max(r["unique_tokens"] for r in chunked["requests"]) > 3 * budget
    assert not load("chunked-no-reserve")["config"]["scheduler_reserve_full_isl"]
    assert load("prefix-eviction")["prefix_cache"]["hits"] > 0


def test_without_the_whole_prompt_gate_vllm_preempts_more_and_so_does_fragsim() -> None:
    gate, no_gate = load("chunked"), load("chunked-no-reserve")
    assert sum(r[4] for r in no_gate["records"]) > sum(r[4] for r in gate["records"])
    flipped = {**no_gate, "config": {**no_gate["config"], "scheduler_reserve_full_isl": True}}
    ours = replay(flipped)
    assert mismatches(no_gate["steps"], ours.steps, STEP_FIELDS) != []  # the gate matters


def test_the_counts_sum_to_what_vllm_s_prefix_cache_stats_count() -> None:
    doc = load("prefix-eviction")
    ours = replay(doc)
    totals = [sum(r[i] for r in ours.records) for i in range(5, 9)]
    stats = doc["prefix_cache"]
    assert totals == [stats[k] for k in ("queries", "hits", "preempted_queries", "preempted_hits")]
    assert stats["preempted_hits"] > 0  # re-admissions after preemptions hit too


@pytest.mark.parametrize(
    "option", ["cache_generated_blocks", "reuse_uncached_first", "allocate_per_chunk"]
)
def test_each_vllm_prefix_semantic_is_needed(option: str) -> None:
    doc = load("prefix-eviction")
    ours = replay(doc, off=option)
    assert mismatches(doc["records"], ours.records, DECISIONS) != []


def test_the_adaptive_chunk_cap_is_vllm_s_and_it_matters() -> None:
    doc = load("chunked-adaptive")
    config = doc["config"]
    assert config["long_prefill_token_threshold_adaptive"]
    assert config["long_prefill_token_threshold"] < config["max_num_batched_tokens"] // 4
    ours = replay(doc, off="long_prefill_token_threshold_adaptive")
    assert mismatches(doc["records"], ours.records, DECISIONS) != []


def test_no_recorded_preemption_empties_the_batch() -> None:
    """Where fragsim's one exception to "no admission in a step that preempted" would
    apply (the batch emptied), vLLM runs an empty step: docs/vllm.md says why no vLLM
    that starts gets there; the recorded workloads hold to it."""
    preempting = [s for name in MATCHED for s in load(name)["steps"] if s[4] > 0]
    assert len(preempting) > 100
    assert [s for s in preempting if s[2] == 0] == []


def test_per_chunk_growth_of_a_contiguous_buffer_moves_it_as_the_refusal_says() -> None:
    """The reason ``allocate_per_chunk`` is refused on a contiguous allocator
    (``policies.allocators.config.CONTIGUOUS_PER_CHUNK``), forced in the engine on the
    chunked workload: growing each buffer a chunk at a time copies several times the KV
    that placing the prompt whole copies, and preempts more."""
    doc = load("chunked")
    config = doc["config"]
    spec = PoolSpec(capacity_tokens=(config["num_gpu_blocks"] - 1) * config["block_size"])
    counts = {}
    for per_chunk in (True, False):
        sched_config = dataclasses.replace(scheduler_config(config), allocate_per_chunk=per_chunk)
        alloc = BestFitConfig(initial_extra_tokens=0).build(spec)
        groups = run_engine(doc, Scheduler(sched_config, alloc))
        assert {g.status for g in groups} == {"ok"}
        counts[per_chunk] = (alloc.copied_tokens_total(), sum(g.preemptions for g in groups))
    (chunk_copied, chunk_preempted), (whole_copied, whole_preempted) = counts[True], counts[False]
    assert chunk_copied > 2 * whole_copied and chunk_preempted > 2 * whole_preempted
