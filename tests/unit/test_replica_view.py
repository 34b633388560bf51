"""A replica fed by a caller (a router process calling ``Replica.submit`` at each arrival)
serves exactly as one fed its own list, in both modes; its read-only view
(``Replica.view``) reads the same state at the same instants in fast and exact mode."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy
from support.allocators import registered_kinds

from policies.allocators.base import PoolSpec
from policies.allocators.registry import ALLOCATORS
from policies.routing.base import RouterView
from sim.engine.batch import Group, SchedulerConfig
from sim.engine.outlet import ReplicaOutlet
from sim.engine.replica import Replica
from sim.fleet.routeviews import AbsentView, Epoch, StaleView
from sim.latency.models import ConstantLatency


class _Log(ReplicaOutlet):
    """Replica hooks that keep every ended request."""

    def __init__(self) -> None:
        self.done: list[Group] = []

    def on_done(self, replica: Replica, group: Group) -> None:
        self.done.append(group)


def _rows(seed: int, n: int) -> list[tuple[float, int, int]]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.05, n))
    prompts = rng.integers(1, 600, n)
    outputs = rng.integers(1, 300, n)
    return [
        (round(float(a), 6), int(p), int(o)) for a, p, o in zip(t, prompts, outputs, strict=True)
    ]


def _serve(
    kind: str,
    how: str,
    exact: bool,
    rows: list[tuple[float, int, int]],
    *,
    watch: bool = True,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    """Run one replica over ``rows``: ``feed`` (its own list), ``submit`` (a router
    process, no hint) or ``hinted`` (a router announcing its next arrival). Returns the
    request records, view readings at 0.37 s intervals (none unless ``watch``) and the
    SimPy events processed."""
    env = simpy.Environment()
    spec = PoolSpec(capacity_tokens=6_000, kv_bytes_per_token=524_288, max_seq_tokens=2048)
    config = ALLOCATORS[kind].model_validate({"kind": kind})
    log = _Log()
    replica = Replica(
        env,
        0,
        SchedulerConfig(max_num_seqs=32, max_num_batched_tokens=2048, max_seq_tokens=2048),
        lambda: config.build(spec),
        ConstantLatency(step_s=0.01),
        outlet=log,
        exact=exact,
    )
    groups = [Group(i, a, p, o) for i, (a, p, o) in enumerate(rows)]
    if how == "feed":
        replica.feed(groups)
    else:

        def router() -> Generator[simpy.Event, Any, None]:
            for i, g in enumerate(groups):
                if g.arrival_s > env.now:
                    yield env.timeout(g.arrival_s - env.now)
                nxt = (
                    groups[i + 1].arrival_s if how == "hinted" and i + 1 < len(groups) else math.inf
                )
                replica.submit(g, nxt)

        env.process(router())
    views: list[tuple[Any, ...]] = []

    def watcher() -> Generator[simpy.Event, Any, None]:
        view = replica.view
        while True:
            yield env.timeout(0.37)
            replica.observe()  # the owner brings it to now; the view only reads
            views.append(
                (
                    round(env.now, 9),
                    view.waiting_requests,
                    view.running_requests,
                    view.running_seqs,
                    view.free_tokens,
                    view.largest_free_extent_tokens,
                    round(view.kv_usage, 12),
                    view.up,
                )
            )

    if watch:
        env.process(watcher())
    env.run(until=rows[-1][0] + 120.0)
    records = sorted(
        (
            g.request_id,
            g.status,
            round(g.admit_s, 6),
            round(g.first_token_s, 6),
            round(g.finish_s, 6),
        )
        for g in log.done
    )
    events = next(env._eid) - len(env._queue)  # SimPy 4 internals: events processed
    return records, views, events


@pytest.mark.parametrize("kind", registered_kinds())
def test_a_routed_replica_serves_as_a_fed_one(kind: str) -> None:
    rows = _rows(7, 300)
    want, _, _ = _serve(kind, "feed", False, rows, watch=False)
    assert len(want) > len(rows) // 2  # a static pool serves fewer in the window
    for how in ("submit", "hinted"):
        for exact in (False, True):
            got, _, _ = _serve(kind, how, exact, rows)  # read by the watcher too
            assert got == want, (how, exact)


@pytest.mark.parametrize("kind", registered_kinds())
def test_the_view_reads_the_same_state_in_fast_and_exact_mode(kind: str) -> None:
    rows = _rows(11, 300)
    _, fast, _ = _serve(kind, "feed", False, rows)
    _, exact, _ = _serve(kind, "feed", True, rows)
    assert len(fast) > 100
    assert fast == exact
    assert any(v[1] for v in fast) and any(v[2] for v in fast)  # queues and batches seen
    assert all(0.0 <= v[6] <= 1.0 for v in fast)


def test_an_announced_next_arrival_saves_wakeups() -> None:
    rows = _rows(3, 400)
    _, _, plain = _serve("paged", "submit", False, rows)
    _, _, hinted = _serve("paged", "hinted", False, rows)
    assert hinted < plain


@pytest.mark.parametrize("exact", [False, True])
def test_replicas_sharing_an_environment_each_serve_as_alone(exact: bool) -> None:
    """Two replicas on one SimPy environment (a fleet) do not wait for each other at an
    instant, and each serves its requests exactly as it would alone."""
    rows_a, rows_b = _rows(5, 150), _rows(6, 150)

    def serve(feeds: list[list[tuple[float, int, int]]]) -> list[list[tuple[Any, ...]]]:
        env = simpy.Environment()
        spec = PoolSpec(capacity_tokens=6_000, max_seq_tokens=2048)
        config = ALLOCATORS["paged"].model_validate({"kind": "paged"})
        logs = []
        for i, rows in enumerate(feeds):
            log = _Log()
            replica = Replica(
                env,
                i,
                SchedulerConfig(max_num_seqs=32, max_num_batched_tokens=2048, max_seq_tokens=2048),
                lambda: config.build(spec),
                ConstantLatency(step_s=0.01),
                outlet=log,
                exact=exact,
            )
            replica.feed([Group(j, a, p, o) for j, (a, p, o) in enumerate(rows)])
            logs.append(log)
        env.run(until=200.0)
        return [sorted((g.request_id, g.status, g.finish_s) for g in log.done) for log in logs]

    together = serve([rows_a, rows_b])
    assert together == [serve([rows_a])[0], serve([rows_b])[0]]
    assert len(together[0]) == len(rows_a) and len(together[1]) == len(rows_b)


def test_every_view_a_router_may_get_has_every_field_of_the_router_contract() -> None:
    """The contract's field list is kept once (``RouterView``): the live view, a stale
    snapshot of it and a node without a process answer each field."""
    fields = [name for name in vars(RouterView) if not name.startswith("_")]
    env = simpy.Environment()
    spec = PoolSpec(capacity_tokens=6_000, kv_bytes_per_token=524_288, max_seq_tokens=2048)
    replica = Replica(
        env,
        3,
        SchedulerConfig(max_num_seqs=4, max_seq_tokens=2048),
        lambda: ALLOCATORS["paged"].model_validate({"kind": "paged"}).build(spec),
        ConstantLatency(step_s=0.01),
    )
    for view in (replica.view, StaleView(replica.view, Epoch()), AbsentView(3)):
        assert {name: type(getattr(view, name)).__name__ for name in fields}
        assert view.replica_id == 3
