"""The Triton kernels equal their torch references over a covering grid.

The grid is an L9 orthogonal array over (GQA group, num_splits, block_size, dtype):
every pair of values of two factors appears in some case, in 9 cases instead of 36.
Each case runs a batch of four lengths from {1, 15, 16, 17, 70, 128} (a window that
slides by one per case, so every length meets every group and every split count).
Every problem is poisoned (NaN in unowned slots, junk block ids past the live
blocks), so a kernel that reads what it should not fails here too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
pytest.importorskip("triton", reason="the GPU backend needs triton (the gpu extra)")

from gpu_backend.kernels.decode import paged_decode  # noqa: E402
from gpu_backend.kernels.kv_write import write_kv  # noqa: E402
from gpu_backend.kernels.prefill import paged_prefill  # noqa: E402
from gpu_backend.kernels.problems import make_paged_problem  # noqa: E402
from gpu_backend.kernels.reference import (  # noqa: E402
    ref_paged_decode,
    ref_paged_prefill,
    ref_write_kv,
)

pytestmark = pytest.mark.gpu

LENGTHS = (1, 15, 16, 17, 70, 128)
KV_HEADS = 2
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}


def _covering_cases() -> list[tuple[int, int, int, torch.dtype, tuple[int, ...], int]]:
    """L9(3^4): a, b, (a + b) % 3, (a + 2b) % 3 -> group, splits, block_size, dtype."""
    groups, splits = (1, 2, 4), (1, 2, 4)
    block_sizes = (16, 32, 16)
    dtypes = (torch.float32, torch.float16, torch.float32)
    cases = []
    for i in range(9):
        a, b = divmod(i, 3)
        lengths = tuple(LENGTHS[(i + k) % len(LENGTHS)] for k in range(4))
        head_dim = 64 if i % 2 else 32
        cases.append(
            (
                groups[a],
                splits[b],
                block_sizes[(a + b) % 3],
                dtypes[(a + 2 * b) % 3],
                lengths,
                head_dim,
            )
        )
    return cases


CASES = _covering_cases()
IDS = [
    f"g{g}-s{s}-bs{bs}-{str(dt).removeprefix('torch.')}-d{d}-len{'_'.join(map(str, ls))}"
    for g, s, bs, dt, ls, d in CASES
]


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    tol = TOLERANCE[expected.dtype]
    assert actual.dtype == expected.dtype
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize(
    ("group", "num_splits", "block_size", "dtype", "lengths", "head_dim"), CASES, ids=IDS
)
def test_decode_equals_reference(
    device: str,
    group: int,
    num_splits: int,
    block_size: int,
    dtype: torch.dtype,
    lengths: tuple[int, ...],
    head_dim: int,
) -> None:
    p = make_paged_problem(
        list(lengths), block_size, KV_HEADS, head_dim, dtype, device, seed=len(IDS)
    )
    q = torch.randn((len(lengths), KV_HEADS * group, head_dim), device=device).to(dtype)
    args = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, head_dim**-0.5)
    assert_close(paged_decode(*args, num_splits=num_splits), ref_paged_decode(*args))


def new_tokens(lengths: tuple[int, ...]) -> list[int]:
    """New tokens per sequence: all of it, a third, one, all, ... (a chunked prefill
    next to a first one and a single-token step)."""
    shares = (lambda n: n, lambda n: max(1, n // 3), lambda n: 1)
    return [shares[s % 3](n) for s, n in enumerate(lengths)]


@pytest.mark.parametrize(
    ("group", "num_splits", "block_size", "dtype", "lengths", "head_dim"), CASES, ids=IDS
)
def test_prefill_equals_reference(
    device: str,
    group: int,
    num_splits: int,
    block_size: int,
    dtype: torch.dtype,
    lengths: tuple[int, ...],
    head_dim: int,
) -> None:
    del num_splits  # prefill has no split-K
    p = make_paged_problem(list(lengths), block_size, KV_HEADS, head_dim, dtype, device, seed=7)
    counts = torch.tensor([0, *new_tokens(lengths)], device=device)
    query_start_loc = counts.cumsum(0).to(torch.int32)
    q = torch.randn((int(counts.sum()), KV_HEADS * group, head_dim), device=device).to(dtype)
    args = (
        q,
        p.k_cache,
        p.v_cache,
        p.block_tables,
        p.context_lens,
        query_start_loc,
        head_dim**-0.5,
    )
    assert_close(paged_prefill(*args), ref_paged_prefill(*args))


def test_prefill_skips_a_sequence_without_new_tokens(device: str) -> None:
    p = make_paged_problem([17, 40, 5], 16, KV_HEADS, 32, torch.float32, device, seed=3)
    query_start_loc = torch.tensor([0, 17, 17, 19], dtype=torch.int64, device=device)
    q = torch.randn((19, 4, 32), device=device)
    args = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, query_start_loc, 0.2)
    assert_close(paged_prefill(*args), ref_paged_prefill(*args))


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_write_kv_equals_reference(device: str, block_size: int, dtype: torch.dtype) -> None:
    """bf16 too: the write copies bits, which the interpreter does right."""
    num_blocks, kv_heads, head_dim, tokens = 9, 3, 32, 40
    gen = torch.Generator().manual_seed(block_size)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens].to(device)
    k = torch.randn((tokens, kv_heads, head_dim), generator=gen).to(dtype).to(device)
    v = torch.randn((tokens, kv_heads, head_dim), generator=gen).to(dtype).to(device)
    caches = [
        torch.full(
            (num_blocks, block_size, kv_heads, head_dim), float("nan"), dtype=dtype, device=device
        )
        for _ in range(4)
    ]
    write_kv(k, v, caches[0], caches[1], slots)
    ref_write_kv(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0].float().nan_to_num(7.0), caches[2].float().nan_to_num(7.0))
    assert torch.equal(caches[1].float().nan_to_num(7.0), caches[3].float().nan_to_num(7.0))


def test_write_then_prefill_then_decode(device: str) -> None:
    """The replay's order: write the new tokens' K/V, prefill them, write one more
    token, decode it; each step equals the reference's."""
    block_size, kv_heads, head_dim, group = 16, 2, 32, 2
    p = make_paged_problem([20, 33], block_size, kv_heads, head_dim, torch.float32, device, seed=5)
    k_ref, v_ref = p.k_cache.clone(), p.v_cache.clone()
    # 6 new tokens for sequence 0 (positions 14..19), 1 for sequence 1 (position 32)
    positions = [(0, t) for t in range(14, 20)] + [(1, 32)]
    table = p.block_tables.to(torch.int64)
    slots = torch.tensor(
        [int(table[s, t // block_size]) * block_size + t % block_size for s, t in positions],
        device=device,
    )
    k_new = torch.randn((len(positions), kv_heads, head_dim), device=device)
    v_new = torch.randn((len(positions), kv_heads, head_dim), device=device)
    write_kv(k_new, v_new, p.k_cache, p.v_cache, slots)
    ref_write_kv(k_new, v_new, k_ref, v_ref, slots)
    q = torch.randn((len(positions), kv_heads * group, head_dim), device=device)
    query_start_loc = torch.tensor([0, 6, 7], device=device)
    out = paged_prefill(
        q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, query_start_loc, 0.3
    )
    ref = ref_paged_prefill(q, k_ref, v_ref, p.block_tables, p.context_lens, query_start_loc, 0.3)
    assert_close(out, ref)
    q1 = torch.randn((2, kv_heads * group, head_dim), device=device)
    out1 = paged_decode(q1, p.k_cache, p.v_cache, p.block_tables, p.context_lens, 0.3, num_splits=2)
    assert_close(out1, ref_paged_decode(q1, k_ref, v_ref, p.block_tables, p.context_lens, 0.3))
