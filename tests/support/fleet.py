"""Fleet scenarios small enough to check by hand: constant-time steps, tiny KV pools,
lifecycle times without spread, and runs of them (``run_fleet_data``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from sim.engine.batch import Status
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from support.scenarios import request_frame, scenario_data

ORACLE = {"kind": "static", "mode": "oracle", "placement": "best_fit"}
"""Each request reserves its final length at admission, in one best-fit extent: who fits
where is prompt + output tokens, by hand."""

STATUSES: frozenset[str] = frozenset(Status.__args__)  # type: ignore[attr-defined]


def fleet_data(
    *,
    count: int = 2,
    pools: Sequence[Mapping[str, Any]] | None = None,
    router: Mapping[str, Any] | str = "round_robin",
    capacity_tokens: int = 4096,
    allocator: Mapping[str, Any] | str = ORACLE,
    step_s: float = 0.01,
    retry_attempts: int = 0,
    retry_backoff_s: float = 1.0,
    on_admission_failure: str = "queue",
    sample_interval_s: float = 10.0,
    mode: str = "exact",
    provision_s: float = 100.0,
    load_s: float = 20.0,
    warmup_s: float = 10.0,
    **fleet: Any,
) -> dict[str, Any]:
    """A scenario mapping of ``count`` llama-2-7b replicas of ``capacity_tokens`` KV
    slots each (or ``pools``), every step ``step_s``, lifecycle times exact (no spread),
    router views fresh unless ``router_refresh_s`` says otherwise; ``fleet``:
    further fields of the ``fleet:`` block (``restart``, ``autoscaler``, ...)."""
    block: dict[str, Any] = {
        "pools": [dict(p) for p in pools] if pools is not None else [{"name": "a", "count": count}],
        "router": {"kind": router} if isinstance(router, str) else dict(router),
        "router_refresh_s": 0.0,
        "lifecycle": {
            "provision": {"mean_s": provision_s},
            "load": {"mean_s": load_s},
            "warmup_s": warmup_s,
        },
        **fleet,
    }
    return scenario_data(
        allocator,
        capacity_tokens,
        name="fleet-test",
        sample_interval_s=sample_interval_s,
        latency={"kind": "constant", "step_s": step_s},
        scheduler={
            "on_admission_failure": on_admission_failure,
            "retry_attempts": retry_attempts,
            "retry_backoff_s": retry_backoff_s,
        },
        mode=mode,
        fleet=block,
    )


def run_fleet_data(data: Mapping[str, Any], df: pd.DataFrame) -> RunResult:
    return run(parse_scenario(dict(data)), df)


def evenly(n: int, every_s: float, prompt: int = 100, output: int = 10) -> pd.DataFrame:
    """``n`` requests of ``prompt`` + ``output`` tokens, one every ``every_s`` from 0."""
    return request_frame([i * every_s for i in range(n)], [prompt] * n, [output] * n)


def synthetic_fleet_data(seed: int = 1, duration_s: float = 1200.0, **fleet: Any) -> dict[str, Any]:
    """The fleet example of docs/fleet.md, shortened: a bimodal Poisson workload (0.3 requests/s)
    on three A100s of 40,000 KV slots restarted at different times, failing requests
    with one client retry; ``fleet``: the rest of the ``fleet:`` block."""
    return {
        "name": "fleet-synthetic",
        "seed": seed,
        "workload": {
            "preset": "bimodal",
            "synth": {"duration_s": duration_s, "arrival": {"kind": "poisson", "rate_per_s": 0.3}},
        },
        "hardware": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "max_seq_tokens": 32768,
            "kv_capacity_tokens": 40000,
        },
        "allocator": {"kind": "best_fit"},
        "scheduler": {
            "on_admission_failure": "reject",
            "preemption": "fail",
            "retry_attempts": 1,
            "retry_backoff_s": 1.0,
        },
        "metrics": {"sample_interval_s": 60},
        "fleet": {
            "pools": [{"name": "a100", "count": 3, "initial_uptime_s": [0, 86400, 432000]}],
            "lifecycle": {"provision": {"mean_s": 120.0}, "load": {"mean_s": 30.0}},
            **fleet,
        },
    }


def comparable(r: RunResult) -> dict[str, pd.DataFrame]:
    """The run's frames, ``requests.diagnosis`` with "" for none (NaN in an object column
    is not equal to itself)."""
    requests = r.requests.copy()
    requests["diagnosis"] = requests["diagnosis"].fillna("")
    return {
        "requests": requests,
        "events": r.events,
        "timeseries": r.timeseries,
        "fleet": r.fleet,
        "alerts": r.alerts,
    }
