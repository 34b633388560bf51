"""Every registered router, on any fleet of views and any request sequence: an up
replica's index, or None exactly when no replica is up; views untouched; the same
choices from a second router built from the same config."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.routing.base import RouteRequest
from policies.routing.registry import ROUTERS, parse_router


@dataclasses.dataclass(frozen=True)
class _View:
    replica_id: int
    up: bool
    restarts: int
    waiting_requests: int
    outstanding_requests: int
    in_flight_requests: int
    largest_free_extent_tokens: int
    kv_usage: float


_views = st.builds(
    _View,
    replica_id=st.integers(0, 2**40),
    up=st.booleans(),
    restarts=st.integers(0, 3),
    waiting_requests=st.integers(0, 50),
    outstanding_requests=st.integers(0, 100),
    in_flight_requests=st.integers(0, 100),
    largest_free_extent_tokens=st.integers(0, 1 << 20),
    kv_usage=st.floats(0.0, 1.0),
)
_fleets = st.lists(_views, max_size=8, unique_by=lambda v: v.replica_id)
_requests = st.builds(
    RouteRequest,
    request_id=st.integers(0, 1000),
    arrival_s=st.floats(0.0, 1e6),
    prompt_tokens=st.integers(1, 1 << 20),
    output_tokens=st.integers(0, 1 << 16),
    num_seqs=st.integers(1, 8),
    session_id=st.none() | st.integers(-(2**63), 2**63),
    prefix_hashes=st.lists(st.integers(0, 20), max_size=6).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(ROUTERS)),
    steps=st.lists(st.tuples(_requests, _fleets), max_size=12),
)
def test_any_router_on_any_fleet(kind: str, steps: list[tuple[RouteRequest, list[_View]]]) -> None:
    config = parse_router({"kind": kind})
    first, second = config.build(), config.build()
    for request, views in steps:
        before = list(views)
        i = first.choose(request, views)
        assert views == before
        assert i == second.choose(request, views)
        if any(v.up for v in views):
            assert i is not None and 0 <= i < len(views) and views[i].up
        else:
            assert i is None
