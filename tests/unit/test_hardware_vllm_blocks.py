"""vLLM's start-up figures as the KV budget: ``hardware.num_gpu_blocks`` (G) and
``hardware.gpu_kv_cache_tokens`` (G x block_size) mean what vLLM means -- block 0 is
vLLM's null block, so the paged pool has exactly G - 1 usable blocks."""

from __future__ import annotations

from typing import Any

import pytest
from support.fleet import fleet_data
from test_replica import trace

from sim.runner import run
from sim.scenario.schema import Scenario, ScenarioError, parse_scenario
from sim.simulate.parts import build_parts, run_parts

BLOCK_TOKENS = 16
G = 10  # vLLM's num_gpu_blocks: 9 usable blocks, 144 tokens
PAGED = {"kind": "paged", "block_size_tokens": BLOCK_TOKENS, "prefix_caching": False}


def scenario(hardware: dict[str, Any], allocator: dict[str, Any] | None = None) -> Scenario:
    return parse_scenario(
        {
            "name": "null-block",
            "workload": {"preset": "bimodal"},  # unused: the trace is passed in
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", **hardware},
            "allocator": allocator or PAGED,
            "latency": {"kind": "constant", "step_s": 0.01},
            "metrics": {"sample_interval_s": 0.01},
        }
    )


def blocks_in_use(result: Any) -> Any:
    ts = result.timeseries
    return (ts["capacity_tokens"] - ts["free_tokens"]) // BLOCK_TOKENS


def test_num_gpu_blocks_leaves_out_the_null_block() -> None:
    parts = build_parts(scenario({"num_gpu_blocks": G}))
    assert parts.kv_capacity_tokens == (G - 1) * BLOCK_TOKENS
    assert parts.allocator.build(parts.spec).num_blocks == G - 1  # type: ignore[attr-defined]


def test_a_request_of_g_minus_1_blocks_fits_and_one_of_g_does_not() -> None:
    usable_tokens = (G - 1) * BLOCK_TOKENS
    rows = [(0.0, usable_tokens - 1, 1), (1.0, usable_tokens, 1), (2.0, usable_tokens + 1, 1)]
    r = run(scenario({"num_gpu_blocks": G}), trace(rows))
    assert list(r.requests["status"]) == ["ok", "ok", "rejected-capacity"]
    assert blocks_in_use(r).max() == G - 1


def test_under_load_blocks_in_use_reach_g_minus_1_and_never_pass_it() -> None:
    rows = [(0.001 * i, 40, 60) for i in range(12)]  # 7 blocks each at the end: preemption
    r = run(scenario({"num_gpu_blocks": G}), trace(rows))
    used = blocks_in_use(r)
    assert used.max() == G - 1
    assert set(r.timeseries["capacity_tokens"]) == {(G - 1) * BLOCK_TOKENS}
    assert r.summary.failures.preemptions > 0
    assert set(r.requests["status"]) == {"ok"}


def test_the_tokens_figure_gives_the_same_pool_and_the_same_run() -> None:
    rows = [(0.001 * i, 40, 60) for i in range(12)]
    by_blocks = run(scenario({"num_gpu_blocks": G}), trace(rows))
    by_tokens = run(scenario({"gpu_kv_cache_tokens": G * BLOCK_TOKENS}), trace(rows))
    assert by_tokens.summary.kv_capacity_tokens == (G - 1) * BLOCK_TOKENS
    assert by_tokens.requests.equals(by_blocks.requests)
    assert by_tokens.timeseries.equals(by_blocks.timeseries)


def test_other_allocators_take_the_tokens_figure_whole_and_refuse_blocks() -> None:
    best_fit = {"kind": "best_fit"}
    parts = build_parts(scenario({"gpu_kv_cache_tokens": G * BLOCK_TOKENS}, best_fit))
    assert parts.kv_capacity_tokens == G * BLOCK_TOKENS  # no null block
    with pytest.raises(ScenarioError, match=r"field hardware\.num_gpu_blocks: 10 counts"):
        build_parts(scenario({"num_gpu_blocks": G}, best_fit))


@pytest.mark.parametrize(
    ("hardware", "field"),
    [
        ({"num_gpu_blocks": 1}, r"field hardware\.num_gpu_blocks: got 1"),
        ({"num_gpu_blocks": 0}, r"field hardware\.num_gpu_blocks: got 0"),
        ({"gpu_kv_cache_tokens": 0}, r"field hardware\.gpu_kv_cache_tokens: got 0"),
        ({"num_gpu_blocks": 10**15}, r"field hardware\.num_gpu_blocks: got"),
        ({"num_gpu_blocks": G, "kv_capacity_tokens": 100}, "kv_capacity_tokens and num_gpu"),
        ({"num_gpu_blocks": G, "gpu_kv_cache_tokens": 160}, "num_gpu_blocks and gpu_kv_cache"),
    ],
)
def test_bad_values_are_refused_naming_the_field(hardware: dict[str, Any], field: str) -> None:
    with pytest.raises(ScenarioError, match=field):
        scenario(hardware)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (G * BLOCK_TOKENS + 1, "161 is not a multiple of allocator.block_size_tokens 16"),
        (BLOCK_TOKENS, "16 is 1 block"),
    ],
)
def test_a_tokens_figure_the_block_size_cannot_mean_is_refused(tokens: int, message: str) -> None:
    with pytest.raises(ScenarioError, match=rf"field hardware\.gpu_kv_cache_tokens: {message}"):
        build_parts(scenario({"gpu_kv_cache_tokens": tokens}))


def test_a_fleet_pool_may_give_vllm_figures_over_the_scenarios_capacity() -> None:
    data = fleet_data(
        capacity_tokens=4096,  # the scenario's kv_capacity_tokens, replaced by pool b's
        allocator=PAGED,
        pools=[
            {"name": "a", "count": 1},
            {"name": "b", "count": 1, "hardware": {"num_gpu_blocks": G}},
            {"name": "c", "count": 1, "hardware": {"gpu_kv_cache_tokens": G * BLOCK_TOKENS}},
        ],
    )
    parts = run_parts(parse_scenario(data))
    assert [p.kv_capacity_tokens for p in parts] == [4096, *[(G - 1) * BLOCK_TOKENS] * 2]
    data["fleet"]["pools"][1]["hardware"]["kv_capacity_tokens"] = 100
    with pytest.raises(ScenarioError, match=r"fleet\.pools\[1\]\.hardware.*num_gpu_blocks"):
        parse_scenario(data)
