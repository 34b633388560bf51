"""Large runs synthesized with numpy for the report's size and speed checks
(``tests/unit/test_report_bounds.py``, ``benchmarks/bench_reports.py``): a report's cost
depends only on its frames' sizes, and simulating a million requests takes minutes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.results.io import RunResult

REPLICAS = 16
DAYS = 6
SAMPLE_S = 60.0


ALERTS = (
    ("fragmentation_driven_allocation_failure", "high"),
    ("high_fragmentation_approaching_threshold", "medium"),
    ("node_uptime_vs_fragmentation_correlation", "medium"),
)


def _alive(rng: np.random.Generator, replicas: int, periodic: int, churn: bool) -> np.ndarray:
    """``(replicas, periodic)`` booleans: which replica is up at each sample. Without
    churn all of them always; with churn the first 4 always, each other one for a
    stretch of 10 minutes to 6 hours at a random start."""
    alive = np.ones((replicas, periodic), dtype=bool)
    if churn:
        grid = np.arange(periodic) * SAMPLE_S
        start = rng.uniform(0, periodic * SAMPLE_S, replicas)
        end = start + rng.uniform(600.0, 6 * 3600.0, replicas)
        alive = (grid >= start[:, None]) & (grid < end[:, None])
        alive[:4] = True
    return alive


def synthesize(
    requests: int,
    seed: int = 0,
    *,
    replicas: int = REPLICAS,
    churn: bool = False,
    template: RunResult,
) -> RunResult:
    """A six-day fleet run of ``requests`` requests over ``replicas`` replica ids
    (``churn``: see :func:`_alive`), frames in the simulator's columns; the summary is
    ``template``'s (the numbers in the tables do not change the cost)."""
    rng = np.random.default_rng(seed)
    span_s = DAYS * 86400.0
    arrival = np.sort(rng.uniform(0, span_s, requests))
    first = arrival + rng.lognormal(-2.0, 1.5, requests)
    generated = rng.integers(1, 2000, requests)
    finish = first + generated * rng.uniform(0.01, 0.05, requests)
    req = pd.DataFrame(
        {
            "request_id": np.arange(requests),
            "replica": rng.integers(0, replicas, requests),
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
    alive = _alive(rng, replicas, periodic, churn)
    grid = np.tile(np.arange(periodic) * SAMPLE_S, replicas)[alive.ravel()]
    n_periodic = len(grid)
    t = np.concatenate([grid, rng.uniform(0, span_s, failures)])
    rows = len(t)
    replica = np.concatenate(
        [np.repeat(np.arange(replicas), periodic)[alive.ravel()], rng.integers(0, 4, failures)]
    )
    free = rng.integers(0, 120_000, rows)
    largest = (free * rng.uniform(0.2, 1.0, rows)).astype(np.int64)
    shares = rng.dirichlet(np.ones(4), rows)
    ts = pd.DataFrame(
        {
            "time_s": t,
            "replica": replica,
            "trigger": np.where(np.arange(rows) < n_periodic, "periodic", "failure"),
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
    n_ev = len(fail_rows) + fleet_events
    ev_kind = np.concatenate(
        [
            rng.choice(["admission_failure", "growth_failure"], len(fail_rows)),
            rng.choice(kinds, fleet_events),
        ]
    )
    avoidable = (ev_kind == "scale-up") & (rng.random(n_ev) < 0.5)
    ev = pd.DataFrame(
        {
            "time_s": np.concatenate([fail_rows["time_s"], rng.uniform(0, span_s, fleet_events)]),
            "replica": np.concatenate(
                [fail_rows["replica"], rng.integers(0, replicas, fleet_events)]
            ),
            "kind": ev_kind,
            "request_id": -1,
            "need_tokens": rng.integers(100, 30_000, n_ev),
            "free_tokens": np.concatenate([fail_rows["free_tokens"], np.zeros(fleet_events)]),
            "largest_free_extent_tokens": np.concatenate(
                [fail_rows["largest_free_extent_tokens"], np.zeros(fleet_events)]
            ),
            "free_share": np.concatenate(
                [fail_rows["free_tokens"] / 120_000.0, np.full(fleet_events, np.nan)]
            ),
            "cause": rng.choice(["fragmentation", "capacity"], n_ev),
            "detail": np.where(avoidable, "provision_s=200.0; avoidable", ""),
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
            "avoidable_replica_hours": ft * 4 / 3600.0,
            "avoidable_cost_usd": ft * 4 / 3600.0 * 4.0,
        }
    )
    alert_rows = 20_000
    alerts = pd.DataFrame(
        {
            "time_s": np.sort(rng.uniform(0, span_s, alert_rows)),
            "replica": rng.integers(0, replicas, alert_rows),
            "alert": rng.choice([a for a, _ in ALERTS], alert_rows),
            "severity": "high",
            "state": np.tile(["firing", "resolved"], alert_rows // 2),
            "value": rng.random(alert_rows),
            "response": "Restart the affected node",
        }
    )
    return RunResult(req, ts, ev, template.summary, fleet=fleet, alerts=alerts)
