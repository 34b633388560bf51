"""A postmortem replay: log ids become fleet ids, recorded events become a script, the
recorded router follows the log, and counterfactuals keep only the recorded crashes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

import sim
from policies.routing.base import RouteRequest
from policies.routing.config import LengthPoolsConfig
from sim.fleet.fleet import NodeAction
from sim.postmortem.log import PostmortemLog, load_postmortem_log
from sim.postmortem.names import NO_REPLICA, counterfactual_names, replica_table
from sim.postmortem.record import postmortem_record
from sim.postmortem.replay import (
    Replay,
    counterfactual_scenario,
    replay,
    replay_scenario,
    run_counterfactual,
)
from sim.postmortem.script import (
    RecordedRouter,
    build_replica_map,
    counterfactual_script,
    recorded_routes,
    replay_script,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem"

REQUESTS = """\
request_id,arrival_s,prompt_tokens,output_tokens,replica,status
0,1.0,100,10,a,ok
1,12.0,100,10,d,ok
2,45.0,100,10,c,ok
3,55.0,100,10,c,oom
"""
NODES = """\
time_s,replica,event,pool
-3600,b,start,long
0,a,start,short
-60,c,start,short
10,d,scale_up,long
20,a,crash,
30,a,restart,
40,c,scale_down,
50,c,scale_up,
60,b,restart,
"""


@pytest.fixture
def small_log(tmp_path: Path) -> PostmortemLog:
    (tmp_path / "requests.csv").write_text(REQUESTS)
    (tmp_path / "nodes.csv").write_text(NODES)
    return load_postmortem_log(tmp_path)


@pytest.fixture(scope="module")
def example() -> PostmortemLog:
    return load_postmortem_log(EXAMPLE)


@pytest.fixture(scope="module")
def example_replay(example: PostmortemLog) -> Replay:
    return replay(sim.load_scenario("seed-postmortem"), example)


def test_initial_nodes_come_pool_by_pool_then_scale_ups_in_event_order(
    small_log: PostmortemLog,
) -> None:
    assert small_log.replica_names == ["b", "a", "c", "d"]  # log ids 0..3
    rmap = build_replica_map(small_log)
    assert rmap.pools == ("long", "short")
    assert rmap.initial == (0, 1, 2)  # b (long), then a, c (short)
    assert rmap.log_of_fleet == (0, 1, 2, 3, 2)  # d scaled up, then c again: a new node
    assert rmap.fleet_id_at(3, 5.0) is None  # d not added yet
    assert rmap.fleet_id_at(3, 10.0) == 3
    assert rmap.fleet_id_at(2, 45.0) == 2  # scaled down: still the old node (not up)
    assert rmap.fleet_id_at(2, 50.0) == 4
    assert rmap.fleet_id_at(1, 25.0) == 1  # a crash keeps the node
    assert recorded_routes(small_log, rmap) == {0: 1, 1: 3, 2: 2, 3: 4}


def test_recorded_events_become_a_script_and_a_recovery_is_left_to_the_repair(
    small_log: PostmortemLog,
) -> None:
    rmap = build_replica_map(small_log)
    assert replay_script(small_log, rmap) == [
        NodeAction(10.0, "scale_up", pool_index=0),
        NodeAction(20.0, "crash", replica_id=1),
        NodeAction(40.0, "scale_down", replica_id=2),
        NodeAction(50.0, "scale_up", pool_index=1),
        NodeAction(60.0, "restart", replica_id=0),
    ]
    assert counterfactual_script(small_log, rmap) == [NodeAction(20.0, "crash", replica_id=1)]


def test_the_replay_fleet_is_the_logs_with_no_policies(small_log: PostmortemLog) -> None:
    base = sim.load_scenario("seed-postmortem")
    scenario = replay_scenario(base, small_log, build_replica_map(small_log))
    fleet = scenario.fleet
    assert fleet is not None
    assert [(p.name, p.count, p.initial_uptime_s) for p in fleet.pools] == [
        ("long", 1, [3600.0]),
        ("short", 2, [0.0, 60.0]),
    ]
    assert fleet.restart.kind == "none" and fleet.autoscaler.kind == "none"
    assert (fleet.floor, fleet.ceiling) == (3, 5)
    assert fleet.faults.mtbf_s is None and fleet.faults.mttr.mean_s == 0.0  # 10 s < load
    assert base.fleet is not None and fleet.router == base.fleet.router
    assert scenario.allocator == base.allocator and scenario.duration_s is None


def test_a_counterfactual_keeps_its_policies_and_clamps_long_replicas(
    small_log: PostmortemLog,
) -> None:
    cf = sim.load_scenario("seed-postmortem-length-routing")
    assert cf.fleet is not None
    router = LengthPoolsConfig(threshold_tokens=8192, long_replicas=[1, 7])
    cf = cf.model_copy(update={"fleet": cf.fleet.model_copy(update={"router": router})})
    scenario = counterfactual_scenario(cf, small_log, build_replica_map(small_log))
    assert scenario.fleet is not None
    assert isinstance(scenario.fleet.router, LengthPoolsConfig)
    assert scenario.fleet.router.long_replicas == [1]
    assert cf.fleet is not None and scenario.fleet.autoscaler == cf.fleet.autoscaler
    assert (scenario.fleet.floor, scenario.fleet.ceiling) == (3, 3 + 8)  # 12 - 4 headroom


@dataclass
class View:
    replica_id: int
    up: bool
    outstanding_requests: int = 0


def test_the_recorded_router_falls_back_to_least_outstanding_when_down() -> None:
    router = RecordedRouter({1: 0, 2: 0, 3: 5})
    views = [View(0, True, 9), View(1, True, 2), View(2, True, 1)]
    assert router.choose(RouteRequest(1, 0.0, 10, 10), views) == 0  # type: ignore[arg-type]
    views[0].up = False
    assert router.choose(RouteRequest(2, 0.0, 10, 10), views) == 2  # type: ignore[arg-type]
    assert router.choose(RouteRequest(3, 0.0, 10, 10), views) == 2  # type: ignore[arg-type]
    assert router.choose(RouteRequest(1, 5.0, 10, 10), views) == 2  # type: ignore[arg-type]
    assert router.counts() == {"recorded": 1, "fallbacks": 2, "later": 1}


def test_the_replay_routes_each_request_to_its_recorded_replica(
    example: PostmortemLog, example_replay: Replay
) -> None:
    routes = recorded_routes(example, build_replica_map(example))
    req = example_replay.result.requests
    # The example's production router never sent a request to a node being restarted.
    assert (req["first_replica"] == req["request_id"].map(routes)).all()
    assert example_replay.router == {"recorded": len(req), "fallbacks": 0, "later": 0}


def test_the_replay_restarts_at_the_recorded_time(example_replay: Replay) -> None:
    ev = example_replay.result.events
    restarts = ev[ev["kind"] == "restart"]
    assert restarts[["time_s", "replica", "cause"]].values.tolist() == [[1800.0, 0, "recorded"]]
    assert example_replay.script["restart"] == 1


def test_the_example_is_reproduced(example: PostmortemLog, example_replay: Replay) -> None:
    """The example log was written by a simulated fleet of the same stack with 2.5 %
    slower GPUs (examples/postmortem/README.md): the replay reproduces it closely."""
    m = example_replay.match
    assert m.recorded_failures == len(example.recorded_failures()) == 30
    assert m.precision is not None and m.precision >= 0.9
    assert m.recall is not None and m.recall >= 0.9
    assert m.precision == m.matched / m.simulated_failures
    assert m.recall == m.matched / m.recorded_failures
    record = postmortem_record(example_replay, example, ["x"], log_name="pm", scenario="s")
    assert record["precision"] == m.precision and record["recall"] == m.recall
    assert (record["rule"], record["log"], record["scenario"]) == ("by_request", "pm", "s")
    assert record["router_fallbacks"] == example_replay.router["fallbacks"]
    assert record["node_events"] == [
        {"time_s": 1800.0, "replica": "node-a", "event": "restart", "detail": "routine restart"}
    ]
    assert len(m.table) == m.recorded_failures + m.simulated_failures - m.matched


def test_the_replay_keeps_ids_and_adds_the_logs_names(example_replay: Replay) -> None:
    r = example_replay.result
    names = {0: "node-a", 1: "node-b", 2: "node-c"}
    for frame in (r.requests, r.timeseries, r.events, r.alerts):
        assert frame is not None
        cols = list(frame.columns)
        assert cols[cols.index("replica") + 1] == "replica_name"
        has = frame["replica"] >= 0
        assert (frame.loc[has, "replica"].map(names) == frame.loc[has, "replica_name"]).all()
        assert (frame.loc[~has, "replica_name"] == NO_REPLICA).all()
    assert (r.requests["first_replica"].map(names) == r.requests["first_replica_name"]).all()
    assert set(example_replay.match.table["replica"]) <= set(names.values())
    expected = pd.DataFrame(
        {"fleet_id": [0, 1, 2], "replica": list(names.values()), "pool": ["main"] * 3}
    ).assign(from_s=math.nan, until_s=math.nan)
    pd.testing.assert_frame_equal(example_replay.replicas, expected)


def test_a_replica_table_follows_names_across_scale_events(small_log: PostmortemLog) -> None:
    table = replica_table(small_log, build_replica_map(small_log))
    nan = math.nan
    expected = pd.DataFrame(
        [
            [0, "b", "long", nan, nan],
            [1, "a", "short", nan, nan],
            [2, "c", "short", nan, 50.0],
            [3, "d", "long", 10.0, nan],
            [4, "c", "short", 50.0, nan],
        ],
        columns=["fleet_id", "replica", "pool", "from_s", "until_s"],
    )
    pd.testing.assert_frame_equal(table, expected)
    assert counterfactual_names(small_log, build_replica_map(small_log), 5) == [
        "b",
        "a",
        "c",
        "new-1",
        "new-2",
    ]


def test_a_counterfactual_runs_the_same_traffic(example: PostmortemLog) -> None:
    result = run_counterfactual(sim.load_scenario("seed-postmortem-paged"), example)
    assert len(result.requests) == len(example.requests)
    assert result.summary.allocator == "paged"
    assert result.summary.fleet.restarts == {}  # the recorded restart is dropped
    assert set(result.requests["replica_name"]) <= {"node-a", "node-b", "node-c"}
