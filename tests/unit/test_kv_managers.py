"""The KV managers' layouts on the shipped hybrid presets, worked out by hand from each
config.json, and their behaviour as stories: vLLM's window freeing after the admission
reserve, SGLang's stranded pool, TensorRT-LLM's reservation to the final length."""

from __future__ import annotations

from typing import Any

import pytest
from support.allocators import kv_manager_kinds

from policies.allocators.base import LayerKindSpec, PoolSpec
from policies.allocators.hybrid import group_size_of
from policies.allocators.kv_groups import KvGroupManager
from policies.allocators.registry import parse_allocator
from sim.scenario.schema import parse_scenario
from sim.simulate.parts import build_parts


def _built(model: str, kind: str, **allocator: Any) -> KvGroupManager:
    scenario = parse_scenario(
        {
            "name": "kv",
            "workload": {"preset": "bimodal", "synth": {"duration_s": 60}},
            "hardware": {"model": model, "gpu": "a100-80gb", "kv_capacity_tokens": 200_000},
            "allocator": {"kind": kind, **allocator},
        }
    )
    parts = build_parts(scenario)
    a = parts.allocator.build(parts.spec)
    assert isinstance(a, KvGroupManager)
    return a


def test_the_group_size_is_vllms() -> None:
    assert group_size_of([10, 52]) == 10  # Gemma 3: the full layers
    assert group_size_of([12, 13]) == 13  # gpt-oss-20b + eagle (vLLM's example): the most
    assert group_size_of([18, 18]) == 18


def test_gemma_3_27b_gets_7_groups_of_10_layers_with_8_padding() -> None:
    # config: 62 layers, every 6th full (10 full, 52 sliding), window 1,024, 16 KV heads
    # of 128, bf16: 2 x 16 x 128 x 2 = 8,192 bytes per token per layer.
    a = _built("gemma-3-27b", "hybrid_kv")
    groups = a.layout.groups
    assert len(groups) == 1 + 6  # ceil(10 / 10) full, ceil(52 / 10) sliding
    assert [g.window_tokens for g in groups] == [0] + [1024] * 6
    assert groups[-1].real_bytes_per_token == 2 * 8192  # the last sliding group: 2 real
    assert groups[-1].padding_bytes_per_block == 8 * 16 * 8192  # and 8 padding layers
    (pool,) = a.layout.pools
    assert pool.block_bytes == 10 * 16 * 8192
    assert pool.num_blocks == 200_000 * 62 * 8192 // (10 * 16 * 8192)


