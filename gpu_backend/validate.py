"""Validate the calibrated simulator against the replay of the same trace.

* Latency: the simulator (``sim.run`` with the calibration) and the device replay
  (:func:`gpu_backend.replay.replay`) on the same trace; per request the relative error
  of TTFT, TPOT and end-to-end time (MAPE, p50, p99 of ``|sim - replay| / replay``, over
  requests ``ok`` in both), and per replayed step the calibration's prediction against
  the measured time (warm-up steps excluded).
* Memory, paged: the simulator's scheduler and allocator driven on the replay's measured
  clock (:func:`gpu_backend.replay.lockstep_blocks`) must plan the same steps and hold
  exactly the blocks the device pool holds, step by step (an AssertionError otherwise).
* Memory, contiguous baseline: the simulator's ``caching`` allocator model against
  torch's CUDA caching allocator holding the same per-request tensors
  (:func:`contiguous_baseline`, with and without ``expandable_segments``, each in a
  subprocess because ``PYTORCH_CUDA_ALLOC_CONF`` is read once); on CPU it is reported as
  not measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

import sim
import traces
from gpu_backend.kv_pool import ContiguousKV
from gpu_backend.model import DecoderStack, ModelShape
from gpu_backend.replay import ReplayResult, lockstep_blocks, replay
from gpu_backend.snapshot import pick_stats, summarize_snapshot
from policies.allocators.base import PoolSpec
from sim.models.hardware import MODELS
from sim.simulate.columns import make_groups
from sim.simulate.parts import build_parts


def scenario_dict(
    trace: str | Path,
    calibration: str | Path,
    shape: ModelShape,
    *,
    kv_capacity_tokens: int,
    block_size: int = 16,
    max_seq_tokens: int | None = None,
    scheduler: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A one-replica scenario: the trace, the model (its preset, or inline for a custom
    shape), the ``paged`` allocator over ``kv_capacity_tokens`` and the calibration
    (``check_hardware: false``: the replay's pool is sized by hand)."""
    if shape.name in MODELS and max_seq_tokens is None:
        model: Any = shape.name
    else:
        per_layer = shape.hidden_size * (
            (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim
            + shape.num_heads * shape.head_dim
            + 3 * shape.intermediate_size
        )
        model = {
            "name": shape.name,
            "num_layers": shape.num_layers,
            "num_kv_heads": shape.num_kv_heads,
            "head_dim": shape.head_dim,
            "num_params": shape.num_layers * per_layer,
            "hidden_size": shape.hidden_size,
            "max_seq_tokens": max_seq_tokens or MODELS[shape.name].max_seq_tokens,
        }
    return {
        "name": "gpu-validate",
        "mode": "exact",
        "workload": {"trace": str(trace)},
        "hardware": {"model": model, "gpu": "h200-141gb", "kv_capacity_tokens": kv_capacity_tokens},
        "allocator": {"kind": "paged", "block_size_tokens": block_size},
        "scheduler": scheduler or {},
        "latency": {"kind": "calibrated", "path": str(calibration), "check_hardware": False},
    }


def error_stats(predicted: Any, measured: Any) -> dict[str, float | int]:
    """MAPE, p50 and p99 of ``|predicted - measured| / measured`` (fractions)."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    keep = np.isfinite(p) & np.isfinite(m) & (m > 0)
    if not keep.any():
        return {"n": 0}
    err = np.abs(p[keep] - m[keep]) / m[keep]
    return {
        "n": int(keep.sum()),
        "mape": float(err.mean()),
        "p50": float(np.percentile(err, 50)),
        "p99": float(np.percentile(err, 99)),
    }


def request_times(frame: pd.DataFrame) -> pd.DataFrame:
    """TTFT, TPOT (over the tokens after the first; NaN for one-token outputs) and
    end-to-end seconds of the ``ok`` requests, by request id."""
    ok = frame[frame["status"] == "ok"].set_index("request_id")
    after_first = (ok["generated_tokens"] - 1).where(ok["generated_tokens"] > 1)
    return pd.DataFrame(
        {
            "ttft_s": ok["first_token_s"] - ok["arrival_s"],
            "tpot_s": (ok["finish_s"] - ok["first_token_s"]) / after_first,
            "e2e_s": ok["finish_s"] - ok["arrival_s"],
        }
    )


def check_lockstep(requests: pd.DataFrame, parts: Any, result: ReplayResult) -> int:
    """Assert that the simulator's scheduler plans the replay's steps and holds its
    blocks, step by step; returns the steps compared."""
    rows = lockstep_blocks(requests, parts, [s.measured_s for s in result.steps])
    assert len(rows) == len(result.steps), (
        f"{len(rows)} planned steps, {len(result.steps)} replayed"
    )
    for s, (p, d, k, blocks) in zip(result.steps, rows, strict=True):
        assert (p, d, k, blocks) == (
            s.prefill_tokens,
            s.decode_seqs,
            s.kv_tokens,
            s.blocks_in_use,
        ), (
            f"step {s.index}: simulator (prefill {p}, decode {d}, kv {k}, blocks {blocks}) vs "
            f"replay {s}"
        )
    return len(rows)


def validate(
    requests: pd.DataFrame,
    scenario: Any,
    stack: DecoderStack,
    *,
    warmup_steps: int = 3,
    contiguous: bool = True,
) -> tuple[dict[str, Any], ReplayResult]:
    """The validation report (module doc) and the replay it compared with."""
    parts = build_parts(scenario, requests)
    simulated = sim.run(scenario, requests).requests
    result = replay(requests, parts, stack, warmup_steps=warmup_steps)
    compared = check_lockstep(requests, parts, result)
    steps = result.steps_frame()
    timed = steps[~steps["warmup"]]
    predicted = parts.latency.step_times_s(
        timed["prefill_tokens"].to_numpy(),
        timed["decode_seqs"].to_numpy(),
        timed["kv_tokens"].to_numpy(),
    )
    sim_t, rep_t = request_times(simulated), request_times(result.requests)
    both = sim_t.merge(rep_t, left_index=True, right_index=True, suffixes=("_sim", "_replay"))
    report: dict[str, Any] = {
        "requests": len(requests),
        "ok": {
            "simulated": int((simulated["status"] == "ok").sum()),
            "replayed": int((result.requests["status"] == "ok").sum()),
        },
        "steps": len(result.steps),
        "kernels": result.kernels,
        "layers_run": result.layers_run,
        "ttft": error_stats(both["ttft_s_sim"], both["ttft_s_replay"]),
        "tpot": error_stats(both["tpot_s_sim"], both["tpot_s_replay"]),
        "e2e": error_stats(both["e2e_s_sim"], both["e2e_s_replay"]),
        "step_time": error_stats(predicted, timed["measured_s"]),
        "paged_blocks": {
            "steps_compared": compared,
            "identical": True,
            "peak_blocks": int(steps["blocks_in_use"].max()) if len(steps) else 0,
        },
    }
    if contiguous:
        report["contiguous"] = contiguous_report(
            requests, scenario, stack.shape, stack.layers_run, stack.dtype, stack.device
        )
    return report, result


# -- the contiguous baseline ---------------------------------------------------------------


def contiguous_baseline(
    requests: pd.DataFrame,
    scenario: Any,
    shape: ModelShape,
    layers: int,
    dtype: torch.dtype,
    device: torch.device,
    expandable: bool,
) -> dict[str, Any]:
    """Drive the scheduler over the ``caching`` allocator model (the scenario's pool,
    ``expandable_segments`` as given) with the calibrated step times, and hold each live
    sequence's reserved tokens as one contiguous tensor of ``layers`` layers on
    ``device``: the model's and (on CUDA) torch's view of the same allocation sequence.
    Bytes per token are those of the layers held; the model's pool is the same bytes."""
    from gpu_backend.replay import drive

    kv = ContiguousKV(layers, shape.num_kv_heads, shape.head_dim, dtype=dtype, device=device)
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["allocator"] = {"kind": "caching", "expandable_segments": expandable}
    parts = build_parts(sim.parse_scenario(data), requests)
    spec = PoolSpec(
        capacity_tokens=parts.spec.capacity_tokens,
        kv_bytes_per_token=kv.bytes_per_token(),
        max_seq_tokens=parts.spec.max_seq_tokens,
        num_layers=layers,
    )
    allocator = parts.allocator.build(spec)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(device).total_memory
        cap = spec.capacity_tokens * kv.bytes_per_token() + torch.cuda.memory_allocated(device)
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
    peaks: dict[str, int | None] = {
        "model_free_bytes_min": None,
        "model_largest_free_bytes_at_min": None,
    }
    bpt = kv.bytes_per_token()

    def execute(step: Any, decoding: list[Any], index: int) -> tuple[float, int]:
        live = [s for g in decoding for s in g.seq_ids] + [
            s for g, _ in step.prefill_chunks for s in g.seq_ids
        ]
        kv.sync(allocator, live)
        st = allocator.stats()
        if (
            peaks["model_free_bytes_min"] is None
            or st.free_tokens * bpt < peaks["model_free_bytes_min"]
        ):
            peaks["model_free_bytes_min"] = st.free_tokens * bpt
            peaks["model_largest_free_bytes_at_min"] = st.largest_free_extent_tokens * bpt
        return parts.latency.step_time_s(step.prefill_tokens, step.decode_seqs, step.kv_tokens), 0

    groups = make_groups(requests)
    drive(parts.scheduler, allocator, groups, execute)
    refused = sum(g.status.startswith(("rejected-", "failed-")) for g in groups)
    out: dict[str, Any] = {
        "expandable_segments": expandable,
        "bytes_per_token": bpt,
        "pool_bytes": spec.capacity_tokens * bpt,
        **peaks,
        "model_refused_requests": refused,
        "tensor_failures": kv.failures,
    }
    if cuda:
        out["torch"] = pick_stats(torch.cuda.memory_stats(device))
        out["torch_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        out["snapshot"] = summarize_snapshot(torch.cuda.memory_snapshot()).__dict__
    return out


def contiguous_report(
    requests: pd.DataFrame,
    scenario: Any,
    shape: ModelShape,
    layers: int,
    dtype: torch.dtype,
    device: torch.device,
) -> dict[str, Any]:
    """Both settings of ``expandable_segments`` on CUDA, each in a fresh subprocess;
    on CPU: ``not measured on CPU``."""
    if device.type != "cuda":
        return {"measured": False, "note": "not measured on CPU"}
    out: dict[str, Any] = {"measured": True}
    for expandable in (False, True):
        job = {
            "trace": str(scenario.workload.trace),
            "scenario": scenario.model_dump(mode="json", exclude_none=True),
            "shape": shape.__dict__,
            "layers": layers,
            "dtype": str(dtype).removeprefix("torch."),
            "expandable": expandable,
        }
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": f"expandable_segments:{expandable}"}
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_backend.validate", json.dumps(job)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        key = "expandable" if expandable else "default"
        if proc.returncode:
            out[key] = {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
        else:
            out[key] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _main(argv: Sequence[str]) -> None:
    job = json.loads(argv[0])
    requests = traces.load(job["trace"])
    result = contiguous_baseline(
        requests,
        sim.parse_scenario(job["scenario"]),
        ModelShape(**job["shape"]),
        job["layers"],
        getattr(torch, job["dtype"]),
        torch.device("cuda"),
        job["expandable"],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
