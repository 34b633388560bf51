"""``RouteViews.choose``: a router whose choice depends on the views alone
(``Router.views_only``) is asked once per state of its views -- again after a refresh of
stale views, a routability change or a membership change, every time on live views --
and its reused answer is the one it would have given."""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from policies.allocators.base import PoolSpec
from policies.allocators.registry import ALLOCATORS
from policies.routing.base import NO_REQUEST, Router, RouteRequest, RouterView
from policies.routing.load import LeastOutstanding
from sim.engine.batch import Group, SchedulerConfig
from sim.engine.replica import Replica
from sim.fleet.routeviews import RouteViews
from sim.latency.models import ConstantLatency


class CountingAny(Router):
    """Least outstanding (``LeastOutstanding``'s answer), counting the calls it gets;
    not declared ``views_only``: asked every time."""

    reads_request = False

    def __init__(self) -> None:
        self.calls = 0
        self._least = LeastOutstanding()

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        self.calls += 1
        return self._least.choose(request, views)


class CountingLeast(CountingAny):
    """The same, declared ``views_only`` (as ``LeastOutstanding`` is)."""

    views_only = True


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _replicas(env: simpy.Environment, n: int) -> list[Replica]:
    spec = PoolSpec(capacity_tokens=6_000, kv_bytes_per_token=524_288, max_seq_tokens=2048)
    return [
        Replica(
            env,
            i,
            SchedulerConfig(max_num_seqs=4, max_seq_tokens=2048),
            lambda: ALLOCATORS["paged"].model_validate({"kind": "paged"}).build(spec),
            ConstantLatency(step_s=0.01),
        )
        for i in range(n)
    ]


def _views(refresh_s: float, clock: Clock, replicas: list[Replica]) -> RouteViews:
    views = RouteViews(clock, refresh_s)
    for r in replicas:
        views.set(r.replica_id, r.view)
    return views


def _submit(replica: Replica, request_id: int) -> None:
    replica.submit(Group(request_id, 0.0, 10, 10))


def test_a_views_only_router_is_asked_once_per_refresh_and_answers_as_if_asked() -> None:
    env, clock = simpy.Environment(), Clock()
    replicas = _replicas(env, 3)
    router = CountingLeast()
    views = _views(0.05, clock, replicas)
    reference = CountingLeast()
    for k in range(4):
        choice = views.choose(router, NO_REQUEST, router.views_only)
        assert choice == reference.choose(NO_REQUEST, views.current())
        assert choice is not None
        _submit(replicas[choice], k)  # stale views do not see it before the next refresh
    assert router.calls == 1
    clock.now_s = 0.05  # a refresh: the views may say something else
    assert views.choose(router, NO_REQUEST, router.views_only) == 1
    assert router.calls == 2
    replicas[1].accepting = False  # a routability change, told to the views
    views.invalidate()
    assert views.choose(router, NO_REQUEST, router.views_only) == 2
    assert router.calls == 3
    assert views.choose(router, NO_REQUEST, router.views_only) == 2
    assert router.calls == 3


def test_a_router_without_views_only_or_live_views_is_asked_every_time() -> None:
    env, clock = simpy.Environment(), Clock()
    other = CountingAny()
    stale = _views(0.05, clock, _replicas(env, 2))
    for _ in range(3):
        stale.choose(other, NO_REQUEST, other.views_only)
    assert other.calls == 3
    replicas = _replicas(env, 2)
    live = _views(0.0, clock, replicas)
    router = CountingLeast()
    assert live.choose(router, NO_REQUEST, router.views_only) == 0
    _submit(replicas[0], 0)
    assert (
        live.choose(router, NO_REQUEST, router.views_only) == 1
    )  # live views see the request at once
    assert router.calls == 2
