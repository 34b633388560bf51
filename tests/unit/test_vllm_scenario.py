"""The vLLM settings as a user writes them in a scenario (``scheduler:`` and
``allocator:``) give, through ``fragsim run``'s own path, the decisions vLLM 0.33.0
made on the recorded workloads (``tests/golden/vllm/``): with a constant one-second step
a request admitted at step k is admitted at k s, and its first token and finish come at
the end of their steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.fleet import evenly, fleet_data, run_fleet_data, synthetic_fleet_data
from support.vllm_goldens import block_hashes, load, prompt_token_ids
from test_replica import trace

from sim.results.frames import PREFIX_CACHE_COLUMNS
from sim.runner import run
from sim.scenario.schema import ScenarioError, parse_scenario


def vllm_scenario(config: dict[str, Any], mode: str = "exact") -> dict[str, Any]:
    return {
        "name": "vllm-parity",
        "workload": {"preset": "bimodal"},  # unused: the trace is passed in
        "hardware": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "num_gpu_blocks": config["num_gpu_blocks"],
            "max_seq_tokens": config["max_model_len"],
        },
        "allocator": {
            "kind": "paged",
            "block_size_tokens": config["block_size"],
            "prefix_caching": config["enable_prefix_caching"],
            "cache_generated_blocks": True,
            "reuse_uncached_first": True,
        },
        "scheduler": {
            "max_num_seqs": config["max_num_seqs"],
            "max_num_batched_tokens": config["max_num_batched_tokens"],
            "chunked_prefill": True,
            "allocate_per_chunk": True,
            "scheduler_reserve_full_isl": config["scheduler_reserve_full_isl"],
            "watermark": config["watermark"],
            "long_prefill_token_threshold": config["long_prefill_token_threshold"],
            "long_prefill_token_threshold_adaptive": config[
                "long_prefill_token_threshold_adaptive"
            ],
        },
        "latency": {"kind": "constant", "step_s": 1.0},
        "metrics": {"sample_interval_s": 1.0},
        "mode": mode,
    }


def golden_trace(doc: dict[str, Any]) -> Any:
    rows = sorted(doc["requests"], key=lambda r: r["id"])
    bt = doc["config"]["block_size"]
    hashes = [list(block_hashes(prompt_token_ids(r), bt)) for r in rows]
    df = trace(
        [(float(r["arrival_step"]), len(prompt_token_ids(r)), r["output_tokens"]) for r in rows]
    )
    if doc["config"]["enable_prefix_caching"]:
        df["prefix_hashes"] = hashes
    return df


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize(
    "name", ["heavy", "watermark", "chunked-no-reserve", "chunked-adaptive", "prefix-eviction"]
)
def test_a_scenario_with_vllm_s_settings_makes_vllm_s_decisions(name: str, mode: str) -> None:
    doc = load(name)
    result = run(parse_scenario(vllm_scenario(doc["config"], mode)), golden_trace(doc))
    req = result.requests.sort_values("request_id")
    golden = np.array(doc["records"])
    assert list(req["status"].unique()) == ["ok"]
    np.testing.assert_array_equal(req["admit_s"].to_numpy(), golden[:, 1])
    np.testing.assert_array_equal(req["first_token_s"].to_numpy(), golden[:, 2] + 1)
    np.testing.assert_array_equal(req["finish_s"].to_numpy(), golden[:, 3] + 1)
    np.testing.assert_array_equal(req["preemptions"].to_numpy(), golden[:, 4])


def test_the_defaults_keep_fragsim_s_own_semantics() -> None:
    doc = load("chunked-no-reserve")
    data = vllm_scenario(doc["config"])
    for key in ("allocate_per_chunk", "scheduler_reserve_full_isl", "long_prefill_token_threshold"):
        del data["scheduler"][key]
    result = run(parse_scenario(data), golden_trace(doc))
    golden = np.array(doc["records"])
    admit = result.requests.sort_values("request_id")["admit_s"].to_numpy()
    assert not np.array_equal(admit, golden[:, 1])


def test_vllm_settings_that_cannot_apply_are_refused_naming_the_field() -> None:
    config = load("watermark")["config"]
    data = vllm_scenario(config)
    data["allocator"] = {"kind": "best_fit"}
    data["hardware"]["kv_capacity_tokens"] = data["hardware"].pop("num_gpu_blocks") * 16
    contiguous = r"field scheduler\.allocate_per_chunk: allocator kind best_fit keeps each"
    with pytest.raises(ScenarioError, match=contiguous + r" .* or use allocator kind paged$"):
        run(parse_scenario(data), golden_trace(load("watermark")))
    data["allocator"] = {"kind": "vm_paged"}
    with pytest.raises(ScenarioError, match=r"on a paged pool only, not on allocator kind vm_"):
        run(parse_scenario(data), golden_trace(load("watermark")))
    data["allocator"] = {"kind": "best_fit"}
    data["scheduler"]["allocate_per_chunk"] = False
    with pytest.raises(ScenarioError, match=r"field scheduler\.watermark: got 0\.05"):
        run(parse_scenario(data), golden_trace(load("watermark")))
    data = vllm_scenario(config)
    data["scheduler"]["chunked_prefill"] = False
    data["scheduler"]["max_num_batched_tokens"] = 8192
    with pytest.raises(ScenarioError, match=r"field scheduler\.allocate_per_chunk"):
        run(parse_scenario(data), golden_trace(load("watermark")))


@pytest.mark.parametrize("gate", [True, False])
def test_a_prompt_that_can_never_fit_is_rejected_where_vllm_would_wait_forever(
    gate: bool,
) -> None:
    config = {
        **load("chunked")["config"],
        "scheduler_reserve_full_isl": gate,
        "num_gpu_blocks": 200,
    }
    data = vllm_scenario(config)
    usable_tokens = (config["num_gpu_blocks"] - 1) * config["block_size"]
    rows = [(0.0, 300, 20), (1.0, usable_tokens + 1, 5), (2.0, 300, 20)]
    result = run(parse_scenario(data), trace(rows))
    status = list(result.requests.sort_values("request_id")["status"])
    assert status == ["ok", "rejected-capacity", "ok"]


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_the_prefix_cache_columns_and_summary_are_vllm_s_counts(mode: str) -> None:
    doc = load("prefix-eviction")
    result = run(parse_scenario(vllm_scenario(doc["config"], mode)), golden_trace(doc))
    req = result.requests.sort_values("request_id")
    golden = np.array(doc["records"])
    for i, column in enumerate(PREFIX_CACHE_COLUMNS, start=5):
        np.testing.assert_array_equal(req[column].to_numpy(), golden[:, i], err_msg=column)
    stats, cache = doc["prefix_cache"], result.summary.prefix_cache
    assert (cache.queried_tokens, cache.hit_tokens) == (stats["queries"], stats["hits"])
    assert cache.preempted_queried_tokens == stats["preempted_queries"]
    assert cache.preempted_hit_tokens == stats["preempted_hits"] > 0
    # fragsim's own figure, the most any one admission found, is another number
    assert cache.cached_prompt_tokens != cache.hit_tokens


def test_without_a_prefix_cache_the_tables_and_summary_have_no_vllm_counts() -> None:
    doc = load("heavy")
    data = vllm_scenario(doc["config"])
    data["allocator"]["prefix_caching"] = False
    result = run(parse_scenario(data), golden_trace(doc))
    assert not set(PREFIX_CACHE_COLUMNS) & set(result.requests.columns)
    assert "queried_tokens" not in result.summary.prefix_cache.to_json_dict()


def test_a_request_that_outgrows_the_pool_alone_is_rejected_after_preempting_itself() -> None:
    # vLLM would refuse to start (max_model_len over the pool) or, forced, loop: an
    # empty step, a recompute, the same self-preemption, forever (docs/vllm.md).
    config = {**load("chunked")["config"], "num_gpu_blocks": 101}
    usable_tokens = 100 * config["block_size"]
    result = run(parse_scenario(vllm_scenario(config)), trace([(0.0, 1000, 1000), (1.0, 100, 10)]))
    req = result.requests.sort_values("request_id")
    assert list(req["status"]) == ["rejected-capacity", "ok"]
    assert list(req["preemptions"]) == [1, 0]
    assert req["generated_tokens"].iloc[0] == usable_tokens - 1000 + 1
    kinds = result.events.loc[result.events["request_id"] == 0, "kind"].tolist()
    assert kinds == ["growth_failure", "preemption", "admission_failure"]


def test_in_a_mixed_fleet_only_replicas_with_a_prefix_cache_count_lookups() -> None:
    pools = [
        {"name": "contiguous", "count": 1},
        {"name": "paged", "count": 2, "allocator": {"kind": "paged"}},
    ]
    result = run_fleet_data(fleet_data(pools=pools, router="round_robin"), evenly(30, 0.05))
    req = result.requests
    on_paged = req["replica"].isin(result.summary.fleet.pools[1].replicas or [])
    assert 0 < on_paged.sum() < len(req)
    assert (req.loc[~on_paged, list(PREFIX_CACHE_COLUMNS)] == 0).all().all()
    queried = req.loc[on_paged, "prefix_queried_tokens"]
    assert (queried == req.loc[on_paged, "prompt_tokens"]).all()
    assert result.summary.prefix_cache.queried_tokens == queried.sum()


def test_a_client_retry_after_a_crash_is_a_new_request_s_lookup() -> None:
    """A request admitted, lost with its node and retried is a new request to the
    server it reaches: its first admission there is counted too (docs/vllm.md)."""
    data = synthetic_fleet_data(faults={"mtbf_s": 300.0, "mttr": {"mean_s": 30.0}})
    data["allocator"] = {"kind": "paged"}
    data["scheduler"]["retry_attempts"] = 3
    req = run(parse_scenario(data)).requests
    lookups = req["prefix_queried_tokens"] / req["prompt_tokens"]
    assert (lookups == lookups.round()).all()
    assert (lookups <= req["retries"] + 1).all()
    assert (lookups >= 2).any()
