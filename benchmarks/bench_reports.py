"""Report build time and size for a million-request fleet run (``fragsim report``).

The run is synthesized with numpy, not simulated (simulating 1M requests takes minutes
and the report's cost depends only on the frames' sizes): 1,000,000 requests, 16
replicas sampled every 60 s for six days (138,240 periodic samples) plus 200,000
allocation failures (as failure samples and events), 2,000 restarts / crashes / scale
events, the fleet table every 60 s and 20,000 alert log rows. Its summary is a small
simulated fleet run's (the numbers in the tables do not change the cost). Times
``reports.build_report`` + the atomic write (median of ``--repeats``) and reports the
file's size; target (issue 12): at most 10 MB. ``--churn`` synthesizes the seed
postmortem's shape instead: 637 replica ids over six days, 4 up throughout and the
rest bought and retired within hours (:func:`synthesize`'s ``churn``).

Usage: ``python -m benchmarks bench_reports [--quick] [--churn]`` (``--quick``: 100,000
requests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sim.results.io import RunResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.report_runs import REPLICAS, synthesize

TARGET_BYTES = 10_000_000


def _template() -> RunResult:
    """A small simulated fleet run: its summary and its frames' columns."""
    from support.fleet import synthetic_fleet_data

    from sim.runner import run
    from sim.scenario.schema import parse_scenario
    from sim.scenario.workload import load_workload

    data = synthetic_fleet_data(duration_s=600.0, restart={"kind": "scheduled", "every_s": 200.0})
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="100,000 requests.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--churn", action="store_true", help="637 replica ids, most short-lived.")
    args = parser.parse_args()
    requests = 100_000 if args.quick else 1_000_000
    replicas = 637 if args.churn else REPLICAS
    result = synthesize(requests, replicas=replicas, churn=args.churn, template=_template())
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
        "churn": args.churn,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
