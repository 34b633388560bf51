"""Routing in a fleet run: every request lands where its router says (requests'
``replica`` / ``first_replica`` / ``route``), stale views differ from fresh ones, and
client retries go back to the refusing replica (pinned) or through the router."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.fleet import evenly, fleet_data, run_fleet_data
from support.scenarios import request_frame

from policies.routing.registry import ROUTERS


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_every_router_places_every_request_on_a_replica_of_the_fleet(kind: str) -> None:
    r = run_fleet_data(fleet_data(count=3, router=kind), evenly(30, 0.5))
    req = r.requests
    assert (req["status"] == "ok").all()
    assert (req["route"] == "routed").all()
    assert (req["replica"] == req["first_replica"]).all()
    assert set(req["replica"]) <= {0, 1, 2}


def test_round_robin_alternates() -> None:
    r = run_fleet_data(fleet_data(count=3, router="round_robin"), evenly(7, 1.0))
    assert r.requests["replica"].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_spreads_concurrent_requests() -> None:
    # Each request runs 10 s (1000 steps of 10 ms): the three overlap.
    df = evenly(3, 0.1, prompt=100, output=1000)
    r = run_fleet_data(fleet_data(count=2, router="least_outstanding"), df)
    assert r.requests["replica"].tolist() == [0, 1, 0]


def test_length_pools_sends_long_requests_to_the_long_pool() -> None:
    df = request_frame([0.0, 1.0, 2.0, 3.0], [100, 1000, 100, 2000], [10, 10, 10, 10])
    router = {"kind": "length_pools", "threshold_tokens": 500, "long_replicas": [2]}
    r = run_fleet_data(fleet_data(count=3, router=router), df)
    assert r.requests["replica"].tolist() == [0, 2, 0, 2]


def test_fragmentation_aware_picks_the_best_fitting_largest_extent() -> None:
    # Request 0 (tie: replica 0) holds 3,000 of replica 0's 4,096 slots for 20 s; then
    # request 1 (need 500) fits both and best fit is the smaller extent (replica 0),
    # request 2 (need 2,000) fits only replica 1.
    df = request_frame([0.0, 1.0, 2.0], [2000, 400, 1900], [1000, 100, 100])
    aware = run_fleet_data(fleet_data(count=2, router="fragmentation_aware"), df)
    assert aware.requests["replica"].tolist() == [0, 0, 1]
    least = run_fleet_data(fleet_data(count=2, router="least_outstanding"), df)
    assert least.requests["replica"].tolist() == [0, 1, 0]


def test_session_affinity_keeps_a_session_on_one_replica() -> None:
    n = 24
    df = evenly(n, 0.5)
    df["session_id"] = pd.array([i % 4 for i in range(n)], dtype="Int64")
    r = run_fleet_data(fleet_data(count=3, router="session_affinity"), df)
    req = r.requests.merge(df[["request_id", "session_id"]], on="request_id")
    assert (req.groupby("session_id")["replica"].nunique() == 1).all()
    assert req["replica"].nunique() > 1


def test_stale_views_send_a_burst_to_the_replica_that_looked_idle() -> None:
    df = evenly(3, 0.1, prompt=100, output=1000)
    fresh = run_fleet_data(fleet_data(count=2, router="least_outstanding"), df)
    stale = run_fleet_data(
        fleet_data(count=2, router="least_outstanding", router_refresh_s=10.0), df
    )
    assert fresh.requests["replica"].tolist() == [0, 1, 0]
    assert stale.requests["replica"].tolist() == [0, 0, 0]


def test_a_router_that_counts_what_it_routed_is_not_fooled_by_stale_views() -> None:
    df = evenly(3, 0.1, prompt=100, output=1000)
    stale = run_fleet_data(fleet_data(count=2, router="least_in_flight", router_refresh_s=10.0), df)
    assert stale.requests["replica"].tolist() == [0, 1, 0]  # as fresh least_outstanding


def test_least_in_flight_on_stale_views_is_least_outstanding_on_fresh_ones() -> None:
    """fragsim dispatches and a replica takes a request in one instant, so the router's
    own count is the replica's waiting + running at each decision: the same choices,
    request for request, as least outstanding reading fresh views -- and not those of
    least outstanding reading the same stale views."""
    rng = np.random.default_rng(3)
    n = 400
    arrivals = np.cumsum(rng.exponential(0.05, n))
    df = request_frame(
        arrivals.tolist(), rng.integers(50, 800, n).tolist(), rng.integers(5, 200, n).tolist()
    )

    def frame(router: str, refresh_s: float) -> pd.DataFrame:
        data = fleet_data(count=4, router=router, router_refresh_s=refresh_s, mode="fast")
        return run_fleet_data(data, df).requests.sort_values("request_id").reset_index(drop=True)

    counted = frame("least_in_flight", 2.0)
    pd.testing.assert_frame_equal(counted, frame("least_outstanding", 0.0))
    scraped = frame("least_outstanding", 2.0)
    assert (counted["replica"] != scraped["replica"]).sum() > n // 10


def _refused_then_retried(reroute: bool):  # type: ignore[no-untyped-def]
    # Round robin: 0 -> r0 (3,000 slots for 20 s), 1 -> r1, 2 -> r0: refused (no room),
    # its client retries 1 s later.
    df = request_frame([0.0, 0.5, 1.0], [2000, 100, 2000], [1000, 10, 10])
    data = fleet_data(
        count=2,
        router="round_robin",
        on_admission_failure="reject",
        retry_attempts=1,
        retry={"reroute": reroute},
    )
    return run_fleet_data(data, df).requests.set_index("request_id")


def test_a_pinned_retry_lands_on_the_replica_that_refused_it() -> None:
    req = _refused_then_retried(reroute=False)
    assert req.loc[2, "route"] == "pinned-retry"
    assert req.loc[2, "first_replica"] == 0 and req.loc[2, "replica"] == 0
    assert req.loc[2, "retries"] == 1
    assert req.loc[2, "status"] == "rejected-capacity"


def test_a_rerouted_retry_goes_through_the_router() -> None:
    req = _refused_then_retried(reroute=True)
    assert req.loc[2, "route"] == "rerouted-retry"
    assert req.loc[2, "first_replica"] == 0 and req.loc[2, "replica"] == 1
    assert req.loc[2, "retries"] == 1
    assert req.loc[2, "status"] == "ok"
