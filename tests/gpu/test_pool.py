"""The paged KV pool's block tables and slot mappings, read from a paged allocator."""

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")

from gpu_backend.kv_pool import BlockMirror, PagedKVPool, allocator_blocks_in_use  # noqa: E402
from policies.allocators.base import PoolSpec  # noqa: E402
from policies.allocators.paged import PagedAllocator  # noqa: E402


def _alloc(blocks: int = 8) -> PagedAllocator:
    return PagedAllocator(
        PoolSpec(capacity_tokens=blocks * 4, kv_bytes_per_token=1), block_size_tokens=4
    )


def test_tables_follow_allocations_growth_and_frees() -> None:
    a, m = _alloc(), BlockMirror(8, 4)
    a.allocate(1, 6)
    a.allocate(2, 3)
    m.sync(a, [1, 2])
    assert [len(m.tables[1]), len(m.tables[2])] == [2, 1]
    assert len(set(m.tables[1]) | set(m.tables[2])) == 3
    a.extend(1, 3)  # 9 tokens: a third block
    m.sync(a, [1, 2])
    assert len(m.tables[1]) == 3 and m.blocks_in_use == allocator_blocks_in_use(a, 4) == 4
    t = m.tables[1]
    assert m.slots(1, 3, 3) == [t[0] * 4 + 3, t[1] * 4, t[1] * 4 + 1]
    a.free(1)
    m.sync(a, [2])
    assert 1 not in m.tables and m.blocks_in_use == 1


def test_fork_shares_blocks_and_copy_on_write_copies_the_last() -> None:
    a, m = _alloc(), BlockMirror(8, 4)
    a.allocate(1, 6)
    m.sync(a, [1])
    a.fork(1, 2)
    m.sync(a, [1, 2])
    assert m.tables[1] == m.tables[2] and m.blocks_in_use == 2
    a.extend(2, 1)  # writes into the shared, partly filled last block: a copy
    m.sync(a, [1, 2])
    assert m.tables[1][0] == m.tables[2][0] and m.tables[1][1] != m.tables[2][1]
    assert m.copies == [(m.tables[1][1], m.tables[2][1])]
    assert m.blocks_in_use == allocator_blocks_in_use(a, 4) == 3


def test_prefix_hits_map_to_the_same_physical_block() -> None:
    a, m = _alloc(), BlockMirror(8, 4)
    a.allocate(1, 8, prefix_hashes=(11, 12))
    a.allocate(2, 10, prefix_hashes=(11, 12, 13))
    m.sync(a, [1, 2])
    assert m.tables[2][:2] == m.tables[1] and m.blocks_in_use == allocator_blocks_in_use(a, 4) == 3


def test_pool_tensors_and_block_table_tensor() -> None:
    a = _alloc()
    pool = PagedKVPool(2, a.num_blocks, 4, 2, 8, dtype=torch.float32, device=torch.device("cpu"))
    assert pool.k[0].shape == (8, 4, 2, 8) and len(pool.v) == 2
    a.allocate(1, 9)
    a.allocate(2, 2)
    pool.sync(a, [1, 2])
    t = pool.block_tables([1, 2])
    assert t.dtype == torch.int32 and t.shape == (2, 3)
    assert t[0].tolist() == pool.mirror.tables[1] and t[1, 0].item() == pool.mirror.tables[2][0]
