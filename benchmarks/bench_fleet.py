"""Simulated requests per wall-second and peak memory of the fleet simulator (the fleet
issue's benchmark), through the public path ``parse_scenario`` -> ``load_workload`` ->
``run`` (a scenario with a ``fleet:`` block runs the fleet as its traffic, ``sim.fleet.fleet``).

- ``fleet.azure_day_x16``: the Azure 2023 conversation trace rate-scaled x16 and tiled
  to one day (``workload: {rate_scale: 16, tile_to_s: 86400}``, about 7.6 M requests)
  on a fleet of 16 paged replicas (Llama-2-7B on A100-80GB, fast mode: each replica
  sees the load of ``engine.azure_conv_1d``'s single replica, so the two rates compare),
  router signals refreshed every 50 ms. One line per router:
  ``least_outstanding`` (target >= 100,000 simulated requests per wall-second) and
  ``least_kv_usage`` (target >= 50,000); peak memory <= 4 GiB for both. Skipped (one
  JSON line says why) when the trace folder is absent.
- ``fleet.single_reference``: one replica of the same kind on the x1 trace over the same
  span (the load each of the 16 replicas carries): ``engine.azure_conv_1d`` on the full
  case. Each ``fleet.azure_day_x16`` line then says ``ratio_to_single_replica``: its
  simulated requests per wall-second over the reference's (measured in the same
  ``make bench`` run, on each side's best CPU seconds, so a noisy machine does not
  decide it; the median wall ratio is beside it). With ``--quick`` the reference also
  runs in the fleet case's own process, once before each repeat and once after the
  last, and the ratio is taken against the best of those runs
  (``ratio_to_single_replica``; the separate process's is
  ``ratio_to_single_replica_separate``): on this shared machine the speed of both
  drifts by tens of percent within minutes, so a reference measured a minute earlier
  can decide the ratio by itself. Targets (issue 27): >= 0.8
  with ``least_outstanding``, >= 0.6 with ``least_kv_usage``, on the quick and the full
  case; the full day's peak RSS <= 4 GiB. SimPy events per request are reported, not
  bounded: SimPy's loop is the fleet's one loop, and each arrival time, client retry
  and replica decision is an event (``sim.fleet.loop``; an arrival run in place counts).
- ``fleet.seed_postmortem``: the built-in ``seed-postmortem`` scenario (six days), load
  and run; target under 60 s of wall time. Skipped, saying so, while that scenario is
  not part of the build measured.

Each case runs in its own child process, so ``peak_rss_mib`` (the child's
``ru_maxrss``: interpreter, imports, the request table and the run together) is that
case's alone; ``load_peak_rss_mib`` is the same reading taken after loading the
workload, before simulating. ``requests_per_wall_s`` is requests / simulation wall
seconds (loading apart), from the median of ``repeats`` runs; a run longer than 60 s
is not repeated. SimPy events per request are counted as ``bench_engine`` counts them.

``--quick``: the first 200,000 requests of the x16 trace tiled to one hour (and its
reference: the first 12,500 of the x1 trace over that hour), and the first tenth of the
post-mortem's requests (so ``make bench BENCH_ARGS=--quick`` stays short; the absolute
targets are checked on the full cases only, the ratios on both).

Run: ``python -m benchmarks bench_fleet [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.bench_engine import AZURE_CONV, DAY_S, NO_REPEAT_AFTER_S, _capture_environments
from sim.engine.simpy_adapter import events_processed
from sim.results.summary_model import Summary

ROUTER_TARGETS = {"least_outstanding": 100_000, "least_kv_usage": 50_000}
"""Simulated requests per wall-second the full ``fleet.azure_day_x16`` must reach."""
RATIO_TARGETS = {"least_outstanding": 0.8, "least_kv_usage": 0.6}
"""``fleet.azure_day_x16`` over the single replica at the same per-replica load."""
PEAK_RSS_TARGET_MIB = 4096
POSTMORTEM = "seed-postmortem"
POSTMORTEM_TARGET_WALL_S = 60.0
QUICK_REQUESTS = 200_000
REPLICAS = 16
QUICK_POSTMORTEM_SHARE = 0.1


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def single_reference_scenario(quick: bool) -> Any:
    """One replica of the fleet's kind on the x1 trace over the fleet case's span: the
    load each of its replicas carries."""
    from sim.scenario.schema import parse_scenario

    workload: dict[str, Any] = {"trace": str(AZURE_CONV)}
    if quick:
        workload |= {"tile_to_s": 3600.0, "max_requests": QUICK_REQUESTS // REPLICAS}
    else:
        workload["tile_to_s"] = DAY_S
    return parse_scenario(
        {
            "name": "azure-conv-single-reference",
            "workload": workload,
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
            "allocator": {"kind": "paged"},
            "mode": "fast",
        }
    )


def azure_fleet_scenario(router: str, quick: bool) -> Any:
    from sim.scenario.schema import parse_scenario

    workload: dict[str, Any] = {"trace": str(AZURE_CONV), "rate_scale": 16}
    if quick:
        workload |= {"tile_to_s": 3600.0, "max_requests": QUICK_REQUESTS}
    else:
        workload["tile_to_s"] = DAY_S
    return parse_scenario(
        {
            "name": f"azure-conv-x16-fleet-{router}",
            "workload": workload,
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
            "allocator": {"kind": "paged"},
            "mode": "fast",
            "fleet": {
                "pools": [{"name": "a100", "count": REPLICAS}],
                "router": {"kind": router},
                "router_refresh_s": 0.05,
            },
        }
    )


Reference = tuple[int, Callable[[], float]]
"""The single-replica reference's request count, and one run of it (its CPU seconds)."""


