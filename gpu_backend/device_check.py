"""The device check's steps (run by ``device_check.sh``): kernel benchmark, calibration,
validation replay, contiguous baseline; one table on stdout and ``device_check.json``
in ``--out`` (default ``$OUT`` or ``device_check_out``).

``--cpu --quick``: the same steps at tiny shapes on CPU (torch references for the model,
the interpreted Triton decode kernel for the benchmark), in under a minute."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sim
import traces


def _trace(
    path: Path, n: int, prompt: tuple[int, int], output: tuple[int, int], rate: float
) -> Path:
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    rows = [
        f"{i},{arrivals[i]:.6f},{rng.integers(*prompt)},{rng.integers(*output)}" for i in range(n)
    ]
    path.write_text("request_id,arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="device_check")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or "device_check_out")
    args = ap.parse_args(argv)

    from gpu_backend.calibrate import FULL_GRID, QUICK_GRID, calibrate, write_calibration
    from gpu_backend.device import select_kernels, steady_cpu_timing
    from gpu_backend.kernels.bench import bench_decode, copy_bandwidth
    from gpu_backend.model import TINY, DecoderStack, ModelShape
    from gpu_backend.validate import scenario_dict, validate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu" if args.cpu else "cuda")
    steady_cpu_timing(device)
    tiny = args.cpu or args.quick
    shape = TINY if args.cpu else ModelShape.preset("llama-3-8b")
    dtype = torch.float32 if args.cpu else torch.bfloat16
    rows: list[tuple[str, str]] = []
    result: dict[str, Any] = {}
    t0 = time.perf_counter()

    # 1. kernels: paged decode against a device copy, the torch reference and SDPA
    copy = copy_bandwidth(device, 1 << 22 if args.cpu else None)
    cases = [(2, 64)] if args.cpu else [(1, 8192), (64, 2048), (256, 4096)]
    bench = []
    for batch, context in cases:
        b = bench_decode(
            batch,
            context,
            shape.num_heads,
            shape.num_kv_heads,
            shape.head_dim,
            16,
            dtype,
            device,
            num_splits=1 if batch >= 64 else 8,
            iters=2 if args.cpu else 20,
            warmup=1 if args.cpu else 3,
        )
        bench.append(b)
        rows.append(
            (
                f"decode b={batch} ctx={context}",
                f"{b['kernel_s'] * 1e6:.0f} us, {b['kernel_bytes_per_s'] / 1e9:.1f} GB/s "
                f"({b['kernel_bytes_per_s'] / copy['bytes_per_s']:.0%} of copy); "
                f"ref {b['reference_s'] * 1e6:.0f} us, sdpa {b['sdpa_s'] * 1e6:.0f} us",
            )
        )
    rows.append(("copy bandwidth", f"{copy['bytes_per_s'] / 1e9:.1f} GB/s"))
    result["bench"], result["copy"] = bench, copy

    # 2. calibration
    kernels = select_kernels(device, "reference" if args.cpu else "auto")
    stack = DecoderStack(shape, 2, dtype=dtype, device=device, kernels=kernels)
    latency = calibrate(stack, QUICK_GRID if tiny else FULL_GRID)
    cal_path = write_calibration(latency, out / "calibration.json")
    fit = latency.calibration.fit
    c = latency.calibration.coefficients
    rows.append(
        (
            f"calibration ({shape.name}, 2 of {shape.num_layers} layers, {kernels.name})",
            f"r2 {fit.r2:.4f}, held-out mape {fit.mape:.1%}, {fit.samples} steps; "
            f"a {c.intercept_s * 1e3:.2f} ms, per kv token {c.per_kv_token_s * 1e9:.2f} ns",
        )
    )
    result["calibration"] = json.loads(cal_path.read_text())

    # 3. validation replay
    if args.cpu:
        trace = _trace(out / "trace.csv", 30, (8, 120), (2, 24), 250.0)
        capacity, max_seq, max_seqs = 1024, 512, 16
    else:
        n = 60 if args.quick else 400
        trace = _trace(out / "trace.csv", n, (64, 4096), (16, 512), 8.0)
        capacity, max_seq, max_seqs = 131072, None, 256
    scenario = sim.parse_scenario(
        scenario_dict(
            trace,
            cal_path,
            shape,
            kv_capacity_tokens=capacity,
            max_seq_tokens=max_seq,
            scheduler={"max_num_seqs": max_seqs},
        )
    )
    report, replayed = validate(traces.load(trace), scenario, stack)
    replayed.steps_frame().to_csv(out / "steps.csv", index=False)
    for key in ("ttft", "tpot", "e2e", "step_time"):
        e = report[key]
        rows.append(
            (
                f"validation {key} error",
                f"mape {e['mape']:.1%}, p50 {e['p50']:.1%}, p99 {e['p99']:.1%} (n={e['n']})"
                if e["n"]
                else "no samples",
            )
        )
    pb = report["paged_blocks"]
    rows.append(
        (
            "paged blocks, sim vs replay",
            f"identical over {pb['steps_compared']} steps (peak {pb['peak_blocks']})",
        )
    )

    # 4. contiguous baseline
    cont = report["contiguous"]
    if not cont["measured"]:
        rows.append(("contiguous baseline", cont["note"]))
    else:
        for key in ("default", "expandable"):
            r = cont[key]
            if "error" in r:
                rows.append((f"contiguous ({key})", f"failed: {r['error']}"))
                continue
            snap, st = r["snapshot"], r["torch"]
            rows.append(
                (
                    f"contiguous ({key})",
                    f"torch reserved peak {r['torch_peak_reserved_bytes'] / 2**30:.2f} GiB, "
                    f"largest inactive {snap['largest_inactive_bytes'] / 2**20:.0f} MiB, "
                    f"inactive split {st['inactive_split_bytes.all.current'] / 2**20:.0f} MiB, "
                    f"retries {st['num_alloc_retries']}, ooms {st['num_ooms']}, "
                    f"tensor failures {r['tensor_failures']}; model refused "
                    f"{r['model_refused_requests']}",
                )
            )
    result["validation"] = report
    rows.append(("wall time", f"{time.perf_counter() - t0:.0f} s"))
    (out / "device_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    width = max(len(k) for k, _ in rows)
    print(
        f"fragsim device check on {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'})"
    )
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
