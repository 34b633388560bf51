"""A fleet's timing fields cannot make a run unbounded: every periodic interval is held to
a run-cost bound (calls, crash-clock draws, scrapes over the simulated span) before the
run, and again while it runs (a backlog that drains long after the last arrival); the
scrape interval has a documented floor. Errors name the field that sets the rate."""

from __future__ import annotations

from typing import Any

import pytest
from support.fleet import evenly, fleet_data

from sim.runner import run
from sim.scenario import bounds
from sim.scenario.cost import check_run_cost
from sim.scenario.schema import ScenarioError, parse_scenario

HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("fleet.autoscaler.interval_s", {"autoscaler": {"kind": "naive", "interval_s": 1e-7}}),
    ("fleet.autoscaler.interval_s", {"autoscaler": {"kind": "kv_target", "interval_s": 1e-9}}),
    ("fleet.restart.interval_s", {"restart": {"kind": "scheduled", "interval_s": 1e-8}}),
    ("fleet.restart.interval_s", {"restart": {"kind": "rolling", "interval_s": 1e-300}}),
    ("fleet.faults.mtbf_s", {"faults": {"mtbf_s": 1e-7}}),
    ("fleet.faults.mtbf_s", {"faults": {"mtbf_s": 1e-300}}),
]


@pytest.mark.parametrize(("field", "block"), HOSTILE)
def test_a_tiny_interval_is_refused_before_the_run_naming_its_field(
    field: str, block: dict[str, Any]
) -> None:
    scenario = parse_scenario(fleet_data(**block))
    with pytest.raises(ScenarioError) as err:
        check_run_cost(scenario, evenly(4, 10.0))
    message = str(err.value)
    assert message.startswith(f"field {field}: the run spans 30 s (the last arrival at 30 s)")
    assert "at most 1,000,000 per run" in message and "\n" not in message


def test_the_crash_clock_counts_the_autoscalers_ceiling() -> None:
    data = fleet_data(
        count=2, autoscaler={"kind": "naive"}, max_replicas=100, faults={"mtbf_s": 0.001}
    )
    with pytest.raises(ScenarioError, match=r"100 nodes \(the most the autoscaler keeps\)"):
        check_run_cost(parse_scenario(data), evenly(3, 10.0))
    # the same clock on the two initial nodes alone fits
    check_run_cost(parse_scenario(fleet_data(count=2, faults={"mtbf_s": 0.001})), evenly(2, 100.0))


@pytest.mark.parametrize("value", [1e-7, 0.5, 0.0])
def test_the_scrape_interval_has_a_floor(value: float) -> None:
    with pytest.raises(
        ScenarioError,
        match=r"field fleet\.alerts\.scrape_interval_s: got .*greater than or equal to 1",
    ):
        parse_scenario(fleet_data(alerts={"scrape_interval_s": value}))


def test_scrapes_over_a_long_span_are_refused() -> None:
    data = fleet_data(alerts={"scrape_interval_s": 1.0}, sample_interval_s=1e5)
    with pytest.raises(ScenarioError, match=r"fleet.alerts.scrape_interval_s: .*scrapes"):
        check_run_cost(parse_scenario(data), evenly(2, 2e6))


def test_the_router_refresh_costs_nothing_per_second() -> None:
    """Refreshes are taken lazily at routing decisions: 1e-300 runs as 0.05 does."""
    frame = evenly(4, 1.0)
    fresh = run(parse_scenario(fleet_data(router_refresh_s=1e-300)), frame)
    assert len(fresh.requests) == 4


@pytest.mark.parametrize(
    ("field", "block"),
    [
        ("fleet.restart.interval_s", {"restart": {"kind": "scheduled", "interval_s": 1e-4}}),
        ("fleet.autoscaler.interval_s", {"autoscaler": {"kind": "naive", "interval_s": 1e-4}}),
        ("fleet.faults.mtbf_s", {"faults": {"mtbf_s": 1e-4}}),
    ],
)
def test_the_run_holds_the_bound_after_the_last_arrival(
    field: str, block: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every arrival at t = 0 spans nothing, so the check before the run passes; the
    run's own counters stop it once the requests still running pass the bound."""
    monkeypatch.setattr(bounds, "MAX_POLICY_CHECKS", 50)
    monkeypatch.setattr(bounds, "MAX_FAULT_DRAWS", 50)
    data = fleet_data(provision_s=0.0, load_s=0.0, warmup_s=0.0, **block)
    with pytest.raises(ScenarioError) as err:
        run(parse_scenario(data), evenly(2, 0.0, output=100))
    assert str(err.value).startswith(f"field {field}: the run took more than 50 ")