def _reference_runner(quick: bool) -> Reference:
    """The single-replica reference, its workload loaded once, now: one run per call of
    the function, which returns the run's CPU seconds. Interleaved with a fleet case's repeats in its process,
    so that the ratio compares runs made under the same conditions."""
    from sim.runner import run
    from sim.scenario.workload import load_workload

    scenario = single_reference_scenario(quick)
    requests = load_workload(scenario)

    def once() -> float:
        c0 = time.process_time()
        run(scenario, requests)
        return time.process_time() - c0

    return len(requests), once


def _measure(
    scenario: Any,
    repeats: int,
    share: float = 1.0,
    reference: Reference | None = None,
) -> dict[str, Any]:
    """Load ``scenario``'s workload once (its first ``share`` of requests), then run it
    up to ``repeats`` times; medians and the last run's counts. With ``reference``, one
    reference run before each repeat (and one after the last): its CPU seconds are
    ``reference_cpu_s_all``."""
    from sim.runner import run
    from sim.scenario.workload import load_workload

    t0 = time.perf_counter()
    requests = load_workload(scenario)
    if share < 1.0:
        requests = requests.iloc[: max(1, int(len(requests) * share))].reset_index(drop=True)
    load_s = time.perf_counter() - t0
    load_peak_mib = _peak_rss_mib()
    sim_s: list[float] = []
    cpu_s: list[float] = []
    reference_cpu_s: list[float] = []
    summary: Summary | None = None
    events = 0
    for _ in range(repeats):
        if reference is not None:
            reference_cpu_s.append(reference[1]())
        t1, c1 = time.perf_counter(), time.process_time()
        with _capture_environments() as envs:
            result = run(scenario, requests)
        sim_s.append(time.perf_counter() - t1)
        cpu_s.append(time.process_time() - c1)
        events = events_processed(envs[-1])
        summary = result.summary
        del result
        if sim_s[-1] > NO_REPEAT_AFTER_S:
            break
    if reference is not None:
        reference_cpu_s.append(reference[1]())
    assert summary is not None
    n = len(requests)
    sim_med = statistics.median(sim_s)
    engine = summary.engine
    line: dict[str, Any] = {
        "requests": n,
        "simulated_s": engine.end_s,
        "repeats": len(sim_s),
        "load_s": load_s,
        "sim_wall_s": sim_med,
        "sim_wall_s_all": sim_s,
        "requests_per_wall_s": n / sim_med,
        "requests_per_wall_s_best": n / min(sim_s),
        "sim_cpu_s": statistics.median(cpu_s),
        "sim_cpu_s_all": cpu_s,
        "requests_per_cpu_s": n / statistics.median(cpu_s),
        "requests_per_cpu_s_best": n / min(cpu_s),
        "steps_per_request": engine.steps / max(n, 1),
        "wakeups_per_request": engine.wakeups / max(n, 1),
        "simpy_events_per_request": events / max(n, 1),
        "load_peak_rss_mib": load_peak_mib,
        "peak_rss_mib": _peak_rss_mib(),
        "by_status": summary.requests.by_status,
    }
    if reference is not None:
        line["reference_requests"] = reference[0]
        line["reference_cpu_s_all"] = reference_cpu_s
    if len(sim_s) < repeats:
        line["note"] = (
            f"one run took > {NO_REPEAT_AFTER_S:.0f} s: {len(sim_s)} of {repeats} repeats taken"
        )
    return line


def case_azure(router: str, quick: bool, repeats: int) -> dict[str, Any]:
    name = "fleet.azure_day_x16"
    out: dict[str, Any] = {"bench": name, "router": router, "replicas": REPLICAS}
    if not AZURE_CONV.is_file():
        return {**out, "skipped": f"trace not found: {AZURE_CONV}"}
    # The quick case interleaves the single-replica reference with its repeats (the
    # full one's runs are minutes long, and its peak memory is its own).
    reference = _reference_runner(quick) if quick else None
    line = _measure(azure_fleet_scenario(router, quick), repeats, reference=reference)
    out |= {"allocator": "paged", "mode": "fast", "router_refresh_s": 0.05, **line}
    if not quick:
        target = ROUTER_TARGETS[router]
        out["target_requests_per_wall_s"] = target
        out["target_peak_rss_mib"] = PEAK_RSS_TARGET_MIB
        out["target_met"] = (
            line["requests_per_wall_s"] >= target and line["peak_rss_mib"] <= PEAK_RSS_TARGET_MIB
        )
    return out


