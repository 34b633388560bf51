"""The interpreter's traps: what passes on CPU and would still be wrong on a GPU.

1. bf16 ``tl.dot`` is computed wrongly by the interpreter (bf16 is stored as uint16
   and multiplied as integers): the attention launchers refuse bf16 there; on a GPU
   they take it.
2. The interpreter accepts ``tl.dot`` shapes the GPU compiler refuses (any dimension
   < 16): the launchers refuse ``head_dim``/``block_size`` < 16 and pad the packed
   query heads to 16 rows; a pre-run hook checks every dot dimension launched.
3. Out-of-bounds loads return garbage silently: NaN in every unowned slot and junk
   ids (-1, 2^31 - 1, -2^31) past the live blocks; outputs must be finite and equal.
4. 32-bit offsets wrap silently: a cache whose block ``2^24 + 1`` starts at element
   ``2^32 + 256``, which a 32-bit product wraps to block 1 (filled with NaN).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
triton = pytest.importorskip("triton", reason="the GPU backend needs triton (the gpu extra)")

import triton.language as tl  # noqa: E402

from gpu_backend.kernels import decode, prefill  # noqa: E402
from gpu_backend.kernels.decode import paged_decode  # noqa: E402
from gpu_backend.kernels.kv_write import write_kv  # noqa: E402
from gpu_backend.kernels.prefill import paged_prefill  # noqa: E402
from gpu_backend.kernels.problems import JUNK_IDS, make_paged_problem  # noqa: E402
from gpu_backend.kernels.reference import ref_paged_decode, ref_paged_prefill  # noqa: E402

pytestmark = pytest.mark.gpu

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# -- 1. bf16 -------------------------------------------------------------------------


@triton.jit
def _dot16(a_ptr, b_ptr, c_ptr):
    i = tl.arange(0, 16)
    a = tl.load(a_ptr + i[:, None] * 16 + i[None, :])
    b = tl.load(b_ptr + i[:, None] * 16 + i[None, :])
    tl.store(c_ptr + i[:, None] * 16 + i[None, :], tl.dot(a, b))


@pytest.mark.skipif(not INTERPRETED, reason="documents the interpreter's bf16 tl.dot")
def test_interpreter_bf16_dot_is_wrong() -> None:
    """Why bf16 is refused on CPU. If this starts failing, triton fixed the
    interpreter and ``checks.check_query`` can stop refusing bf16 there."""
    a = torch.randn(16, 16).bfloat16()
    b = torch.randn(16, 16).bfloat16()
    c = torch.empty(16, 16)
    _dot16[(1,)](a, b, c)
    assert not torch.allclose(c, a.float() @ b.float(), atol=0.1, rtol=0.1)


def _bf16_problem(device: str) -> tuple[Any, ...]:
    p = make_paged_problem([17, 40], 16, 2, 32, torch.bfloat16, device, seed=2)
    q = torch.randn((2, 4, 32), device=device).bfloat16()
    return q, p.k_cache, p.v_cache, p.block_tables, p.context_lens


@pytest.mark.skipif(not INTERPRETED, reason="the refusal holds under TRITON_INTERPRET=1 only")
def test_bf16_attention_is_refused_under_the_interpreter(device: str) -> None:
    q, k_cache, v_cache, block_tables, context_lens = _bf16_problem(device)
    with pytest.raises(
        ValueError, match=r"^q: bfloat16 attention is refused under TRITON_INTERPRET=1"
    ):
        paged_decode(q, k_cache, v_cache, block_tables, context_lens, 0.2)
    query_start_loc = torch.tensor([0, 1, 2], device=device)
    with pytest.raises(ValueError, match=r"^q: bfloat16 attention is refused"):
        paged_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, 0.2)


@pytest.mark.skipif(INTERPRETED, reason="bf16 attention runs on a GPU only")
def test_bf16_attention_on_gpu_equals_reference(device: str) -> None:
    args = (*_bf16_problem(device), 0.2)
    out = paged_decode(*args, num_splits=2)
    torch.testing.assert_close(out, ref_paged_decode(*args), atol=2e-2, rtol=2e-2)


# -- 2. dot shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(("block_size", "head_dim"), [(8, 32), (16, 8), (24, 32), (16, 48)])
def test_dot_dims_below_16_or_not_powers_of_two_are_refused(
    device: str, block_size: int, head_dim: int
) -> None:
    k_cache = torch.zeros((4, block_size, 1, head_dim), device=device)
    q = torch.zeros((1, 1, head_dim), device=device)
    tables = torch.zeros((1, 1), dtype=torch.int32, device=device)
    lens = torch.ones(1, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"^k_cache: (block_size|head_dim) .* power of two >= 16"):
        paged_decode(q, k_cache, k_cache, tables, lens, 1.0)


@pytest.fixture
def launched_constexprs() -> Iterator[list[dict[str, Any]]]:
    """The keyword (constexpr) arguments of every decode/prefill kernel launch."""
    seen: list[dict[str, Any]] = []

    def hook(*args: Any, **kwargs: Any) -> None:
        seen.append(kwargs)

    kernels = (decode._decode_split_kernel, prefill._prefill_kernel)
    for kernel in kernels:
        kernel.add_pre_run_hook(hook)
    yield seen
    for kernel in kernels:
        kernel.pre_run_hooks.remove(hook)


@pytest.mark.parametrize("group", [1, 2, 3])
def test_smallest_shapes_launch_dots_of_16(
    device: str, group: int, launched_constexprs: list[dict[str, Any]]
) -> None:
    """head_dim 16, block_size 16, one to three query heads per KV head: the packed
    heads are padded so that every tl.dot operand dimension is >= 16, and the results
    still equal the reference."""
    p = make_paged_problem([1, 16, 33], 16, 1, 16, torch.float32, device, seed=4)
    q = torch.randn((3, group, 16), device=device)
    args = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, 0.25)
    torch.testing.assert_close(paged_decode(*args), ref_paged_decode(*args), atol=1e-5, rtol=1e-5)
    query_start_loc = torch.tensor([0, 1, 2, 3], device=device)
    pargs = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, query_start_loc, 0.25)
    torch.testing.assert_close(
        paged_prefill(*pargs), ref_paged_prefill(*pargs), atol=1e-5, rtol=1e-5
    )
    decode_kw, prefill_kw = launched_constexprs
    assert decode_kw["GROUP_P"] >= 16
    assert prefill_kw["BLOCK_Q"] * prefill_kw["GROUP_P"] >= 16
    for kw in launched_constexprs:
        assert kw["BLOCK_SIZE"] >= 16 and kw["HEAD_DIM"] >= 16


# -- 3. out-of-bounds reads ------------------------------------------------------------


@pytest.mark.parametrize("table_dtype", [torch.int32, torch.int64], ids=str)
def test_unowned_slots_and_junk_ids_are_never_read(device: str, table_dtype: torch.dtype) -> None:
    """Lengths that end mid-block and on a block edge; more splits than blocks (empty
    splits); every unowned slot NaN and junk ids after the live blocks."""
    lengths = [1, 15, 16, 17]
    p = make_paged_problem(
        lengths, 16, 2, 32, torch.float32, device, seed=9, table_dtype=table_dtype
    )
    assert p.k_cache.isnan().any() and p.v_cache.isnan().any()
    assert int(p.block_tables[0, 1]) == JUNK_IDS[0] and int(p.block_tables[0, 2]) == JUNK_IDS[1]
    q = torch.randn((4, 4, 32), device=device)
    args = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, 0.2)
    ref = ref_paged_decode(*args)
    for num_splits in (1, 4):
        out = paged_decode(*args, num_splits=num_splits)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    query_start_loc = torch.tensor([0, 1, 9, 25, 42], device=device)
    q = torch.randn((42, 4, 32), device=device)
    pargs = (q, p.k_cache, p.v_cache, p.block_tables, p.context_lens, query_start_loc, 0.2)
    out = paged_prefill(*pargs)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_paged_prefill(*pargs), atol=1e-5, rtol=1e-5)


# -- 4. 64-bit offsets -----------------------------------------------------------------

#: Block ``FAR`` of a ``[FAR + 1, 16, 1, 16]`` cache starts at element 2^32 + 256; in
#: 32 bits ``FAR * 256`` wraps to 256, the start of block 1.
FAR = 2**24 + 1


@pytest.mark.slow
def test_offsets_past_2_to_the_32_do_not_wrap(device: str) -> None:
    """An fp16 cache of 2^32 + 256 elements (8 GiB) allocated with ``torch.empty``:
    untouched pages are never committed, so on CPU the test holds a few MiB of it
    (blocks 0, 1 and ``FAR``); on a GPU it is 8 GiB of device memory. K and V are the
    same tensor (allowed). Block 1 holds NaN: a wrapped offset reads it."""
    try:
        cache = torch.empty((FAR + 1, 16, 1, 16), dtype=torch.float16, device=device)
    except (RuntimeError, MemoryError) as err:
        pytest.skip(f"cannot reserve 8 GiB of address space for the cache: {err}")
    cache[1] = float("nan")
    k = torch.randn((20, 1, 16), device=device).half()
    # sequence 0: tokens 0..15 in block FAR, 16..19 in block 0
    slots = torch.cat([torch.arange(16) + FAR * 16, torch.arange(4)]).to(device)
    write_kv(k, k, cache, cache, slots)
    assert torch.equal(cache[FAR, :, 0], k[:16, 0]) and not cache[1].isfinite().any()
    tables = torch.tensor([[FAR, 0]], dtype=torch.int32, device=device)
    lens = torch.tensor([20], dtype=torch.int32, device=device)
    q = torch.randn((1, 1, 16), device=device).half()
    args = (q, cache, cache, tables, lens, 0.25)
    ref = ref_paged_decode(*args)
    torch.testing.assert_close(paged_decode(*args, num_splits=2), ref, atol=2e-3, rtol=2e-3)
    q_start = torch.tensor([0, 1], device=device)
    pargs = (q, cache, cache, tables, lens, q_start, 0.25)
    torch.testing.assert_close(
        paged_prefill(*pargs), ref_paged_prefill(*pargs), atol=2e-3, rtol=2e-3
    )
