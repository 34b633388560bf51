"""Write the example log of ``fragsim postmortem`` (requests.csv, nodes.csv) by running
fragsim itself: a simulated "production" fleet whose request log and node events are
exported in the postmortem log format.

Not production data. The "production" run is the built-in ``seed-postmortem`` stack
(Llama-2-7B on A100-80GB, contiguous best-fit KV cache, one client retry on the same
node) on three nodes ``node-a``, ``node-b``, ``node-c`` (one pool ``main``, routed by
least outstanding requests, no autoscaler), serving one hour of the seed's bimodal
traffic (:data:`RATE_PER_S`, seed :data:`SEED`), with a routine restart of ``node-a`` at
:data:`RESTART_S`. Two perturbations keep the replay from being a copy of this run: the
production GPUs are 2.5 % slower than the stack's model (:data:`MEM_EFFICIENCY`), and
arrivals are logged in milliseconds. The log keeps what a production log keeps: one row
per attempt with the node that served it and its outcome (``oom`` for an allocation
failure), and the node events; the simulation's internals (pool state, diagnoses,
latency model) are not exported.

Run ``python examples/postmortem/make_example.py [OUT_DIR]`` (default: this folder); the
same script gives the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from sim.engine.batch import ClientRetry

SEED = 7
RATE_PER_S = 0.5
DURATION_S = 3600.0
REPLICAS = ("node-a", "node-b", "node-c")
UPTIME_S = (5 * 86400, 86400, 2 * 3600)  # at the log start: node-a has been up five days
RESTART_S = 1800  # node-a's routine restart
MEM_EFFICIENCY = 0.78
"""The production GPUs' achieved share of peak HBM bandwidth: 2.5 % below the 0.8 that
the ``seed-postmortem`` stack's roofline model assumes, so the replay's model is not the
production it replays (decode steps about 2.5 % slower in production)."""
FAILURE_KINDS = ("admission_failure", "growth_failure")


def production_scenario() -> Any:
    """The simulated production fleet (module docstring) as a :class:`sim.Scenario`."""
    import sim

    data = sim.load_scenario("seed-postmortem").model_dump(exclude_none=True)
    data["name"] = "example-production"
    data["seed"] = SEED
    data["latency"] = {"kind": "roofline", "mem_efficiency": MEM_EFFICIENCY}
    data["workload"]["synth"] |= {
        "duration_s": DURATION_S,
        "arrival": {"kind": "poisson", "rate_per_s": RATE_PER_S},
    }
    pool = {"name": "main", "count": 3, "initial_uptime_s": UPTIME_S}
    data["fleet"] |= {
        "pools": [pool],
        "autoscaler": {"kind": "none"},
        "min_replicas": 3,
        "max_replicas": 3,
    }
    return sim.parse_scenario(data)


def simulate() -> tuple[Any, ClientRetry]:
    """The production run (a :class:`sim.RunResult`) and its clients' retries."""
    import sim
    from sim.fleet.fleet import NodeAction
    from sim.runner import run

    scenario = production_scenario()
    requests = sim.load_workload(scenario)
    restart = NodeAction(float(RESTART_S), "restart", replica_id=0, cause="routine restart")
    return run(scenario, requests, script=[restart]), scenario.scheduler.client_retry()


def attempt_rows(result: Any, retry: ClientRetry) -> pd.DataFrame:
    """One row per attempt. A failed attempt is an allocation failure event of its
    request; the retry after failure k arrives ``retry.delay_s(k + 1)`` later (the
    clients' back-off), on the same node (retries are pinned in this stack)."""
    req, ev = result.requests, result.events
    fails = ev[ev["kind"].isin(FAILURE_KINDS)].sort_values(["request_id", "time_s"])
    fail_times = fails.groupby("request_id")["time_s"].apply(list).to_dict()
    rows = []
    for r in req.itertuples(index=False):
        failed = r.status != "ok"
        times = fail_times.get(r.request_id, [])
        assert len(times) == r.retries + failed, f"request {r.request_id}: attempts and events"
        assert r.first_replica == r.replica, "a retry left its node: not a pinned retry"
        retries = [t + retry.delay_s(k + 1) for k, t in enumerate(times[: r.retries])]
        for attempt, t in enumerate([r.arrival_s, *retries]):
            status = "oom" if failed or attempt < r.retries else "ok"
            rows.append(
                (r.request_id, attempt, t, r.prompt_tokens, r.output_tokens, r.replica, status)
            )
    cols = ["request_id", "attempt", "arrival_s", "prompt_tokens", "output_tokens", "replica"]
    out = pd.DataFrame(rows, columns=[*cols, "status"])
    out["replica"] = [REPLICAS[i] for i in out["replica"]]
    return out.sort_values(["arrival_s", "request_id", "attempt"], kind="stable")


def write_example(out_dir: Path) -> None:
    result, retry = simulate()
    attempts = attempt_rows(result, retry)
    lines = [",".join(attempts.columns)]
    for rid, attempt, t, p, o, r, s in attempts.itertuples(index=False):
        lines.append(f"{rid},{attempt},{t:.3f},{p},{o},{r},{s}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "requests.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    nodes = ["time_s,replica,event,pool,detail"]
    nodes += [f"{-up},{name},start,main," for name, up in zip(REPLICAS, UPTIME_S, strict=True)]
    nodes.append(f"{RESTART_S},node-a,restart,main,routine restart")
    (out_dir / "nodes.csv").write_text("\n".join(nodes) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_example(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
