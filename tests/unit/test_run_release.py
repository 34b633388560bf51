"""A finished run frees its own objects: cyclic collection is paused while simulating,
so a run that left reference cycles behind would keep every request's record alive
until some later full collection (memory growing run after run in a sweep)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from sim.engine.batch import Group
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload


def _live_groups() -> int:
    return sum(isinstance(o, Group) for o in gc.get_objects())


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_nothing_of_a_run_outlives_its_result_without_a_collection(mode: str) -> None:
    data: dict[str, Any] = {
        "name": "release",
        "mode": mode,
        "workload": {
            "preset": "bimodal",
            "synth": {"duration_s": 600, "arrival": {"kind": "poisson", "rate_per_s": 2}},
        },
        "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "kv_capacity_tokens": 60_000},
        "allocator": {"kind": "best_fit"},
        "restart": {"every_s": 200, "mode": "kill", "downtime_s": 5},
        "metrics": {"sample_interval_s": 10},
    }
    scenario = parse_scenario(data)
    requests = load_workload(scenario)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # only reference counting may free the run's objects below
    try:
        before = _live_groups()
        result = run(scenario, requests)
        assert len(result.requests) == len(requests) > 100
        del result
        assert _live_groups() == before
    finally:
        if was_enabled:
            gc.enable()
