"""A load router asked once per state of its views (``Router.views_only``, reused by
``sim.fleet.routeviews.RouteViews.choose``) gives a fleet the same run, row for row, as
the same router asked at every decision: stale views at two refresh periods, crashes,
an autoscaler, restarts that redirect their queues, client retries re-routed."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from support.fleet import comparable, synthetic_fleet_data

from policies.routing.base import Router
from policies.routing.registry import ROUTERS, parse_router
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

VIEWS_ONLY: dict[str, type[Router]] = {
    kind: type(router)
    for kind in ROUTERS
    if (router := parse_router({"kind": kind}).build()).views_only
}
"""Every registered router whose default build declares ``views_only`` (the fleet reuses
its answer), by kind: a new such router is tested here without an edit."""


def _run(data: dict[str, Any]) -> dict[str, pd.DataFrame]:
    scenario = parse_scenario(data)
    return comparable(run(scenario, load_workload(scenario)))


@pytest.mark.parametrize("refresh_s", [0.05, 5.0])
@pytest.mark.parametrize("kind", sorted(VIEWS_ONLY))
def test_reusing_the_answer_is_asking_again(
    kind: str, refresh_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = VIEWS_ONLY[kind]
    assert cls.views_only  # what is under test
    data = synthetic_fleet_data(
        seed=7,
        duration_s=600.0,
        router={"kind": kind},
        router_refresh_s=refresh_s,
        retry={"reroute": True},
        restart={"kind": "scheduled", "every_s": 200.0, "drain": "redirect", "interval_s": 20.0},
        autoscaler={"kind": "queue", "queue_threshold": 1, "interval_s": 20.0},
        faults={"mtbf_s": 300.0, "mttr": {"mean_s": 30.0}},
        lifecycle={"provision": {"mean_s": 20.0}, "load": {"mean_s": 10.0}},
        max_replicas=5,
    )
    data["workload"]["synth"]["arrival"]["rate_per_s"] = 2.0
    reused = _run(data)
    try:
        monkeypatch.setattr(cls, "views_only", False)
    except (TypeError, AttributeError):
        pytest.skip(
            "a compiled router class's attribute cannot be patched (the pure build checks it)"
        )
    asked = _run(data)
    assert len(reused["requests"]) > 500
    for name, frame in reused.items():
        pd.testing.assert_frame_equal(frame, asked[name], obj=name)
