"""Node lifecycles in fleet runs, on hand-checkable fleets (constant 10 ms steps, exact
lifecycle times): restart drain modes, every restart policy and autoscaler doing what
it says, scale-up and scale-down timing, the bill, and crashes."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from support.fleet import fleet_data, run_fleet_data
from support.scenarios import request_frame

from policies.autoscale.registry import AUTOSCALERS
from policies.restart.registry import RESTART_POLICIES
from sim.fleet.fleet import NodeAction
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario

# Round robin over two replicas of 4,096 slots: request 0 holds 3,000 slots of replica 0
# for 10 s, request 1 runs on replica 1, request 2 waits on replica 0 (no room).
BUSY = request_frame([0.0, 0.5, 1.0], [2000, 100, 2000], [1000, 10, 10])


def _scripted(actions: list[NodeAction], df: pd.DataFrame = BUSY, **fleet: Any) -> RunResult:
    data = fleet_data(count=2, sample_interval_s=1.0, load_s=5.0, warmup_s=5.0, **fleet)
    return run(parse_scenario(data), df, script=actions)


def _state_at(r: RunResult, time_s: float, state: str) -> int:
    rows = r.fleet[r.fleet["time_s"] == time_s]
    assert len(rows) == 1, f"no single fleet row at {time_s}"
    return int(rows[state].iloc[0])


def _by_id(r: RunResult) -> pd.DataFrame:
    return r.requests.set_index("request_id")


# -- restart drain modes ---------------------------------------------------------------------


def test_a_drain_that_waits_finishes_the_batch_before_going_down() -> None:
    # A late request keeps the run going past the restart.
    df = request_frame([0.0, 0.5, 1.0, 30.0], [2000, 100, 2000, 100], [1000, 10, 10, 10])
    r = _scripted([NodeAction(2.0, "restart", 0)], df, restart={"kind": "none", "drain": "wait"})
    req = _by_id(r)
    assert (req["status"] == "ok").all()
    assert req.loc[0, "replica"] == 0 and req.loc[0, "finish_s"] == pytest.approx(10.0)
    # Its queue goes back to the router when the process stops, not after the reload.
    assert req.loc[2, "replica"] == 1 and req.loc[2, "route"] == "redirected"
    assert req.loc[2, "admit_s"] == pytest.approx(10.0)
    # Draining 2..10 (the batch), loading 10..15, warming 15..20, active again.
    assert _state_at(r, 9.0, "draining") == 1
    assert _state_at(r, 12.0, "loading") == 1
    assert _state_at(r, 17.0, "warming") == 1
    assert _state_at(r, 20.0, "active") == 2


@pytest.mark.parametrize("retry_attempts", [0, 1])
def test_a_killed_restart_loses_its_requests_to_their_clients(retry_attempts: int) -> None:
    r = _scripted(
        [NodeAction(2.0, "restart", 0)],
        restart={"kind": "none", "drain": "kill"},
        retry_attempts=retry_attempts,
    )
    req = _by_id(r)
    for rid in (0, 2):
        if retry_attempts:
            assert req.loc[rid, "status"] == "ok" and req.loc[rid, "retries"] == 1
            assert req.loc[rid, "route"] == "rerouted-retry" and req.loc[rid, "replica"] == 1
        else:
            assert req.loc[rid, "status"] == "failed-lost"
            assert req.loc[rid, "finish_s"] == pytest.approx(2.0)
    # Down at once: loading 2..7, warming 7..12.
    assert _state_at(r, 2.0, "draining") == 1
    if retry_attempts:
        assert _state_at(r, 5.0, "loading") == 1
        assert _state_at(r, 9.0, "warming") == 1


def test_a_redirecting_drain_hands_its_queue_to_the_router() -> None:
    r = _scripted([NodeAction(2.0, "restart", 0)], restart={"kind": "none", "drain": "redirect"})
    req = _by_id(r)
    assert (req["status"] == "ok").all()
    assert req.loc[2, "route"] == "redirected"
    assert req.loc[2, "first_replica"] == 0 and req.loc[2, "replica"] == 1
    assert req.loc[2, "admit_s"] == pytest.approx(2.0)
    assert req.loc[0, "replica"] == 0 and req.loc[0, "finish_s"] == pytest.approx(10.0)


def test_a_drain_timeout_loses_what_is_still_running() -> None:
    r = _scripted(
        [NodeAction(2.0, "restart", 0)],
        restart={"kind": "none", "drain": "wait", "drain_timeout_s": 3.0},
    )
    req = _by_id(r)
    assert req.loc[0, "status"] == "failed-lost"
    assert req.loc[0, "finish_s"] == pytest.approx(5.0, abs=0.011)
    ev = r.events
    assert ev.loc[ev["kind"] == "drain-timeout", "time_s"].tolist() == [pytest.approx(5.0)]


# -- restart policies ----------------------------------------------------------------------

# One replica, best fit: request 0 takes slots 0..1000, request 1 1000..3000, request 2
# 3000..4000; request 1 ends at once, so 2,096 slots are free in two pieces (2,000 + 96,
# ratio 0.95) while 0 and 2 run for 9 s; request 3 (2,050 slots) fails at 2 s at 51 %
# free: a fragmentation failure at high free memory. The policies check every 4 s.
FRAGMENTED = request_frame(
    [0.0, 0.1, 0.2, 2.0, 60.0], [100, 1990, 100, 2000, 100], [900, 10, 900, 50, 10]
)


@pytest.mark.parametrize("kind", sorted(RESTART_POLICIES))
def test_every_restart_policy_restarts_as_it_says(kind: str) -> None:
    restart = {
        "kind": kind,
        "interval_s": 4.0,
        "drain": "kill",
        **RESTART_POLICIES[kind].example_fields,
    }
    data = fleet_data(
        count=1,
        on_admission_failure="reject",
        restart=restart,
        load_s=5.0,
        warmup_s=5.0,
        sample_interval_s=1.0,
    )
    r = run_fleet_data(data, FRAGMENTED)
    restarts = r.events[r.events["kind"] == "restart"]
    if kind == "none":
        assert restarts.empty
        return
    first = restarts.iloc[0]
    assert first["time_s"] == pytest.approx(4.0) and first["replica"] == 0
    assert first["cause"].startswith(kind)
    assert first["largest_free_extent_tokens"] < first["free_tokens"]  # fragmented then
    assert r.summary.fleet.restarts.get(kind, 0) >= 1
    assert r.requests.set_index("request_id").loc[[0, 2], "status"].eq("failed-lost").all()
    # Killed at 4: loading 4..9, warming 9..14; a fresh pool: ratio 1 again.
    assert _state_at(r, 6.0, "loading") == 1
    assert _state_at(r, 11.0, "warming") == 1
    ts = r.timeseries
    after = ts[(ts["time_s"] > 4.0) & (ts["time_s"] < 60.0) & (ts["trigger"] == "periodic")]
    assert len(after) and (after["largest_free_extent_tokens"] == after["free_tokens"]).all()
    assert (after["free_tokens"] == after["capacity_tokens"]).all()


# -- autoscalers -----------------------------------------------------------------------------

# Requests of 3,500 slots (one fits a replica) for 5 s, one every 2.5 s: one replica
# falls behind (a queue, capacity failures at 15 % free); then quiet until 300 s.
SURGE = request_frame(
    [2.5 * i for i in range(24)] + [300.0], [3000] * 24 + [100], [500] * 24 + [10]
)


@pytest.mark.parametrize("kind", sorted(AUTOSCALERS))
def test_every_autoscaler_scales_up_on_the_surge_and_down_after_it(kind: str) -> None:
    timing = {"step": 1, "scale_up_cooldown_s": 0.0, "scale_down_cooldown_s": 0.0}
    autoscaler = {"kind": kind, "interval_s": 10.0, **AUTOSCALERS[kind].example_fields}
    if kind != "none":
        autoscaler |= timing
    data = fleet_data(
        count=1,
        autoscaler=autoscaler,
        min_replicas=1,
        max_replicas=2,
        provision_s=10.0,
        load_s=5.0,
        warmup_s=5.0,
        sample_interval_s=5.0,
    )
    r = run_fleet_data(data, SURGE)
    assert (r.requests["status"] == "ok").all()
    ev = r.events
    ups, downs = ev[ev["kind"] == "scale-up"], ev[ev["kind"] == "scale-down"]
    summary = r.summary.fleet
    if kind == "none":
        assert ups.empty and downs.empty
        assert (r.fleet["replicas"] == 1).all()
        return
    assert ups.iloc[0]["time_s"] == pytest.approx(10.0) and ups.iloc[0]["replica"] == 1
    assert ups.iloc[0]["cause"].startswith(kind)
    assert len(downs) >= 1 and downs.iloc[0]["cause"].startswith(kind)
    assert downs.iloc[0]["time_s"] > ups.iloc[0]["time_s"]
    assert summary.scale_ups == len(ups) and summary.scale_downs == len(downs)
    assert r.fleet["replicas"].max() == 2 == summary.replicas.peak
    assert 1 in set(r.requests["replica"])  # the new node served
    down_at = downs.iloc[0]["time_s"]
    assert (r.fleet.loc[r.fleet["time_s"] > down_at + 1.0, "replicas"] <= 1).any()


def _naive_surge(**extra: Any) -> RunResult:
    autoscaler = {
        "kind": "naive",
        "interval_s": 10.0,
        "step": 1,
        "queue_threshold": 1,
        "scale_up_cooldown_s": 0.0,
        "scale_down_cooldown_s": 0.0,
        "scale_down_window_s": 50.0,
    }
    data = fleet_data(
        count=1,
        autoscaler=autoscaler,
        min_replicas=1,
        max_replicas=2,
        provision_s=100.0,
        load_s=20.0,
        warmup_s=10.0,
        sample_interval_s=5.0,
        **extra,
    )
    df = request_frame(
        [2.5 * i for i in range(80)] + [400.0], [3000] * 80 + [100], [500] * 80 + [10]
    )
    return run_fleet_data(data, df)


def test_a_bought_node_provisions_loads_and_warms_for_exactly_the_configured_times() -> None:
    r = _naive_surge()
    up = r.events[r.events["kind"] == "scale-up"].iloc[0]
    assert up["time_s"] == pytest.approx(10.0) and up["detail"] == "provision_s=100.0"
    # Provisioning 10..110, loading 110..130, warming 130..140, active from 140.
    for t, state in [(15.0, "provisioning"), (105.0, "provisioning"), (115.0, "loading")]:
        assert _state_at(r, t, state) == 1, (t, state)
    for t, state in [(125.0, "loading"), (135.0, "warming"), (145.0, "active")]:
        want = 2 if state == "active" else 1
        assert _state_at(r, t, state) == want, (t, state)
    assert _state_at(r, 135.0, "active") == 1
    served = r.requests[r.requests["replica"] == 1]
    assert len(served) and served["admit_s"].min() >= 140.0


def test_a_scaled_down_node_drains_then_is_gone_and_stops_billing() -> None:
    r = _naive_surge()
    down = r.events[r.events["kind"] == "scale-down"].iloc[0]
    assert down["replica"] == 1
    t_down = float(down["time_s"])
    fleet = r.fleet
    later = fleet[(fleet["time_s"] > t_down + 10.0) & (fleet["time_s"] < 400.0)]
    assert len(later) and (later["replicas"] == 1).all()
    assert r.requests.loc[r.requests["replica"] == 1, "finish_s"].max() <= t_down + 10.0
    # Idle when chosen, node 1 is gone at once: billed from its purchase (10 s) to then;
    # node 0 for the whole run; node 2, bought at 400 s by the last request's queue, to
    # the end.
    end_s = float(fleet["time_s"].iloc[-1])
    buys = r.events.loc[r.events["kind"] == "scale-up", "time_s"].tolist()
    assert buys == [pytest.approx(10.0), pytest.approx(400.0)]
    billed_s = end_s + (t_down - 10.0) + (end_s - 400.0)
    assert r.summary.fleet.replica_hours == pytest.approx(billed_s / 3600.0, rel=1e-12)
    assert fleet["replica_hours"].iloc[-1] == pytest.approx(billed_s / 3600.0, rel=1e-12)
    row = fleet[fleet["time_s"] == 395.0].iloc[0]
    assert row["replica_hours"] == pytest.approx((395.0 + t_down - 10.0) / 3600.0, rel=1e-12)


def test_a_busy_node_scaled_down_finishes_its_batch_then_is_gone_and_billed_until_then() -> None:
    df = request_frame([0.0, 0.5, 1.0, 30.0], [2000, 100, 2000, 100], [1000, 10, 10, 10])
    r = _scripted([NodeAction(2.0, "scale_down", 0)], df=df)
    req = _by_id(r)
    assert (req["status"] == "ok").all()
    assert req.loc[0, "replica"] == 0 and req.loc[0, "finish_s"] == pytest.approx(10.0)
    # Its queue is placed again when it goes (it would never come back for it).
    assert req.loc[2, "route"] == "redirected" and req.loc[2, "replica"] == 1
    assert _state_at(r, 9.0, "draining") == 1 and _state_at(r, 9.0, "replicas") == 2
    assert _state_at(r, 11.0, "replicas") == 1
    end_s = float(r.fleet["time_s"].iloc[-1])
    assert end_s == pytest.approx(30.1)
    assert r.summary.fleet.replica_hours * 3600.0 == pytest.approx(end_s + 10.0)


def test_the_bill_is_hours_times_gpus_times_price() -> None:
    # Two nodes of two GPUs at $3/GPU-hour for exactly one hour: 2 replica-hours, $12.
    data = fleet_data(
        pools=[
            {"name": "tp2", "count": 2, "hardware": {"tensor_parallel": 2}, "usd_per_gpu_hour": 3.0}
        ],
        sample_interval_s=600.0,
    )
    df = request_frame([0.0, 3599.0], [100, 100], [10, 100])
    r = run_fleet_data(data, df)
    end_s = float(r.fleet["time_s"].iloc[-1])
    assert end_s == pytest.approx(3600.0)
    fleet = r.summary.fleet
    assert fleet.replica_hours == pytest.approx(2.0 * end_s / 3600.0)
    assert fleet.cost_usd == pytest.approx(fleet.replica_hours * 2 * 3.0)
    assert r.fleet.loc[r.fleet["time_s"] == 1800.0, "replica_hours"].iloc[0] == pytest.approx(1.0)


# -- crashes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("retry_attempts", [0, 1])
def test_a_crash_loses_in_flight_requests_and_the_node_returns_after_repair_load_warmup(
    retry_attempts: int,
) -> None:
    df = request_frame([0.0, 0.5, 1.0, 40.0], [2000, 100, 2000, 100], [1000, 10, 10, 10])
    r = _scripted(
        [NodeAction(2.0, "crash", 0)],
        df=df,
        faults={"mttr": {"mean_s": 7.0}},
        retry_attempts=retry_attempts,
    )
    req = _by_id(r)
    for rid in (0, 2):
        if retry_attempts:
            assert req.loc[rid, "status"] == "ok" and req.loc[rid, "retries"] == 1
        else:
            assert req.loc[rid, "status"] == "failed-lost"
    crash = r.events[r.events["kind"] == "crash"]
    assert crash["time_s"].tolist() == [pytest.approx(2.0)] and crash["replica"].tolist() == [0]
    # Down 2..9 (repair), loading 9..14, warming 14..19, active from 19.
    assert _state_at(r, 5.0, "down") == 1
    assert _state_at(r, 11.0, "loading") == 1
    assert _state_at(r, 16.0, "warming") == 1
    assert _state_at(r, 18.0, "active") == 1
    assert _state_at(r, 20.0, "active") == 2
    assert r.summary.fleet.crashes == 1


def test_random_crashes_end_every_lost_request_retried_or_failed_lost() -> None:
    data = fleet_data(
        count=2,
        faults={"mtbf_s": 30.0, "mttr": {"mean_s": 5.0}},
        load_s=2.0,
        warmup_s=1.0,
        retry_attempts=1,
        router="least_outstanding",
    )
    df = request_frame([0.5 * i for i in range(200)], [300] * 200, [300] * 200)
    r = run_fleet_data(data, df)
    crashes = r.events[r.events["kind"] == "crash"]
    assert len(crashes) >= 2
    req = r.requests
    assert set(req["status"]) <= {"ok", "failed-lost", "rejected-capacity"}
    assert (req["status"] == "failed-lost").any() or (req["retries"] > 0).any()
    assert (req.loc[req["status"] == "failed-lost", "retries"] == 1).all()
    assert r.summary.fleet.crashes == len(crashes)


# -- actions that meet a node mid-lifecycle ---------------------------------------------------

MIDWAY = request_frame(
    [0.0, 0.5, 1.0, 60.0, 61.0], [2000, 100, 2000, 100, 100], [1000, 10, 10, 10, 10]
)


@pytest.mark.parametrize(
    ("actions", "gone_s"),
    [
        ([NodeAction(2.0, "crash", 0), NodeAction(4.0, "scale_down", 0)], 4.0),  # down
        ([NodeAction(2.0, "restart", 0), NodeAction(12.0, "scale_down", 0)], 12.0),  # loading
        ([NodeAction(2.0, "restart", 0), NodeAction(17.0, "scale_down", 0)], 17.0),  # warming
    ],
    ids=["down", "loading", "warming"],
)
def test_a_node_scaled_down_while_its_process_is_down_is_gone_at_once(
    actions: list[NodeAction], gone_s: float
) -> None:
    r = _scripted(actions, df=MIDWAY, faults={"mttr": {"mean_s": 7.0}})
    assert _state_at(r, gone_s + 1.0, "replicas") == 1
    assert (r.fleet.loc[r.fleet["time_s"] > gone_s, "replicas"] == 1).all()
    req = _by_id(r)
    assert req.loc[[3, 4], "replica"].tolist() == [1, 1]
    end_s = float(r.fleet["time_s"].iloc[-1])
    assert r.summary.fleet.replica_hours * 3600.0 == pytest.approx(end_s + gone_s)


def test_a_crash_during_a_restarts_drain_takes_the_crashs_repair_load_and_warmup() -> None:
    r = _scripted(
        [NodeAction(2.0, "restart", 0), NodeAction(4.0, "crash", 0)],
        df=MIDWAY,
        faults={"mttr": {"mean_s": 7.0}},
    )
    req = _by_id(r)
    assert req.loc[[0, 2], "status"].eq("failed-lost").all()
    lost_s = float(req.loc[0, "finish_s"])  # the step boundary after the crash
    assert lost_s == pytest.approx(4.0, abs=0.011)
    # Down 7 s (repair), loading 5 s, warming 5 s: active again 17 s after the loss.
    assert _state_at(r, 10.0, "down") == 1
    assert _state_at(r, 13.0, "loading") == 1
    assert _state_at(r, 20.0, "warming") == 1 and _state_at(r, 20.0, "active") == 1
    assert _state_at(r, 22.0, "active") == 2
    assert req.loc[4, "replica"] == 0  # round robin: it serves again


def test_a_crash_during_a_scale_down_drain_loses_the_batch_and_the_node_is_gone() -> None:
    r = _scripted(
        [NodeAction(2.0, "scale_down", 0), NodeAction(4.0, "crash", 0)],
        df=MIDWAY,
        faults={"mttr": {"mean_s": 7.0}},
    )
    req = _by_id(r)
    # A crash loses the queue with the batch, as on a serving node.
    assert req.loc[[0, 2], "status"].eq("failed-lost").all()
    assert (r.fleet.loc[r.fleet["time_s"] >= 5.0, "replicas"] == 1).all()
    end_s = float(r.fleet["time_s"].iloc[-1])
    lost_s = float(req.loc[0, "finish_s"])
    assert r.summary.fleet.replica_hours * 3600.0 == pytest.approx(end_s + lost_s)
