"""Report build time and size for a million-request fleet run (``fragsim report``).

The run is synthesized with numpy, not simulated (simulating 1M requests takes minutes
and the report's cost depends only on the frames' sizes): 1,000,000 requests, 16
replicas sampled every 60 s for six days (138,240 periodic samples) plus 200,000
allocation failures (as failure samples and events), 2,000 restarts / crashes / scale
events, the fleet table every 60 s and 20,000 alert log rows. Its summary is a small
simulated fleet run's (the numbers in the tables do not change the cost). Times
``reports.build_report`` + the atomic write (median of ``--repeats``) and reports the
file's size; target (issue 12): at most 10 MB.

Usage: ``python -m benchmarks bench_reports [--quick]`` (``--quick``: 100,000 requests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from sim.results.io import RunResult

REPLICAS = 16
DAYS = 6
SAMPLE_S = 60.0
TARGET_BYTES = 10_000_000


def _template() -> RunResult:
    """A small simulated fleet run: its summary and its frames' columns."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.fleet import synthetic_fleet_data

    from sim.runner import run
    from sim.scenario.schema import parse_scenario
    from sim.scenario.workload import load_workload

    data = synthetic_fleet_data(duration_s=600.0, restart={"kind": "scheduled", "every_s": 200.0})
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


def synthesize(requests: int, seed: int = 0) -> RunResult:
    rng = np.random.default_rng(seed)
    span_s = DAYS * 86400.0
    template = _template()
    arrival = np.sort(rng.uniform(0, span_s, requests))
    first = arrival + rng.lognormal(-2.0, 1.5, requests)
    generated = rng.integers(1, 2000, requests)
    finish = first + generated * rng.uniform(0.01, 0.05, requests)
    req = pd.DataFrame(
        {
            "request_id": np.arange(requests),
            "replica": rng.integers(0, REPLICAS, requests),
            "arrival_s": arrival,
            "prompt_tokens": rng.integers(10, 20_000, requests),
            "output_tokens": generated,
            "generated_tokens": generated,
            "num_seqs": np.ones(requests, dtype=np.int64),
            "admit_s": arrival,
            "first_token_s": first,
            "finish_s": finish,
            "status": np.where(rng.random(requests) < 0.97, "ok", "failed-fragmentation"),
        }
    )
    periodic = int(span_s / SAMPLE_S)
    failures = min(200_000, requests // 5)
    t = np.concatenate(
        [np.tile(np.arange(periodic) * SAMPLE_S, REPLICAS), rng.uniform(0, span_s, failures)]
    )
    rows = len(t)
    replica = np.concatenate(
        [np.repeat(np.arange(REPLICAS), periodic), rng.integers(0, REPLICAS, failures)]
    )
    free = rng.integers(0, 120_000, rows)
    largest = (free * rng.uniform(0.2, 1.0, rows)).astype(np.int64)
    shares = rng.dirichlet(np.ones(4), rows)
    ts = pd.DataFrame(
        {
            "time_s": t,
            "replica": replica,
            "trigger": np.where(np.arange(rows) < REPLICAS * periodic, "periodic", "failure"),
            "up": True,
            "uptime_s": t % 86400.0,
            "capacity_tokens": 120_000,
            "free_tokens": free,
            "largest_free_extent_tokens": largest,
            "largest_contiguous_free_block_ratio": largest / np.maximum(free, 1),
            "share_token_states": shares[:, 0],
            "share_reservation": shares[:, 1],
            "share_internal_fragmentation": shares[:, 2],
            "share_external_fragmentation_free": shares[:, 3],
        }
    ).sort_values(["time_s", "replica"], kind="stable")
    fail_rows = ts[ts["trigger"] == "failure"]
    fleet_events = 2000
    kinds = np.array(["restart", "crash", "scale-up", "scale-down"])
    ev = pd.DataFrame(
        {
            "time_s": np.concatenate([fail_rows["time_s"], rng.uniform(0, span_s, fleet_events)]),
            "replica": np.concatenate(
                [fail_rows["replica"], rng.integers(0, REPLICAS, fleet_events)]
            ),
            "kind": np.concatenate(
                [
                    rng.choice(["admission_failure", "growth_failure"], len(fail_rows)),
                    rng.choice(kinds, fleet_events),
                ]
            ),
            "request_id": -1,
            "need_tokens": rng.integers(100, 30_000, len(fail_rows) + fleet_events),
            "free_tokens": np.concatenate([fail_rows["free_tokens"], np.zeros(fleet_events)]),
            "cause": rng.choice(
                ["fragmentation", "capacity", "scheduled"], len(fail_rows) + fleet_events
            ),
            "detail": "",
        }
    ).sort_values("time_s", kind="stable")
    ft = np.arange(periodic) * SAMPLE_S
    active = rng.integers(12, 17, periodic)
    fleet = pd.DataFrame(
        {
            "time_s": ft,
            "active": active,
            "warming": 16 - active,
            "replicas": np.full(periodic, 16),
            "replica_hours": ft * 16 / 3600.0,
            "cost_usd": ft * 16 / 3600.0 * 4.0,
        }
    )
    alert_rows = 20_000
    alerts = pd.DataFrame(
        {
            "time_s": np.sort(rng.uniform(0, span_s, alert_rows)),
            "replica": rng.integers(0, REPLICAS, alert_rows),
            "alert": rng.choice(["HighFragmentation", "SevereFragmentation"], alert_rows),
            "severity": "high",
            "state": np.tile(["firing", "resolved"], alert_rows // 2),
            "value": rng.random(alert_rows),
            "response": "Restart the affected node",
        }
    )
    return RunResult(req, ts, ev, template.summary, fleet=fleet, alerts=alerts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="100,000 requests.")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    requests = 100_000 if args.quick else 1_000_000
    result = synthesize(requests)
    from reports import build_report, write_html

    times = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        for _ in range(args.repeats):
            start = time.perf_counter()
            write_html(build_report([("synthetic", result)]), out)
            times.append(time.perf_counter() - start)
        size = out.stat().st_size
    line = {
        "bench": "reports",
        "requests": requests,
        "timeseries_rows": len(result.timeseries),
        "events": len(result.events),
        "seconds": statistics.median(times),
        "seconds_best": min(times),
        "bytes": size,
        "target_bytes": TARGET_BYTES,
        "ok": size <= TARGET_BYTES,
        "quick": args.quick,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
