"""What a KV offload tier costs per simulated request (issue 30).

Three cases, each through the public path ``parse_scenario`` -> ``load_workload`` ->
``run``:

- ``offload.docs_fleet``: the built-in ``seed-docs-offload-host`` (four best-fit
  replicas, a 256 GiB host tier each, an hour at 1.5 requests/s, 30 % of requests
  re-reading one of 40 documents) against ``seed-docs-offload-gpu-only`` (the same
  without the tier), interleaved runs: wall-seconds of each (median), and the tier's
  cost per simulated request, ``(host - gpu_only) / requests``, in microseconds. The
  two runs do not simulate the same work (tier hits shorten prefills), so this is the
  cost of a tier as a user sees it, bookkeeping and changed schedule together.
- ``offload.tier_ops``: the tiers alone (``sim.engine.offload.OffloadTiers``): a store
  and a load of a 20,000-token prompt in 256-token chunks (78 chunks) on a host tier
  of best fit, over 40 prompts in a tier that holds 25 of them (half the accesses to
  10 hot prompts, half cycling over 30 cold ones: hits and evictions both):
  microseconds per load + store pair.

- ``offload.shared_store``: the same fleet with a best-fit remote tier (12.5 GB/s, 1
  ms) in place of the host tier: 256 GiB per replica in fast and in exact mode, and one
  shared store of 1 TiB (``shared: true``, exact mode only): wall-seconds of each
  (median) and microseconds per simulated request. A shared store's price is exact
  mode's, the first two runs' difference.

``--quick`` shrinks the fleets' hour ten-fold; ``--repeats N`` (default 3).
Run: ``python -m benchmarks bench_offload``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from sim.build import engine_build
from sim.engine.offload import OffloadTiers
from sim.runner import run
from sim.scenario.builtin import builtin_data
from sim.scenario.offload import OffloadConfig
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

HOST = "seed-docs-offload-host"
GPU_ONLY = "seed-docs-offload-gpu-only"


def _scenario(name: str, quick: bool) -> Any:
    data = builtin_data(name)
    if quick:
        synth = dict(data["workload"]["synth"])  # type: ignore[index]
        synth["duration_s"] = synth["duration_s"] / 10
        data["workload"] = {**data["workload"], "synth": synth}  # type: ignore[dict-item]
    return parse_scenario(data)


def docs_fleet(quick: bool, repeats: int) -> dict[str, Any]:
    scenarios = {name: _scenario(name, quick) for name in (GPU_ONLY, HOST)}
    requests = {name: load_workload(s) for name, s in scenarios.items()}
    times: dict[str, list[float]] = {GPU_ONLY: [], HOST: []}
    n = 0
    loaded = 0
    for _ in range(repeats):
        for name in (GPU_ONLY, HOST):
            t0 = time.perf_counter()
            result = run(scenarios[name], requests[name])
            times[name].append(time.perf_counter() - t0)
            n = result.summary.requests.total
            if result.summary.offload is not None:
                loaded = result.summary.offload.tiers[0].hits
    gpu_s, host_s = (statistics.median(times[name]) for name in (GPU_ONLY, HOST))
    return {
        "bench": "offload.docs_fleet",
        "requests": n,
        "tier_hits": loaded,
        "gpu_only_s": round(gpu_s, 4),
        "host_tier_s": round(host_s, 4),
        "tier_us_per_request": round((host_s - gpu_s) / n * 1e6, 2),
        "repeats": repeats,
    }


def _remote(quick: bool, mode: str, shared: bool) -> Any:
    data = builtin_data(HOST)
    if quick:
        synth = dict(data["workload"]["synth"])  # type: ignore[index]
        synth["duration_s"] = synth["duration_s"] / 10
        data["workload"] = {**data["workload"], "synth": synth}  # type: ignore[dict-item]
    data["mode"] = mode
    remote = {"kind": "remote", "bandwidth_gb_per_s": 12.5, "latency_s": 0.001}
    remote |= {"allocator": {"kind": "best_fit"}, "shared": shared}
    remote["capacity_gib"] = 1024 if shared else 256
    data["kv_offload"] = {**data["kv_offload"], "tiers": [remote]}  # type: ignore[dict-item]
    return parse_scenario(data)


def shared_store(quick: bool, repeats: int) -> dict[str, Any]:
    cases = {
        "per_replica_fast": _remote(quick, "fast", False),
        "per_replica_exact": _remote(quick, "exact", False),
        "shared_exact": _remote(quick, "exact", True),
    }
    requests = {name: load_workload(s) for name, s in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    hits: dict[str, int] = {}
    n = 0
    for _ in range(repeats):
        for name, scenario in cases.items():
            t0 = time.perf_counter()
            result = run(scenario, requests[name])
            times[name].append(time.perf_counter() - t0)
            n = result.summary.requests.total
            assert result.summary.offload is not None
            hits[name] = result.summary.offload.tiers[0].hits
    out: dict[str, Any] = {"bench": "offload.shared_store", "requests": n}
    for name in cases:
        median_s = statistics.median(times[name])
        out[f"{name}_s"] = round(median_s, 4)
        out[f"{name}_us_per_request"] = round(median_s / n * 1e6, 2)
        out[f"{name}_hits"] = hits[name]
    return out | {"repeats": repeats}


def tier_ops(repeats: int) -> dict[str, Any]:
    bpt = 524_288  # llama-2-7b
    prompt = 20_000
    config = OffloadConfig.model_validate(
        {
            "chunk_tokens": 256,
            "tiers": [
                {
                    "kind": "host",
                    "capacity_bytes": 25 * prompt * bpt,
                    "bandwidth_gb_per_s": 25.0,
                    "latency_s": 1e-5,
                    "allocator": {"kind": "best_fit"},
                }
            ],
        }
    )
    prompts = [[p * 10_000 + j for j in range(prompt // 16 + 1)] for p in range(40)]
    pairs = 400
    samples = []
    for _ in range(repeats):
        tiers = OffloadTiers(config.build(bpt, 32_768, 16))
        t0 = time.perf_counter()
        for i in range(pairs):
            # half the accesses to 10 hot prompts, half cycling over 30 cold ones
            hashes = prompts[(i // 2) % 10] if i % 2 == 0 else prompts[10 + (i // 2) % 30]
            tiers.load(hashes, 0, prompt - 1)
            tiers.store(hashes, prompt)
        samples.append((time.perf_counter() - t0) / pairs)
    tier = tiers.tiers[0]
    return {
        "bench": "offload.tier_ops",
        "chunks_per_prompt": prompt // 256,
        "us_per_store_and_load": round(statistics.median(samples) * 1e6, 2),
        "evictions": tier.evictions,
        "hits": tier.hits,
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for case in (
        lambda: docs_fleet(args.quick, args.repeats),
        lambda: tier_ops(args.repeats),
        lambda: shared_store(args.quick, args.repeats),
    ):
        print(json.dumps({**case(), "build": engine_build()}), flush=True)


if __name__ == "__main__":
    main()
