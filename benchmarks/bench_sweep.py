"""Sweep wall time on 1, 2 and all workers over the same grid, as a speed-up over one
worker (issue 12's benchmark; target >= 1.8x on 2 workers, where 2 cores are free).

The grid: ``examples/sweeps/allocators.yaml`` (paged and best-fit allocators x two
arrival rates x 3 seeds: 12 runs of a 2-replica fleet over a bimodal workload,
lengthened to one hour so a run (about 2 s) outweighs a worker's start), run through :func:`sim.sweep.run_sweep` into a fresh folder each time (no run
is skipped). One JSON line per worker count: ``wall_s`` (median of ``repeats``) and
``speedup`` (1-worker wall / this wall), with ``cores`` (``os.cpu_count()``) beside:
on a shared machine the speed-up is what the free cores allow.

``--quick``: the grid at one seed (4 runs). Run: ``python -m benchmarks bench_sweep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from sim.sweep import load_sweep, run_sweep
from sim.sweep.spec import Sweep

SWEEP = Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "allocators.yaml"
TARGET_SPEEDUP_2 = 1.8
DURATION_S = 3600


def wall_s(sweep: Sweep, workers: int) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        start = time.perf_counter()
        result = run_sweep(sweep, out, workers=workers)
        elapsed = time.perf_counter() - start
        assert not result.failed, result.failed[0].error
        return elapsed
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    data = yaml.safe_load(SWEEP.read_text())
    data["base"]["workload"]["synth"]["duration_s"] = DURATION_S
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "sweep.yaml").write_text(yaml.safe_dump(data))
        sweep = load_sweep(Path(folder) / "sweep.yaml")
    if args.quick:
        sweep = Sweep(sweep.source, sweep.params, [t for t in sweep.tasks if t.replication == 0])
    cores = os.cpu_count() or 1
    base = None
    for workers in sorted({1, 2, cores}):
        wall = statistics.median(wall_s(sweep, workers) for _ in range(args.repeats))
        base = base or wall
        line = {
            "bench": f"sweep.workers_{workers}",
            "runs": len(sweep.tasks),
            "workers": workers,
            "cores": cores,
            "wall_s": round(wall, 3),
            "speedup": round(base / wall, 2),
        }
        if workers == 2:
            line["target_speedup"] = TARGET_SPEEDUP_2
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
