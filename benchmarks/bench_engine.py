"""Simulated requests per wall-second of the replica engine (issue 4's benchmark).

Three cases, each through the public path ``parse_scenario`` -> ``load_workload`` ->
``run`` (load/tile time is measured apart from simulation time):

- ``engine.azure_conv_1d``: the Azure 2023 conversation trace tiled to one day
  (``workload.tile_to_s: 86400``), Llama-2-7B on A100-80GB, paged allocation, fast mode.
  Target: >= 100,000 simulated requests per wall-second. Skipped (one JSON line says
  why) when the trace folder is absent.
- ``engine.bimodal_6d``: the seed's bimodal mix, Poisson 0.1 req/s for six days,
  ``max_seq_tokens: 32768``, best-fit contiguous allocation, one replica, fast mode.
  Target: under 20 wall-seconds.
- ``engine.diurnal_chat_6d``: the ``diurnal-chat-6d`` preset (six days of diurnal
  chat traffic, about a million requests) on Llama-2-7B / A100-80GB, paged allocation,
  five-minute samples: the issue's "six days of one replica's traffic in seconds".
- ``engine.python_floor``: a reference, not the engine: the least per-request work of a
  continuous-batching replica in this interpreter (a paged allocate, one latency call
  for the prefill, a closed-form decode run, a finish-heap push and pop, the growth and
  free, a record row; no scheduler, no checks, no SimPy) on a steady synthetic stream.
  The engine's requests per second over this one says how much of its time is
  scheduling logic rather than the interpreter's floor: the line's
  ``azure_conv_1d_over_floor`` is ``engine.azure_conv_1d``'s median requests per
  wall-second over the floor's, both measured in this run (issue 27's target: >= 0.4,
  ``target_ratio``): the median of pairs measured back to back, one run of the engine's
  case and one of the floor per repeat (``..._interleaved_all``), as the machine's load
  moves both rates by tens of percent within minutes; the two lines' own medians'
  ratio is ``azure_conv_1d_over_floor_separate``. Measured on the compiled build, quick case, 5 repeats, load ~1.4
  on 2 cores, interleaved: 128-133k req/s over 803-864k = 0.154-0.159 at fc9f992 (135k
  over 848k = 0.159 on a quiet machine); 147-148k over 791-836k = 0.175-0.188 with
  columnar compiled request records, one-type frame columns, the decode ticks' O(B)
  steady bound and the latency model called natively. Then (load 2-2.5 on 2 cores,
  interleaved, against the build before): the run's outlet compiled, the driver a
  native base class and a single replica's records copied from its groups at close
  (``Records.keep_all``): the minimum CPU time of one run fell 314-340 -> 292 ms, of
  its simulation 244-256 -> 213 ms, while its outputs rose 36-39 -> 44-45 ms; this
  line's wall-time ratio could not tell the two builds apart (0.157/0.175 against
  0.156/0.173). Still short of 0.4.
- ``engine.bimodal_exact``: the same scenario over a 6-hour window in exact mode and in
  fast mode, in this process: the fast/exact speed ratio and the largest difference of
  per-request finish times between the two.
- ``engine.routed_vs_fed``: the first hour of the Azure conversation trace on one
  paged replica, fed its own list (``Replica.feed``) against handed each request by a
  router process at its arrival (``Replica.submit``), without and with the router
  announcing its next arrival: wall-time ratios (interleaved runs) and SimPy events per
  request.

Per case: ``repeats`` runs (default 3) and the median; a run longer than 60 s is not
repeated (``repeats`` in the line says how many were taken). Events per request:
replica steps and wake-ups (``summary.engine``) and SimPy events processed (counted
from the environment's event-id counter, read after the run: no per-event overhead).

Run: ``python -m benchmarks bench_engine``; ``python -m benchmarks.bench_engine --quick``
shrinks every simulated window ten-fold (``--repeats N`` sets the repeat count).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from policies.allocators.base import PoolSpec
from policies.allocators.paged import PagedAllocator
from sim.build import engine_build
from sim.engine.replica import Replica
from sim.engine.scheduler import Group
from sim.engine.simpy_adapter import events_processed
from sim.latency.models import RooflineLatency
from sim.models.hardware import GPUS, MODELS
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import Scenario, parse_scenario
from sim.scenario.workload import load_workload
from sim.simulate.columns import make_groups
from sim.simulate.parts import build_parts

AZURE_CONV = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces_external"
    / "azure_llm_2023"
    / "AzureLLMInferenceTrace_conv.csv"
)
TARGET_REQ_PER_S = 100_000
TARGET_BIMODAL_WALL_S = 20.0
TARGET_FLOOR_RATIO = 0.4
"""``engine.azure_conv_1d`` over ``engine.python_floor`` (issue 27)."""
NO_REPEAT_AFTER_S = 60.0
DAY_S = 86_400.0


@contextmanager
def _capture_environments() -> Iterator[list[simpy.Environment]]:
    """While active, every ``simpy.Environment()`` (as ``sim.run`` creates it) is
    appended to the yielded list, so its event counter can be read afterwards."""
    original = simpy.Environment
    created: list[simpy.Environment] = []

    class Capturing(original):  # type: ignore[valid-type,misc]
        def __init__(self, initial_time: float = 0) -> None:
            super().__init__(initial_time)
            created.append(self)

    simpy.Environment = Capturing  # type: ignore[misc]
    try:
        yield created
    finally:
        simpy.Environment = original  # type: ignore[misc]


def azure_scenario(tile_to_s: float) -> Scenario:
    return parse_scenario(
        {
            "name": "azure-conv-tiled",
            "workload": {"trace": str(AZURE_CONV), "tile_to_s": tile_to_s},
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
            "allocator": {"kind": "paged"},
            "mode": "fast",
        }
    )


def bimodal_scenario(duration_s: float, mode: str) -> Scenario:
    return parse_scenario(
        {
            "name": "bimodal",
            "mode": mode,
            "workload": {
                "preset": "bimodal",
                "synth": {
                    "duration_s": duration_s,
                    "arrival": {"kind": "poisson", "rate_per_s": 0.1},
                },
            },
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32_768},
            "allocator": {"kind": "best_fit"},
        }
    )


def _measure(scenario: Scenario, repeats: int) -> tuple[dict[str, Any], RunResult]:
    """Load and run ``scenario`` up to ``repeats`` times; medians and the last result."""
    load_s: list[float] = []
    sim_s: list[float] = []
    result: RunResult | None = None
    events = 0
    requests = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        df = load_workload(scenario)
        t1 = time.perf_counter()
        with _capture_environments() as envs:
            result = run(scenario, df)
        t2 = time.perf_counter()
        load_s.append(t1 - t0)
        sim_s.append(t2 - t1)
        events = events_processed(envs[-1])
        requests = len(df)
        if t2 - t1 > NO_REPEAT_AFTER_S:
            break
    assert result is not None
    engine = result.summary.engine
    sim_med = statistics.median(sim_s)
    per_req = max(requests, 1)
    line = {
        "requests": requests,
        "simulated_s": engine.end_s,
        "repeats": len(sim_s),
        "load_s": statistics.median(load_s),
        "sim_wall_s": sim_med,
        "sim_wall_s_all": sim_s,
        "requests_per_wall_s": requests / sim_med,
        "requests_per_wall_s_best": requests / min(sim_s),
        "steps_per_request": engine.steps / per_req,
        "wakeups_per_request": engine.wakeups / per_req,
        "simpy_events_per_request": events / per_req,
        "by_status": result.summary.requests.by_status,
    }
    if len(sim_s) < repeats:
        line["note"] = (
            f"one run took > {NO_REPEAT_AFTER_S:.0f} s: {len(sim_s)} of {repeats} repeats taken"
        )
    return line, result


def bench_azure(scale: float, repeats: int) -> dict[str, Any]:
    name = "engine.azure_conv_1d"
    if not AZURE_CONV.is_file():
        return {"bench": name, "skipped": f"trace not found: {AZURE_CONV}"}
    tile_to_s = DAY_S * scale
    line, _ = _measure(azure_scenario(tile_to_s), repeats)
    return {
        "bench": name,
        "tile_to_s": tile_to_s,
        "allocator": "paged",
        "mode": "fast",
        **line,
        "target_requests_per_wall_s": TARGET_REQ_PER_S,
        "target_met": line["requests_per_wall_s"] >= TARGET_REQ_PER_S,
    }


def bench_bimodal(scale: float, repeats: int) -> dict[str, Any]:
    duration_s = 6 * DAY_S * scale
    line, _ = _measure(bimodal_scenario(duration_s, "fast"), repeats)
    target = TARGET_BIMODAL_WALL_S * scale
    return {
        "bench": "engine.bimodal_6d",
        "duration_s": duration_s,
        "allocator": "best_fit",
        "mode": "fast",
        **line,
        "target_wall_s": target,
        "target_met": line["sim_wall_s"] < target,
    }


def diurnal_scenario(scale: float) -> Scenario:
    synth: dict[str, Any] = {}
    if scale != 1.0:
        synth["duration_s"] = 6 * DAY_S * scale
    return parse_scenario(
        {
            "name": "diurnal-chat-6d",
            "workload": {"preset": "diurnal-chat-6d", "synth": synth},
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
            "allocator": {"kind": "paged"},
            "metrics": {"sample_interval_s": 300.0},
            "mode": "fast",
        }
    )


def bench_diurnal(scale: float, repeats: int) -> dict[str, Any]:
    line, _ = _measure(diurnal_scenario(scale), repeats)
    return {
        "bench": "engine.diurnal_chat_6d",
        "duration_s": 6 * DAY_S * scale,
        "allocator": "paged",
        "mode": "fast",
        **line,
    }


def _floor_once(n: int) -> float:
    """One run of the floor over ``n`` requests: requests per wall-second."""
    model = RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"])
    run_s, within = model.decode_run_s, model.steps_within_s
    alloc = PagedAllocator(PoolSpec(capacity_tokens=10**8))
    groups = [Group(i, i * 0.18, 1000 + i % 300, 200 + i % 50) for i in range(n)]
    heap: list[tuple[int, int, Group]] = []
    rows: list[tuple[object, ...]] = []
    tick, now_s = 0, 0.0
    t0 = time.perf_counter()
    for g in groups:
        alloc.allocate(g.request_id, g.prompt_tokens)
        step_s = model.step_time_s(g.prompt_tokens, 30, 0)
        heapq.heappush(heap, (tick + g.output_tokens, g.request_id, g))
        k = within(30, 0, 0.18, 4096)
        now_s += run_s(30, 0, k) + step_s
        tick += k
        while heap and heap[0][0] <= tick:
            h = heapq.heappop(heap)[2]
            alloc.extend(h.request_id, h.output_tokens)
            alloc.free(h.request_id)
            rows.append((h.request_id, h.arrival_s, now_s, "ok"))
    return n / (time.perf_counter() - t0)


def bench_floor(scale: float, repeats: int) -> dict[str, Any]:
    """The floor, each repeat right after one run of ``engine.azure_conv_1d``'s case: the
    pair's ratio is the engine's rate over the floor's measured back to back, so the
    load on this shared machine, which moves both rates by tens of percent within
    minutes, hits both sides of it alike; the line's ratio is the median pair's."""
    n = int(200_000 * scale)
    rates: list[float] = []
    pair_ratios: list[float] = []
    azure = azure_scenario(DAY_S * scale) if AZURE_CONV.is_file() else None
    requests = load_workload(azure) if azure is not None else None
    for _ in range(repeats):
        engine_rps = None
        if azure is not None and requests is not None:
            t0 = time.perf_counter()
            run(azure, requests)
            engine_rps = len(requests) / (time.perf_counter() - t0)
        rates.append(_floor_once(n))
        if engine_rps is not None:
            pair_ratios.append(engine_rps / rates[-1])
    line: dict[str, Any] = {
        "bench": "engine.python_floor",
        "requests": n,
        "repeats": repeats,
        "requests_per_wall_s": statistics.median(rates),
        "us_per_request": 1e6 / statistics.median(rates),
    }
    if pair_ratios:
        line["azure_conv_1d_over_floor_interleaved"] = statistics.median(pair_ratios)
        line["azure_conv_1d_over_floor_interleaved_all"] = pair_ratios
    return line


def bench_exact(scale: float, repeats: int) -> dict[str, Any]:
    duration_s = 6 * 3600.0 * scale
    fast, fast_result = _measure(bimodal_scenario(duration_s, "fast"), repeats)
    exact, exact_result = _measure(bimodal_scenario(duration_s, "exact"), repeats)
    a = fast_result.requests.set_index("request_id")
    b = exact_result.requests.set_index("request_id")
    diffs = [
        float(np.nanmax(np.abs(a[c].to_numpy(float) - b[c].to_numpy(float)), initial=0.0))
        for c in ("admit_s", "first_token_s", "finish_s")
    ]
    same_status = bool(pd.Series(a["status"]).equals(pd.Series(b["status"])))
    return {
        "bench": "engine.bimodal_exact",
        "duration_s": duration_s,
        "allocator": "best_fit",
        "requests": exact["requests"],
        "exact_sim_wall_s": exact["sim_wall_s"],
        "fast_sim_wall_s": fast["sim_wall_s"],
        "exact_requests_per_wall_s": exact["requests_per_wall_s"],
        "fast_requests_per_wall_s": fast["requests_per_wall_s"],
        "fast_over_exact_speed": exact["sim_wall_s"] / fast["sim_wall_s"],
        "exact_simpy_events_per_request": exact["simpy_events_per_request"],
        "fast_simpy_events_per_request": fast["simpy_events_per_request"],
        "steps_per_request": exact["steps_per_request"],
        "max_abs_time_diff_s": max(diffs),
        "same_status": same_status,
        "repeats": min(exact["repeats"], fast["repeats"]),
    }


def _serve_routed(scenario: Scenario, requests: pd.DataFrame, how: str) -> tuple[float, int]:
    """One replica over ``requests``: ``feed`` (its own list), ``submit`` (a router process
    handing each request over at its arrival) or ``hinted`` (the same router announcing
    its next arrival). Returns (wall seconds, SimPy events processed)."""
    parts = build_parts(scenario, requests)
    groups = make_groups(requests)
    env = simpy.Environment()
    replica = Replica(
        env, 0, parts.scheduler, lambda: parts.allocator.build(parts.spec), parts.latency
    )
    if how == "feed":
        replica.feed(groups)
    else:
        hinted = how == "hinted"

        def router() -> Generator[simpy.Event, Any, None]:
            last = len(groups) - 1
            for i, g in enumerate(groups):
                if g.arrival_s > env.now:
                    yield env.timeout(g.arrival_s - env.now)
                nxt = groups[i + 1].arrival_s if hinted and i < last else math.inf
                replica.submit(g, nxt)

        env.process(router())
    t0 = time.perf_counter()
    env.run()
    wall_s = time.perf_counter() - t0
    replica.close()
    return wall_s, events_processed(env)


def bench_routed(scale: float, repeats: int) -> dict[str, Any]:
    """A replica fed by a caller (the fleet's router) against one fed its own list."""
    name = "engine.routed_vs_fed"
    if not AZURE_CONV.is_file():
        return {"bench": name, "skipped": f"trace not found: {AZURE_CONV}"}
    scenario = azure_scenario(DAY_S)
    requests = load_workload(scenario)
    requests = requests[requests["arrival_s"] < 3600.0 * scale].reset_index(drop=True)
    out: dict[str, Any] = {"bench": name, "requests": len(requests), "allocator": "paged"}
    walls: dict[str, list[float]] = {"feed": [], "submit": [], "hinted": []}
    for _ in range(repeats):  # interleaved, so load changes hit every variant alike
        for how, times in walls.items():
            wall_s, events = _serve_routed(scenario, requests, how)
            times.append(wall_s)
            out[f"{how}_simpy_events_per_request"] = events / max(len(requests), 1)
    for how, times in walls.items():
        out[f"{how}_wall_s"] = statistics.median(times)
    out["submit_over_feed"] = out["submit_wall_s"] / out["feed_wall_s"]
    out["hinted_over_feed"] = out["hinted_wall_s"] / out["feed_wall_s"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="Simulate 10x shorter windows.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per case (median).")
    args = parser.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    single_rps: float | None = None
    for bench in (
        bench_azure,
        bench_bimodal,
        bench_diurnal,
        bench_floor,
        bench_exact,
        bench_routed,
    ):
        line = {**bench(scale, args.repeats), "quick": args.quick, "engine_build": engine_build()}
        if line["bench"] == "engine.azure_conv_1d" and "requests_per_wall_s" in line:
            single_rps = line["requests_per_wall_s"]
        if line["bench"] == "engine.python_floor" and single_rps is not None:
            # The interleaved pairs' median where measured (bench_floor); the two
            # lines' medians, minutes apart, beside it.
            separate = single_rps / line["requests_per_wall_s"]
            ratio = line.get("azure_conv_1d_over_floor_interleaved", separate)
            line["azure_conv_1d_over_floor_separate"] = separate
            line["azure_conv_1d_over_floor"] = ratio
            line["target_ratio"] = TARGET_FLOOR_RATIO
            line["target_met"] = ratio >= TARGET_FLOOR_RATIO
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
