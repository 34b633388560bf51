"""Timing and kernel selection: the one place that knows CPU from CUDA.

* :func:`select_kernels` -- the Triton kernels (``gpu_backend.kernels``) when they import
  and can run here (on CUDA, or on CPU under ``TRITON_INTERPRET=1``), else the plain-torch
  references (``gpu_backend.kernels.reference``). Both have one signature per operation.
* :func:`time_s` -- the wall time of a callable on the device: CUDA events on CUDA
  (synchronised before and after), ``time.perf_counter`` on CPU.
* :func:`versions` -- provenance for calibration files and reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Kernels:
    """The attention operations a model layer calls (see ``gpu_backend.kernels``)."""

    name: str
    """``triton`` or ``reference``."""
    write_kv: Callable[..., Any]
    paged_decode: Callable[..., Any]
    paged_prefill: Callable[..., Any]


def triton_usable(device: torch.device) -> bool:
    """Triton kernels can run on ``device``: CUDA, or CPU under ``TRITON_INTERPRET=1``."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def select_kernels(device: torch.device, prefer: str = "auto") -> Kernels:
    """The Triton kernels where usable and importable (``prefer="auto"`` or
    ``"triton"``), else the torch references. ``prefer="reference"`` forces the latter.
    ``prefer="triton"`` where they cannot run raises RuntimeError."""
    from gpu_backend.kernels import reference

    if prefer != "reference" and triton_usable(device):
        try:
            from gpu_backend.kernels.decode import paged_decode
            from gpu_backend.kernels.kv_write import write_kv
            from gpu_backend.kernels.prefill import paged_prefill
        except ImportError as exc:
            if prefer == "triton":
                raise RuntimeError(f"Triton kernels not importable: {exc}") from None
        else:
            return Kernels("triton", write_kv, _with_splits(paged_decode, device), paged_prefill)
    elif prefer == "triton":
        raise RuntimeError(f"Triton kernels cannot run on {device} (set TRITON_INTERPRET=1)")
    return Kernels(
        "reference", reference.ref_write_kv, reference.ref_paged_decode, reference.ref_paged_prefill
    )


def _with_splits(paged_decode: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """``paged_decode`` with ``num_splits`` chosen so a small batch still fills the
    device: about two programs per streaming multiprocessor, at most 16 splits."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 1
    )

    def decode(q: torch.Tensor, k_cache: torch.Tensor, *args: Any) -> Any:
        programs = max(q.shape[0] * k_cache.shape[2], 1)
        splits = max(1, min(16, (2 * sms) // programs))
        return paged_decode(q, k_cache, *args, num_splits=splits)

    return decode


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_s(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds ``fn()`` takes on ``device``: CUDA events around it on CUDA (the queue is
    drained first, so earlier work is not counted), ``perf_counter`` on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time_s(
    fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1
) -> float:
    """The median of ``repeats`` timings after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = sorted(time_s(fn, device) for _ in range(max(repeats, 1)))
    return times[len(times) // 2]


def device_name(device: torch.device) -> str:
    """``NVIDIA H200`` on CUDA, ``cpu`` on CPU."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return "cpu"


_GPU_PRESET_BY_NAME = (
    ("H200", "h200-141gb"),
    ("H100", "h100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A100", "a100-80gb"),
    ("L4", "l4"),
    ("A10G", "a10g"),
)


def gpu_preset_name(device: torch.device) -> str:
    """The ``sim.models.hardware`` GPU preset the device is (a calibration file's ``gpu``), or
    its name lower-cased with spaces as dashes (``cpu`` on CPU)."""
    name = device_name(device)
    for part, preset in _GPU_PRESET_BY_NAME:
        if part in name:
            return preset
    return name.lower().replace(" ", "-")


def versions(device: torch.device) -> dict[str, str]:
    """torch, triton (or ``absent``), CUDA and the device's name."""
    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = "absent"
    return {
        "device": device_name(device),
        "torch": str(torch.__version__),
        "triton": triton_version,
        "cuda": str(torch.version.cuda or "none"),
    }


def steady_cpu_timing(device: torch.device) -> None:
    """On CPU, run torch on one thread: on a shared machine its thread pool's
    oversubscription makes the same step vary 100-fold (measured: 1.5-440 ms), one
    thread keeps it within a few percent. A no-op on CUDA."""
    if device.type == "cpu":
        torch.set_num_threads(1)