def test_nemotron_h_state_pushes_the_attention_block_to_528_tokens() -> None:
    # config: 24 Mamba-2 layers and 4 attention layers (8 KV heads of 4096 / 32 = 128).
    # One layer's state: conv (4 - 1) x (128 x 64 + 2 x 8 x 128) + SSM 128 x 64 x 128
    # elements, bf16 = 2,158,592 bytes; one attention token-layer: 2 x 8 x 128 x 2 = 4,096.
    state, per_token = 2 * (3 * (128 * 64 + 2 * 8 * 128) + 128 * 64 * 128), 4096
    assert state == 2_158_592
    a = _built("nemotron-h-8b", "hybrid_kv")
    block_tokens = 16 * -(-state // (16 * per_token))
    assert block_tokens == 528
    attention = [g for g in a.layout.groups if not g.state_blocks]
    mamba = [g for g in a.layout.groups if g.state_blocks]
    assert [g.block_tokens for g in attention] == [528]  # group size min(4, 24) = 4
    assert len(mamba) == 6 and all(g.state_blocks == 1 for g in mamba)
    block = 4 * 528 * per_token
    assert a.layout.pools[0].block_bytes == block
    assert mamba[0].padding_bytes_per_block == block - 4 * state  # the padded state page


def test_vllm_frees_the_window_reserve_after_the_prefill() -> None:
    a = _built("gemma-3-27b", "hybrid_kv", prefill_chunk_tokens=8192)
    assert a.allocate(1, 20_000) is not None
    cap = -(-(1024 - 1 + 8192) // 16) + 1  # vLLM's admission cap: 577 blocks
    assert a.table_blocks(1) == (1250,) + (cap,) * 6
    assert a.kv_waste().window_reserve > 0
    assert a.headroom_tokens(1) == 0  # the next token gives the reserve back
    assert a.extend(1, 1)
    # 20,001 tokens: ceil(20001 / 16) - (20001 - 1024) // 16 = 1251 - 1186 blocks
    assert a.table_blocks(1) == (1251,) + (65,) * 6
    assert a.kv_waste().window_reserve == 0
    s = a.stats()
    slot = a.spec.kv_bytes_per_token  # 62 layers of 8,192 bytes
    assert s.used_tokens == (20_001 * 10 + 1024 * 52) * 8192 // slot


def _split(capacity_tokens: int) -> KvGroupManager:
    # 2 attention layers of 64 bytes a token, a Mamba layer of 6,400 bytes a request
    spec = PoolSpec(
        capacity_tokens,
        kv_bytes_per_token=128,
        layer_kinds=(
            LayerKindSpec("full_attention", 2, 64),
            LayerKindSpec("mamba", 1, state_bytes_per_layer=6_400),
        ),
    )
    a = parse_allocator({"kind": "split_pools", "mamba_full_memory_ratio": 1.0}).build(spec)
    assert isinstance(a, KvGroupManager)
    return a


def test_sglang_strands_the_kv_pool_when_the_state_pool_runs_out() -> None:
    a = _split(10_000)  # 1.28 MB: half KV (5,000 tokens), half state (100 requests)
    assert a.pool_free_blocks_by_name() == {"full": 5_000, "state": 100}
    for rid in range(100):  # short requests exhaust the state pool first
        assert a.allocate(rid, 10) is not None
    s = a.stats()
    assert s.free_tokens == 4_000 * 128 // 128  # 4,000 KV slots free...
    assert s.largest_free_extent_tokens == 0  # ...none usable: the state pool is empty
    assert s.largest_contiguous_free_block_ratio == 0.0
    assert a.allocate(100, 10) is None
    failure = a.last_failure()
    assert failure is not None and failure.cause == "fragmentation"
    assert a.kv_waste().stranded == s.free_tokens


def test_sglang_long_requests_strand_the_state_pool() -> None:
    a = _split(10_000)
    assert a.allocate(1, 4_990) is not None
    assert a.allocate(2, 100) is None  # the KV pool (5,000 tokens) is the bottleneck
    failure = a.last_failure()
    assert failure is not None and failure.cause == "fragmentation"
    s = a.stats()
    assert s.largest_free_extent_tokens == 10_000 * 10 // 5_000  # capacity x 10 / 5,000 free
    assert a.kv_waste().stranded == s.free_tokens - s.largest_free_extent_tokens


def test_tensorrt_splits_by_window_and_reserves_the_final_length() -> None:
    spec = PoolSpec(
        100_000,
        kv_bytes_per_token=4 * 64,
        max_seq_tokens=8_192,
        layer_kinds=(
            LayerKindSpec("full_attention", 2, 64),
            LayerKindSpec("sliding_attention", 2, 64, 1_024),
        ),
    )
    a = parse_allocator({"kind": "window_pools", "tokens_per_block": 32}).build(spec)
    assert isinstance(a, KvGroupManager)
    full, window = a.layout.pools
    # shares by window x bytes per token: 8,192 : 1,024 of 25.6 MB
    total = 100_000 * 256
    assert full.num_blocks == total * 8192 // (8192 + 1024) // (32 * 128)
    assert window.num_blocks == total * 1024 // (8192 + 1024) // (32 * 128)
    assert a.allocate(1, 100, reserve_tokens=3_000) is not None
    assert a.table_blocks(1) == (-(-3_000 // 32), 1024 // 32 + 1)  # window capped
    assert a.headroom_tokens(1) == 94 * 32 - 100
    assert a.kv_waste().reserved_ahead > 0


@pytest.mark.parametrize("kind", kv_manager_kinds())
def test_a_uniform_model_is_one_full_pool(kind: str) -> None:
    a = _built("llama-3.1-8b", kind)
    assert len(a.layout.pools) == 1 and len(a.layout.groups) == 1
    assert a.allocate(1, 1_000) is not None
    assert a.stats().used_tokens == 1_000
    assert a.stats().largest_contiguous_free_block_ratio == 1.0
