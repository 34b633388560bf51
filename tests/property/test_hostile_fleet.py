"""A fleet's timing fields under hostile values: a result or one error, in bounded time.

A tiny fleet (two nodes, a dozen requests) has one to three of its intervals, rates and
durations -- restart-policy and autoscaler intervals and thresholds, crash and repair
times, lifecycle times, the scrape and router-refresh intervals, the run's duration,
sampling and client backoff -- replaced by values a hostile user would try (1e-300,
1e-7, 0, negative, huge, inf, NaN). Whatever is drawn, ``sim.run``:

* returns a result whose summary is strict JSON (no NaN, no infinity: undefined
  statistics are null), or
* raises one ScenarioError line naming a field (``field ...``),

within a time bound: no value makes the run's cost grow without bound.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import error_lines, put, strict_json

from policies.autoscale.registry import AUTOSCALERS
from policies.restart.registry import RESTART_POLICIES
from sim.results.io import summary_json
from sim.runner import run
from sim.scenario.schema import ScenarioError, parse_scenario

BASE: dict[str, Any] = {
    "name": "hostile-fleet",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 12}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}

HOSTILE: list[Any] = [1e-300, 1e-9, 1e-7, 1e-3, 0, 0.0, -1.0, 3.0, 1e9, 1e300, math.inf, math.nan]

# Every registered kind with its worked example (``example_fields``: it restarts, or
# scales, at its first checks), so a new kind is drawn here without an edit.
RESTART_CASES = [{"kind": kind, **cls.example_fields} for kind, cls in RESTART_POLICIES.items()]
AUTOSCALER_CASES = [{"kind": kind, **cls.example_fields} for kind, cls in AUTOSCALERS.items()]

FIELDS: list[tuple[str, ...]] = [
    ("fleet", "router_refresh_s"),
    ("fleet", "restart", "interval_s"),
    ("fleet", "restart", "drain_timeout_s"),
    ("fleet", "restart", "every_s"),
    ("fleet", "restart", "max_uptime_s"),
    ("fleet", "autoscaler", "interval_s"),
    ("fleet", "autoscaler", "scale_up_cooldown_s"),
    ("fleet", "autoscaler", "scale_down_cooldown_s"),
    ("fleet", "autoscaler", "scale_down_window_s"),
    ("fleet", "faults", "mtbf_s"),
    ("fleet", "faults", "mttr", "mean_s"),
    ("fleet", "lifecycle", "provision", "mean_s"),
    ("fleet", "lifecycle", "load", "mean_s"),
    ("fleet", "lifecycle", "load", "sd_s"),
    ("fleet", "lifecycle", "warmup_s"),
    ("fleet", "alerts", "scrape_interval_s"),
    ("duration_s",),
    ("metrics", "sample_interval_s"),
    ("scheduler", "retry_backoff_s"),
]
TIME_BOUND_S = 30.0


@st.composite
def fleets(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["fleet"]["restart"] = dict(draw(st.sampled_from(RESTART_CASES)))
    data["fleet"]["autoscaler"] = dict(draw(st.sampled_from(AUTOSCALER_CASES)))
    data["scheduler"] = {"retry_attempts": draw(st.integers(0, 3))}
    for _ in range(draw(st.integers(1, 3))):
        put(data, draw(st.sampled_from(FIELDS)), draw(st.sampled_from(HOSTILE)))
    return data


@given(data=fleets())
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_hostile_fleet_timing(data: dict[str, Any]) -> None:
    start = time.perf_counter()
    try:
        result = run(parse_scenario(data))
    except ScenarioError as e:
        error_lines(str(e).splitlines(), ("field ", "<scenario>: field "))
    else:
        strict_json(summary_json(result.summary), "the summary")
        assert result.summary.requests.total == len(result.requests)
    assert time.perf_counter() - start < TIME_BOUND_S, data
