"""The launchers' input checks: the kernels do no bounds checks, so everything they
would read out of bounds is refused here, in Python, before a launch.

Every refusal is a ``ValueError`` whose message starts with the argument's name and
says what was expected. The checks that read tensor values (block ids, lengths,
slots) synchronise with the device; they are cheap next to a launch at the sizes the
replay uses.

Two rules come from the Triton compiler rather than from the layout:

- ``tl.dot`` needs every dimension >= 16 on the GPU (the interpreter accepts less and
  would hide the bug), so ``head_dim`` and ``block_size`` must be powers of two >= 16;
  the packed query heads are padded to 16 by the launchers themselves.
- Under ``TRITON_INTERPRET=1`` the interpreter stores bf16 as uint16 and its
  ``tl.dot`` multiplies those integers, so bf16 attention is refused there (bf16
  ``write_kv`` is a copy of bits and is allowed). On a GPU bf16 is accepted.
"""

from __future__ import annotations

import math

import torch

#: The cache dtypes the kernels accept.
KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: The dtypes accepted for block tables, lengths and offsets.
INDEX_DTYPES = (torch.int32, torch.int64)


def is_interpreted(kernel: object) -> bool:
    """Whether ``kernel`` (a ``triton.jit`` function) runs under the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def _fail(name: str, message: str) -> ValueError:
    return ValueError(f"{name}: {message}")


def is_pow2_at_least_16(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def check_device(interpreted: bool, **tensors: torch.Tensor) -> None:
    """All tensors on one device, and the one Triton is running for: CPU under the
    interpreter, CUDA otherwise."""
    devices = {name: t.device for name, t in tensors.items()}
    first_name, first = next(iter(devices.items()))
    for name, device in devices.items():
        if device != first:
            raise _fail(name, f"expected device {first} (as {first_name}), got {device}")
    if interpreted and first.type != "cpu":
        raise _fail(
            first_name, f"TRITON_INTERPRET=1 runs kernels on CPU tensors, got device {first}"
        )
    if not interpreted and first.type != "cuda":
        raise _fail(
            first_name,
            f"Triton compiles for a GPU here, got device {first}; on a machine without "
            "CUDA set TRITON_INTERPRET=1 before importing triton",
        )


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """``(num_blocks, block_size, kv_heads, head_dim)`` of a valid K/V cache pair."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 4:
            raise _fail(
                name,
                f"expected 4 dims [num_blocks, block_size, kv_heads, head_dim], got shape {tuple(cache.shape)}",
            )
        if cache.dtype not in KV_DTYPES:
            raise _fail(name, f"expected dtype float16, bfloat16 or float32, got {cache.dtype}")
        if cache.stride(-1) != 1:
            raise _fail(
                name, f"expected head_dim contiguous (stride 1), got strides {cache.stride()}"
            )
    if v_cache.shape != k_cache.shape:
        raise _fail(
            "v_cache",
            f"expected the shape of k_cache {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}",
        )
    if v_cache.dtype != k_cache.dtype:
        raise _fail(
            "v_cache", f"expected the dtype of k_cache {k_cache.dtype}, got {v_cache.dtype}"
        )
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    if not is_pow2_at_least_16(block_size):
        raise _fail(
            "k_cache",
            f"block_size (dim 1) must be a power of two >= 16 (tl.dot on the GPU), got {block_size}",
        )
    if not is_pow2_at_least_16(head_dim):
        raise _fail(
            "k_cache",
            f"head_dim (dim 3) must be a power of two >= 16 (tl.dot on the GPU), got {head_dim}",
        )
    if num_blocks < 1 or kv_heads < 1:
        raise _fail(
            "k_cache", f"expected num_blocks >= 1 and kv_heads >= 1, got {tuple(k_cache.shape)}"
        )
    return num_blocks, block_size, kv_heads, head_dim