def case_single(quick: bool, repeats: int) -> dict[str, Any]:
    name = "fleet.single_reference"
    if not AZURE_CONV.is_file():
        return {"bench": name, "skipped": f"trace not found: {AZURE_CONV}"}
    # Short runs: more repeats, so that the best of them is the code's cost.
    line = _measure(single_reference_scenario(quick), max(repeats, 7))
    return {"bench": name, "allocator": "paged", "mode": "fast", **line}


def case_postmortem(quick: bool, repeats: int) -> dict[str, Any]:
    from sim.scenario.builtin import builtin_names
    from sim.scenario.schema import load_scenario

    name = "fleet.seed_postmortem"
    if POSTMORTEM not in builtin_names():
        return {
            "bench": name,
            "skipped": f"built-in scenario {POSTMORTEM!r} not in this build "
            f"(sim/scenario/data/{POSTMORTEM}.yaml; rebuild after it lands)",
        }
    scenario = load_scenario(POSTMORTEM)
    share = QUICK_POSTMORTEM_SHARE if quick else 1.0
    t0 = time.perf_counter()
    line = _measure(scenario, 1 if not quick else repeats, share)
    total_s = time.perf_counter() - t0
    out: dict[str, Any] = {"bench": name, "share_of_requests": share, **line}
    out["total_wall_s"] = total_s
    if not quick:
        out["target_wall_s"] = POSTMORTEM_TARGET_WALL_S
        out["target_met"] = total_s < POSTMORTEM_TARGET_WALL_S
    return out


CASES = [("single", "")] + [("azure", r) for r in ROUTER_TARGETS] + [("postmortem", "")]


def _child(case: str, router: str, quick: bool, repeats: int) -> None:
    """One case in this (fresh) process: print its JSON line."""
    from sim.build import engine_build

    if case == "azure":
        line = case_azure(router, quick, repeats)
    elif case == "single":
        line = case_single(quick, repeats)
    else:
        line = case_postmortem(quick, repeats)
    print(json.dumps({**line, "quick": quick, "engine_build": engine_build()}), flush=True)


def with_ratio(line: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """A ``fleet.azure_day_x16`` line with its ratio to the single-replica reference
    measured in the same run, and whether the ratio target is met (``targets_met`` also
    holds the absolute ones on the full case)."""
    if reference is None or "requests_per_wall_s" not in reference:
        return line
    if "requests_per_wall_s" not in line:
        return line
    # The best CPU seconds of each side's repeats, not wall: other work on this shared
    # machine slows both runs' wall time, and contention slows some repeats' CPU time
    # too; the least each took is what its code costs (the median wall ratio is beside).
    # Where the reference ran interleaved in the fleet case's own process (--quick),
    # its best of those runs is the one compared; the separate reference's is beside it.
    separate = line["requests_per_cpu_s_best"] / reference["requests_per_cpu_s_best"]
    ratio = separate
    interleaved = line.get("reference_cpu_s_all")
    extra: dict[str, Any] = {}
    if interleaved:
        reference_best = line["reference_requests"] / min(interleaved)
        ratio = line["requests_per_cpu_s_best"] / reference_best
        extra = {
            "interleaved_reference_requests_per_cpu_s_best": reference_best,
            "ratio_to_single_replica_separate": separate,
        }
    wall_ratio = line["requests_per_wall_s"] / reference["requests_per_wall_s"]
    target = RATIO_TARGETS[line["router"]]
    met = ratio >= target
    return {
        **line,
        **extra,
        "single_reference_requests_per_cpu_s_best": reference["requests_per_cpu_s_best"],
        "single_reference_requests_per_wall_s": reference["requests_per_wall_s"],
        "ratio_to_single_replica": ratio,
        "ratio_to_single_replica_wall": wall_ratio,
        "target_ratio": target,
        "targets_met": met and line.get("target_met", True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="Short slices of each case.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per case (median).")
    parser.add_argument("--case", choices=["single", "azure", "postmortem"], help=argparse.SUPPRESS)
    parser.add_argument("--router", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        _child(args.case, args.router, args.quick, args.repeats)
        return 0
    failed = 0
    reference: dict[str, Any] | None = None
    for case, router in CASES:
        cmd = [sys.executable, "-m", "benchmarks.bench_fleet", "--case", case]
        cmd += ["--router", router, "--repeats", str(args.repeats)]
        cmd += ["--quick"] if args.quick else []
        proc = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            error = {"bench": f"fleet.{case}", "router": router, "error": f"exit {proc.returncode}"}
            print(json.dumps(error), flush=True)
            failed += 1
            continue
        for text in proc.stdout.splitlines():
            line = json.loads(text)
            if case == "single":
                reference = line
            elif case == "azure":
                line = with_ratio(line, reference)
            print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
