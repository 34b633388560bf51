"""The cost of disaggregated prefill and decode per simulated request (issue 30): the
built-in ``seed-bimodal-disagg-*`` scenarios (the fleet seed's bimodal traffic on four
best-fit replicas, fast mode) run through the public path ``parse_scenario`` ->
``load_workload`` -> ``run``, one JSON line each:

- ``disagg.colocated``: four colocated replicas (the reference);
- ``disagg.1p3d`` and ``disagg.2p2d``: one prefill + three decode, two + two, over a
  200 Gb/s link. Each says ``wall_per_request_vs_colocated``: its simulation CPU seconds
  per request over the colocated run's (best of ``repeats`` each, measured in the same
  process, so a noisy machine does not decide it), and its SimPy events per request (a
  P/D request costs one SimPy timeout, its hand-off, plus one per refused hand-off: the
  decode replica reserves the KV and takes it in at its own step boundaries, no event).

Full case: one simulated day (about 34,600 requests); ``--quick``: two hours.

Run: ``python -m benchmarks bench_disagg [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from benchmarks.bench_engine import _capture_environments
from sim.build import engine_build
from sim.engine.simpy_adapter import events_processed
from sim.runner import run
from sim.scenario.builtin import builtin_data
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

CASES = ("colocated", "1p3d", "2p2d")
FULL_S = 86_400.0
QUICK_S = 7_200.0


def case(name: str, duration_s: float, repeats: int) -> dict[str, Any]:
    """One scenario's line (without the ratio to the colocated run)."""
    data = builtin_data(f"seed-bimodal-disagg-{name}")
    data["workload"]["synth"]["duration_s"] = duration_s  # type: ignore[index]
    scenario = parse_scenario(data, source=name)
    df = load_workload(scenario)
    wall_s: list[float] = []
    cpu_s: list[float] = []
    events = 0
    result = None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        with _capture_environments() as envs:
            result = run(scenario, df)
        wall_s.append(time.perf_counter() - t0)
        cpu_s.append(time.process_time() - c0)
        events = events_processed(envs[-1])
    assert result is not None
    requests = max(len(df), 1)
    fleet = result.summary.fleet
    line: dict[str, Any] = {
        "bench": f"disagg.{name}",
        "requests": len(df),
        "simulated_s": result.summary.engine.end_s,
        "wall_s_median": statistics.median(wall_s),
        "requests_per_wall_s": requests / statistics.median(wall_s),
        "cpu_s_best": min(cpu_s),
        "simpy_events_per_request": events / requests,
    }
    if fleet is not None and fleet.disagg is not None:
        line["transfers"] = fleet.disagg.transfers.started
        line["refusals"] = sum(fleet.disagg.refusals.values())
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="Two simulated hours.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per case.")
    args = parser.parse_args(argv)
    duration_s = QUICK_S if args.quick else FULL_S
    reference: dict[str, Any] | None = None
    for name in CASES:
        line = case(name, duration_s, max(1, args.repeats))
        if reference is None:
            reference = line
        else:
            per_request = line["cpu_s_best"] / line["requests"]
            line["wall_per_request_vs_colocated"] = per_request / (
                reference["cpu_s_best"] / reference["requests"]
            )
        line |= {"quick": args.quick, "engine_build": engine_build()}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