def check_query(q: torch.Tensor, k_cache: torch.Tensor, interpreted: bool) -> int:
    """The GQA group (query heads per KV head) of a valid ``[tokens, q_heads, head_dim]``
    query against a checked cache."""
    _, _, kv_heads, head_dim = k_cache.shape
    if q.dim() != 3:
        raise _fail("q", f"expected 3 dims [tokens, q_heads, head_dim], got shape {tuple(q.shape)}")
    if q.dtype != k_cache.dtype:
        raise _fail("q", f"expected the cache's dtype {k_cache.dtype}, got {q.dtype}")
    if interpreted and q.dtype == torch.bfloat16:
        raise _fail(
            "q",
            "bfloat16 attention is refused under TRITON_INTERPRET=1: the interpreter's "
            "tl.dot multiplies bf16 as uint16 bits; use float16/float32 on CPU, bf16 on a GPU",
        )
    if q.shape[2] != head_dim:
        raise _fail("q", f"expected head_dim {head_dim} (the cache's), got {q.shape[2]}")
    if q.stride(-1) != 1:
        raise _fail("q", f"expected head_dim contiguous (stride 1), got strides {q.stride()}")
    if q.shape[1] < 1 or q.shape[1] % kv_heads != 0:
        raise _fail(
            "q", f"q_heads must be a positive multiple of kv_heads {kv_heads}, got {q.shape[1]}"
        )
    return q.shape[1] // kv_heads


def check_index(name: str, t: torch.Tensor, dims: int, dtypes: tuple[torch.dtype, ...]) -> None:
    if t.dim() != dims:
        raise _fail(name, f"expected {dims} dims, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        raise _fail(name, f"expected dtype {names}, got {t.dtype}")


def check_block_tables(
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    batch: int,
    num_blocks: int,
    block_size: int,
) -> None:
    """Lengths in ``[1, max_blocks * block_size]``; the live block ids of every sequence
    (the first ``ceil(len / block_size)`` entries of its row) in ``[0, num_blocks)``.
    Entries past them are never read and may hold anything."""
    check_index("block_tables", block_tables, 2, INDEX_DTYPES)
    check_index("context_lens", context_lens, 1, INDEX_DTYPES)
    if block_tables.shape[0] != batch:
        raise _fail(
            "block_tables", f"expected {batch} rows (the batch), got {block_tables.shape[0]}"
        )
    if context_lens.shape[0] != batch:
        raise _fail(
            "context_lens", f"expected {batch} entries (the batch), got {context_lens.shape[0]}"
        )
    max_blocks = block_tables.shape[1]
    lens = context_lens.to(torch.int64)
    if batch == 0:
        return
    if int(lens.min()) < 1:
        raise _fail("context_lens", f"expected every length >= 1, got min {int(lens.min())}")
    if int(lens.max()) > max_blocks * block_size:
        raise _fail(
            "context_lens",
            f"expected every length <= max_blocks * block_size = {max_blocks} * {block_size}, "
            f"got max {int(lens.max())}",
        )
    live_blocks = (lens + block_size - 1) // block_size
    live = torch.arange(max_blocks, device=lens.device)[None, :] < live_blocks[:, None]
    ids = block_tables[live].to(torch.int64)
    bad = (ids < 0) | (ids >= num_blocks)
    if bool(bad.any()):
        raise _fail(
            "block_tables",
            f"expected live block ids in [0, {num_blocks}), got {int(ids[bad][0])}",
        )


def check_scale(scale: float) -> None:
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise _fail("scale", f"expected a finite float, got {scale!r}")


def attention_strides(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    out: torch.Tensor,
) -> tuple[int, ...]:
    """The strides the attention kernels take, in their order: ``q`` (token, head),
    ``k_cache`` and ``v_cache`` (block, row, head), ``block_tables`` (sequence, slot),
    ``out`` (token, head); the last dimension of each is contiguous (checked)."""
    return (
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        block_tables.stride(1),
        out.stride(0),
        out.stride(1),
    )
