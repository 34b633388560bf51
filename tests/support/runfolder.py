"""Hand-made run folders for tests of the commands that read one: the least summary a run
could have written (:func:`stub_summary`, :func:`stub_fleet`), the tables a test does
not care about (:func:`write_stub_tables`), and the digests a run records
(:func:`seal`), so that the one run-folder reader (``sim.results.runfolder``) reads the
folder as a run's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd

from sim.results.digests import DIGESTS, table_digests
from sim.results.runfolder import TABLES
from sim.results.summary_model import Summary

NO_VALUES = {"p50": None, "p90": None, "p99": None, "mean": None}


def stub_summary(**fields: Any) -> dict[str, Any]:
    """A single replica's summary holding every field a run writes (zeros, nulls), with
    ``fields`` on top."""
    summary: dict[str, Any] = {
        "scenario": "x",
        "seed": 0,
        "requests": {"total": 0, "by_status": {}},
        "span_s": 1e-9,
        "throughput": {"requests_per_s": 0.0, "output_tokens_per_s": 0.0},
        "latency_s": {"ttft": NO_VALUES, "tpot": NO_VALUES, "e2e": NO_VALUES},
        "failures": {
            "allocation_failures": 0,
            "by_cause": {},
            "at_high_free_memory": 0,
            "at_high_free_memory_by_cause": {},
            "allocation_failure_rate_at_high_free_memory": 0.0,
            "preemptions": 0,
            "restarts": 0,
        },
        "memory": {
            "mean_used_share": None,
            "waste_breakdown": {},
            "largest_contiguous_free_block_ratio": {
                "min": None,
                "mean": None,
                "share_of_samples_below_alert": None,
            },
            "node_uptime_vs_fragmentation_correlation": {
                "spearman_rho": None,
                "p_value": None,
                "samples": 0,
            },
        },
        "prefix_cache": {
            "cached_prompt_tokens": 0,
            "share_of_prompt_tokens": 0.0,
            "requests_with_hits": 0,
        },
        "alerts": [],
        "allocator": "x",
        "kv_capacity_tokens": None,
        "kv_bytes_per_token": None,
        "latency": {"kind": "constant"},
        "engine": {"mode": "exact", "steps": 0, "wakeups": 0, "end_s": 0.0},
    }
    return summary | fields


def stub_fleet(pools: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A summary's ``fleet`` section with ``pools`` and ``fields`` on top (every field a
    run writes but ``alerts``, as a fleet run written before fragsim recorded them)."""
    fleet: dict[str, Any] = {
        "pools": pools,
        "router": "round_robin",
        "restart_policy": "none",
        "autoscaler": "none",
        "replicas": {"initial": 1, "peak": 1, "final": 1, "mean": 1.0},
        "replica_hours": 0.0,
        "cost_usd": 0.0,
        "cost_per_million_output_tokens_usd": None,
        "avoidable_replica_hours": 0.0,
        "avoidable_cost_usd": 0.0,
        "restarts": {},
        "crashes": 0,
        "scale_ups": 0,
        "scale_downs": 0,
        "route_refusals": 0,
    }
    return fleet | fields


REQUESTS = {
    "request_id": [1],
    "replica": [0],
    "arrival_s": [0.0],
    "prompt_tokens": [10],
    "output_tokens": [10],
    "generated_tokens": [10],
    "admit_s": [0.0],
    "first_token_s": [0.1],
    "finish_s": [1.0],
    "status": ["ok"],
}
ALERTS = {"time_s": [], "replica": [], "alert": [], "severity": [], "state": [], "value": []}
FLEET = {"time_s": [0.0], "trigger": ["periodic"], "replicas": [1], "active": [1]} | {
    "replica_hours": [0.0],
    "cost_usd": [0.0],
}
FLEET |= {s: [0] for s in ("provisioning", "loading", "warming", "draining", "down")}


def write_stub_tables(run: Path, *, fleet: bool) -> None:
    """A one-request ``requests.parquet`` and, for a fleet run, a one-sample
    ``fleet.parquet`` and an empty ``alerts.parquet``, where the folder has none."""
    if not (run / "requests.parquet").exists():
        pd.DataFrame(REQUESTS).to_parquet(run / "requests.parquet")
    if fleet and not (run / "fleet.parquet").exists():
        pd.DataFrame(FLEET).to_parquet(run / "fleet.parquet")
    if fleet and not (run / "alerts.parquet").exists():
        types = {"time_s": float, "replica": "int64", "value": float}
        frame = pd.DataFrame(ALERTS).astype({k: types.get(k, object) for k in ALERTS})
        frame.to_parquet(run / "alerts.parquet")


def seal(run: Path) -> dict[str, Any]:
    """Record the folder's tables' digests in its ``summary.json``, as a run does; the
    summary written."""
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    names = [f"{n}.parquet" for n in TABLES if (run / f"{n}.parquet").exists()]
    summary[DIGESTS] = table_digests(run, names)
    (run / "summary.json").write_text(json.dumps(summary))
    return summary


def edited(summary: Summary, changes: dict[str, Any]) -> Summary:
    """``summary`` with each dotted field of ``changes`` set (``latency_s.ttft.p99``,
    ``alerts``), read back through the schema as a run folder's would be."""
    data = copy.deepcopy(summary.to_json_dict())
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return Summary.from_json_dict(data)
