"""The torch references held to an independent computation, so a wrong reference
fails here instead of blessing a wrong kernel: ``scaled_dot_product_attention`` on the
dense K/V a problem was built from (before they were scattered into blocks), and a
cache written token by token through ``ref_write_kv`` against the one the problem
scattered block by block."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")

from gpu_backend.kernels.problems import make_paged_problem  # noqa: E402
from gpu_backend.kernels.reference import (  # noqa: E402
    ref_paged_decode,
    ref_paged_prefill,
    ref_write_kv,
)

pytestmark = pytest.mark.gpu

F = torch.nn.functional


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """SDPA of ``q`` (``[n, q_heads, d]``, the last ``n`` positions) over ``k``/``v``
    (``[L, kv_heads, d]``), causal with the queries at the end; fp64."""
    n, length = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    visible = torch.ones((n, length), dtype=torch.bool).tril(diagonal=length - n)
    return F.scaled_dot_product_attention(
        q.double().transpose(0, 1),
        k.double().repeat_interleave(group, dim=1).transpose(0, 1),
        v.double().repeat_interleave(group, dim=1).transpose(0, 1),
        attn_mask=visible,
        scale=scale,
    ).transpose(0, 1)


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group", [1, 4])
def test_ref_decode_equals_dense_sdpa(block_size: int, group: int) -> None:
    lengths = [1, 16, 17, 128]
    p = make_paged_problem(lengths, block_size, 2, 32, torch.float32, seed=11)
    q = torch.randn((len(lengths), 2 * group, 32))
    out = ref_paged_decode(q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, 0.25)
    assert torch.isfinite(out).all()
    for s in range(len(lengths)):
        dense = dense_attention(q[s : s + 1], p.k_dense[s], p.v_dense[s], 0.25)[0]
        torch.testing.assert_close(out[s].double(), dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group", [1, 2])
def test_ref_prefill_equals_dense_sdpa(block_size: int, group: int) -> None:
    lengths, new = [15, 70, 128], [15, 9, 1]
    p = make_paged_problem(lengths, block_size, 2, 16, torch.float32, seed=12)
    query_start_loc = torch.tensor([0, 15, 24, 25])
    q = torch.randn((25, 2 * group, 16))
    out = ref_paged_prefill(
        q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, query_start_loc, 0.3
    )
    for s in range(len(lengths)):
        rows = slice(int(query_start_loc[s]), int(query_start_loc[s + 1]))
        dense = dense_attention(q[rows], p.k_dense[s], p.v_dense[s], 0.3)
        assert dense.shape[0] == new[s]
        torch.testing.assert_close(out[rows].double(), dense, atol=1e-5, rtol=1e-5)


def test_ref_write_kv_builds_the_problems_cache() -> None:
    """Writing every token of every sequence to ``table[t // bs] * bs + t % bs`` gives
    the cache the problem built by scattering padded blocks (NaN where nobody wrote)."""
    block_size = 16
    p = make_paged_problem([1, 17, 40], block_size, 2, 16, torch.float16, seed=13)
    k_cache = torch.full_like(p.k_cache, float("nan"))
    v_cache = torch.full_like(p.v_cache, float("nan"))
    for s, (k, v) in enumerate(zip(p.k_dense, p.v_dense, strict=True)):
        t = torch.arange(k.shape[0])
        slots = p.block_tables[s, t // block_size].to(torch.int64) * block_size + t % block_size
        ref_write_kv(k, v, k_cache, v_cache, slots)
    torch.testing.assert_close(k_cache, p.k_cache, equal_nan=True, atol=0, rtol=0)
    torch.testing.assert_close(v_cache, p.v_cache, equal_nan=True, atol=0, rtol=0)
