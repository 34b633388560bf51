"""vAttention-like allocator: page size conversion, on-demand mapping, copying forks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.allocators.base import PoolSpec
from policies.allocators.config import VmPagedConfig
from policies.allocators.registry import parse_allocator
from policies.allocators.vm_paged import VmPagedAllocator, page_tokens_for

LLAMA2_7B_KV_BYTES = 2 * 32 * 4096 * 2  # K and V x 32 layers x 4096 x fp16
LLAMA2_13B_KV_BYTES = 2 * 40 * 5120 * 2  # K and V x 40 layers x 5120 x fp16 = 819,200


def test_page_tokens_from_page_bytes_and_model() -> None:
    assert page_tokens_for(2 << 20, 64, LLAMA2_7B_KV_BYTES) == 256
    assert page_tokens_for(64 << 10, 64, LLAMA2_7B_KV_BYTES) == 8
    assert page_tokens_for(64 << 10, 2, 1 << 30) == 1  # never below one token


def test_pages_are_mapped_on_demand() -> None:
    a = VmPagedAllocator(PoolSpec(1_000), page_tokens=256)
    assert a.stats().capacity_tokens == 768  # three whole pages
    alloc = a.allocate(1, 10)
    assert alloc is not None and alloc.reserved_tokens == 256
    assert a.headroom_tokens(1) == 246 and a.blocks_to_extend(1, 247) == 1
    assert a.extend(1, 246) and a.pool_free_blocks() == 2
    assert a.extend(1, 1) and a.pool_free_blocks() == 1
    s = a.stats()
    assert (s.used_tokens, s.reserved_unused_tokens, s.free_tokens) == (257, 255, 256)
    assert s.largest_free_extent_tokens == 256 and s.free_extent_count == 1
    before = a.stats()
    assert not a.extend(1, 600)
    assert a.stats() == before and a.last_failure().cause == "capacity"  # type: ignore[union-attr]
    a.free(1)
    assert a.stats().free_tokens == 768
    with pytest.raises(KeyError):
        a.free(1)


def test_fork_copies_into_new_pages() -> None:
    a = VmPagedAllocator(PoolSpec(64), page_tokens=8)
    assert a.allocate(1, 20) is not None
    assert a.fork(1, 2)
    s = a.stats()
    assert s.shared_tokens == 0 and s.used_tokens == 40 and s.copied_tokens_total == 20
    assert a.allocate(3, 17) is None  # 3 pages needed, 2 left
    assert a.fork(2, 4) is False


def test_config_builds_from_the_model_bytes() -> None:
    config = parse_allocator({"kind": "vm_paged", "page_bytes": 64 << 10})
    assert isinstance(config, VmPagedConfig)
    alloc = config.build(PoolSpec(10_000, kv_bytes_per_token=LLAMA2_7B_KV_BYTES))
    assert alloc.pool_block_tokens == 8
    with pytest.raises(ValidationError):
        parse_allocator({"kind": "vm_paged", "page_bytes": 4096})
    with pytest.raises(ValueError, match="smaller than one"):
        VmPagedConfig().build(PoolSpec(100, kv_bytes_per_token=LLAMA2_7B_KV_BYTES))


@pytest.mark.parametrize(("tp", "page_tokens"), [(1, 204), (2, 409)])
def test_page_tokens_follow_the_layers_and_one_gpus_bytes(tp: int, page_tokens: int) -> None:
    # Llama-2-13B: 80 buffers (2 x 40 layers); a 2 MiB page per buffer holds
    # 2 MiB / (bytes per token per buffer on one GPU) tokens: 2 MiB * 80 / (819,200 / tp).
    spec = PoolSpec(
        100_000, kv_bytes_per_token=LLAMA2_13B_KV_BYTES, num_layers=40, tensor_parallel=tp
    )
    assert spec.gpu_kv_bytes_per_token == LLAMA2_13B_KV_BYTES // tp
    config = VmPagedConfig()
    assert config.buffers_per_token is None  # derived from the model
    assert config.page_tokens(spec) == page_tokens
    alloc = config.build(spec)
    assert alloc.pool_block_tokens == page_tokens
    assert alloc.stats().capacity_tokens == 100_000 // page_tokens * page_tokens


def test_tensor_parallelism_scales_pages_of_a_32_layer_model() -> None:
    spec = PoolSpec(100_000, kv_bytes_per_token=LLAMA2_7B_KV_BYTES, tensor_parallel=2)
    assert VmPagedConfig().page_tokens(spec) == 512  # half the bytes per GPU: twice the tokens


def test_explicit_buffers_per_token_overrides_the_model() -> None:
    spec = PoolSpec(100_000, kv_bytes_per_token=LLAMA2_13B_KV_BYTES, num_layers=40)
    assert VmPagedConfig(buffers_per_token=64).page_tokens(spec) == 163  # the old default
    with pytest.raises(ValidationError):
        VmPagedConfig(buffers_per_token=0)
