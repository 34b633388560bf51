"""Timing helpers for the decode kernel and the device's copy bandwidth, called by
``fragsim gpu-bench`` and the device check script (never by the unit tests' timing).

Decode reads every cached K and V element once, so its achieved bandwidth is
``kv_bytes / kernel_s`` with ``kv_bytes = 2 * batch * context * kv_heads * head_dim *
itemsize``; the copy bandwidth is the ceiling to hold it to. Times are medians over
``iters`` runs after ``warmup`` runs: CUDA events on a GPU, ``time.perf_counter``
on CPU (the interpreter there: its times say nothing about a GPU).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from gpu_backend.kernels.problems import make_paged_problem
from gpu_backend.kernels.reference import ref_paged_decode


def time_s(fn: Callable[[], object], device: torch.device, iters: int, warmup: int) -> float:
    """Median seconds of one call of ``fn``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_decode(
    batch: int,
    context: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    num_splits: int = 1,
    iters: int = 20,
    warmup: int = 3,
    with_reference: bool = True,
) -> dict[str, Any]:
    """Time ``paged_decode`` on ``batch`` sequences of ``context`` tokens each (blocks in
    a shuffled order), beside ``scaled_dot_product_attention`` on the dense gathered
    K/V and, with ``with_reference``, the torch reference (slow: one sequence at a
    time). Returns the parameters, ``kv_bytes``, ``*_s`` medians and
    ``*_bytes_per_s`` bandwidths."""
    from gpu_backend.kernels.decode import paged_decode

    device = torch.device(device)
    problem = make_paged_problem(
        [context] * batch,
        block_size,
        kv_heads,
        head_dim,
        dtype,
        device,
        spare_blocks=0,
        poison=False,
    )
    q = torch.randn((batch, heads, head_dim), device=device).to(dtype)
    scale = head_dim**-0.5
    args = (q, problem.k_cache, problem.v_cache, problem.block_tables, problem.context_lens, scale)
    kv_bytes = (
        2 * batch * context * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
    )
    kernel_s = time_s(lambda: paged_decode(*args, num_splits=num_splits), device, iters, warmup)
    result: dict[str, Any] = {
        "batch": batch,
        "context_tokens": context,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "block_size": block_size,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "num_splits": num_splits,
        "kv_bytes": kv_bytes,
        "kernel_s": kernel_s,
        "kernel_bytes_per_s": kv_bytes / kernel_s,
    }
    if with_reference:
        result["reference_s"] = time_s(
            lambda: ref_paged_decode(*args), device, max(1, iters // 4), 1
        )
    # dense [batch, heads, context, head_dim], gathered once outside the timing
    group = heads // kv_heads
    k = torch.stack(problem.k_dense).transpose(1, 2).repeat_interleave(group, dim=1).contiguous()
    v = torch.stack(problem.v_dense).transpose(1, 2).repeat_interleave(group, dim=1).contiguous()
    q_dense = q[:, :, None, :]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    result["sdpa_s"] = time_s(lambda: sdpa(q_dense, k, v, scale=scale), device, iters, warmup)
    result["sdpa_bytes_per_s"] = kv_bytes / result["sdpa_s"]
    return result


def copy_bandwidth(
    device: torch.device | str, size_bytes: int | None = None, iters: int = 10
) -> dict[str, Any]:
    """Device-to-device copy of one large buffer (1 GiB on a GPU, 64 MiB on CPU by
    default); ``bytes_per_s`` counts the read and the write (``2 * size_bytes`` per
    copy), the way ``kv_bytes`` counts what decode moves."""
    device = torch.device(device)
    if size_bytes is None:
        size_bytes = 2**30 if device.type == "cuda" else 2**26
    src = torch.empty(size_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    copy_s = time_s(lambda: dst.copy_(src), device, iters, 2)
    return {
        "device": str(device),
        "size_bytes": size_bytes,
        "copy_s": copy_s,
        "bytes_per_s": 2 * size_bytes / copy_s,
    }
