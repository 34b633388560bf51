"""Routers (policies/routing): the contract over every registered router on plain fake
views, each router's own behaviour, their configs, and routing a small trace over real
replicas through their ``.view``."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import pytest
import simpy
from pydantic import ValidationError

from policies.allocators.base import PoolSpec
from policies.allocators.registry import parse_allocator
from policies.registry import Registry
from policies.routing.base import Router, RouteRequest, RouterView
from policies.routing.config import RouterConfig, WeightedConfig
from policies.routing.registry import ROUTERS, parse_router
from sim.engine.batch import Group, SchedulerConfig
from sim.engine.outlet import ReplicaOutlet
from sim.engine.replica import Replica
from sim.latency.models import ConstantLatency


@dataclasses.dataclass(frozen=True)
class FakeView:
    """A replica as routers see it; frozen, so a router that writes to it fails."""

    replica_id: int
    up: bool = True
    restarts: int = 0
    waiting_requests: int = 0
    outstanding_requests: int = 0
    in_flight_requests: int = 0
    largest_free_extent_tokens: int = 10_000
    kv_usage: float = 0.0


def _req(i: int = 0, prompt: int = 100, output: int = 100, **kw: Any) -> RouteRequest:
    return RouteRequest(i, float(i), prompt, output, **kw)


def _router(kind: str, **fields: Any) -> Router:
    return parse_router({"kind": kind, **fields}).build()


def _fleet(seed: int, n: int, p_up: float = 0.8) -> list[FakeView]:
    rng = np.random.default_rng(seed)
    views = []
    for i in range(n):
        waiting = int(rng.integers(0, 5))
        views.append(
            FakeView(
                replica_id=100 + i,
                up=bool(rng.random() < p_up),
                waiting_requests=waiting,
                outstanding_requests=waiting + int(rng.integers(0, 5)),
                in_flight_requests=int(rng.integers(0, 9)),
                largest_free_extent_tokens=int(rng.integers(0, 5000)),
                kv_usage=float(rng.random()),
            )
        )
    return views


def _requests(seed: int, n: int) -> list[RouteRequest]:
    rng = np.random.default_rng(seed)
    return [
        _req(
            i,
            int(rng.integers(1, 3000)),
            int(rng.integers(0, 2000)),
            num_seqs=int(rng.integers(1, 3)),
            session_id=int(rng.integers(0, 5)) if rng.random() < 0.7 else None,
            prefix_hashes=tuple(int(h) for h in rng.integers(0, 4, int(rng.integers(0, 4)))),
        )
        for i in range(n)
    ]


def _route_all(router: Router, seed: int) -> list[int | None]:
    chosen = []
    for k, request in enumerate(_requests(seed, 60)):
        views = _fleet(seed * 1000 + k, 1 + k % 6, p_up=0.3 if k % 7 == 0 else 0.8)
        before = list(views)
        i = router.choose(request, views)
        assert views == before  # nothing written (frozen views would raise, too)
        if any(v.up for v in views):
            assert i is not None and 0 <= i < len(views) and views[i].up, (k, i)
        else:
            assert i is None
        chosen.append(i)
    return chosen


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_every_router_chooses_an_up_replica_or_refuses_when_none_is(kind: str) -> None:
    for seed in (1, 2, 3):
        _route_all(_router(kind), seed)
    router = _router(kind)
    down = [FakeView(0, up=False), FakeView(1, up=False)]
    assert router.choose(_req(), down) is None
    assert router.choose(_req(), []) is None


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_every_router_is_deterministic_for_a_config(kind: str) -> None:
    config = parse_router({"kind": kind})
    assert _route_all(config.build(), 5) == _route_all(config.build(), 5)


def test_seeded_routers_follow_their_seed() -> None:
    views = [FakeView(i) for i in range(8)]
    seeded = [kind for kind, cls in ROUTERS.items() if "seed" in cls.model_fields]
    assert {"random", "power_of_two"} <= set(seeded)
    for kind in seeded:
        runs = {}
        for seed in (1, 2):
            views_load = [dataclasses.replace(v, outstanding_requests=0) for v in views]
            router = _router(kind, seed=seed)
            runs[seed] = [router.choose(_req(i), views_load) for i in range(40)]
        assert runs[1] != runs[2], kind


def test_the_real_replica_view_satisfies_the_protocol() -> None:
    replica = _replicas(simpy.Environment(), [], 1)[0]
    view: RouterView = replica.view  # checked by mypy
    assert view.up and view.outstanding_requests == 0


# -- each router -------------------------------------------------------------------------


def test_round_robin_cycles_and_skips_down_replicas() -> None:
    router = _router("round_robin")
    views = [FakeView(0), FakeView(1, up=False), FakeView(2)]
    assert [router.choose(_req(), views) for _ in range(4)] == [0, 2, 0, 2]
    views = [FakeView(i) for i in range(3)]
    assert [router.choose(_req(), views) for _ in range(4)] == [0, 1, 2, 0]  # cursor at 3


def test_random_spreads_over_up_replicas_only() -> None:
    router = _router("random", seed=3)
    views = [FakeView(0), FakeView(1, up=False), FakeView(2), FakeView(3)]
    seen = {router.choose(_req(), views) for _ in range(200)}
    assert seen == {0, 2, 3}


def test_least_outstanding_and_shortest_queue_read_their_own_signal() -> None:
    views = [
        FakeView(0, waiting_requests=3, outstanding_requests=3),
        FakeView(1, waiting_requests=0, outstanding_requests=9),
        FakeView(2, waiting_requests=1, outstanding_requests=2),
        FakeView(3, up=False),
    ]
    assert _router("least_outstanding").choose(_req(), views) == 2
    assert _router("shortest_queue").choose(_req(), views) == 1
    tied = [FakeView(0, up=False), FakeView(1), FakeView(2)]
    assert _router("shortest_queue").choose(_req(), tied) == 1  # lowest index on ties


def test_least_kv_usage() -> None:
    views = [FakeView(0, kv_usage=0.5), FakeView(1, kv_usage=0.2), FakeView(2, kv_usage=0.2)]
    assert _router("least_kv_usage").choose(_req(), views) == 1


def test_power_of_two_takes_the_less_loaded_of_two_samples() -> None:
    router = _router("power_of_two", seed=0)
    views = [FakeView(0, outstanding_requests=5), FakeView(1, outstanding_requests=1)]
    assert all(router.choose(_req(), views) == 1 for _ in range(20))
    # the busiest of three is never chosen: it loses against either other sample
    views.append(FakeView(2, outstanding_requests=9))
    assert {router.choose(_req(), views) for _ in range(50)} == {0, 1}
    assert router.choose(_req(), [FakeView(0, up=False), FakeView(1)]) == 1


def test_fragmentation_aware_picks_the_best_fitting_extent_then_falls_back() -> None:
    router = _router("fragmentation_aware")
    views = [
        FakeView(0, largest_free_extent_tokens=5000, outstanding_requests=0),
        FakeView(1, largest_free_extent_tokens=900, outstanding_requests=0),
        FakeView(2, largest_free_extent_tokens=1200, outstanding_requests=7),
        FakeView(3, largest_free_extent_tokens=1000, up=False),
    ]
    # need (400 + 200) x 2 = 1200: 1 is too small, 2 is the tightest fit, however busy
    assert router.choose(_req(prompt=400, output=200, num_seqs=2), views) == 2
    assert router.choose(_req(prompt=400, output=500), views) == 1  # 900 fits exactly
    tie = [dataclasses.replace(v, largest_free_extent_tokens=1200) for v in views[:3]]
    assert router.choose(_req(prompt=600, output=600), tie) == 0  # least outstanding
    # nothing fits 6000: least outstanding, lowest index on ties
    assert router.choose(_req(prompt=5000, output=1000), views) == 0


def test_fragmentation_aware_need_counts_every_sequence() -> None:
    router = _router("fragmentation_aware")
    views = [
        FakeView(0, largest_free_extent_tokens=300),
        FakeView(1, largest_free_extent_tokens=600),
    ]
    assert router.choose(_req(prompt=200, output=100), views) == 0
    assert router.choose(_req(prompt=200, output=100, num_seqs=2), views) == 1


def test_session_affinity_sticks_and_spills_over_under_load() -> None:
    router = _router("session_affinity", epsilon=0.25)
    views = [FakeView(i) for i in range(4)]
    homes = {s: router.choose(_req(session_id=s), views) for s in range(40)}
    assert len(set(homes.values())) == 4  # sessions spread over the ring
    for s, home in homes.items():
        assert router.choose(_req(session_id=s), views) == home  # and stick
    # load the home of session 0 past (1 + 0.25) x the mean: it spills, then comes back
    home = homes[0]
    assert home is not None
    loaded = [
        dataclasses.replace(v, outstanding_requests=9 if v.replica_id == home else 2) for v in views
    ]
    spill = router.choose(_req(session_id=0), loaded)
    assert spill is not None and spill != home
    assert router.choose(_req(session_id=0), views) == home
    # within the bound it stays: mean 3.25, 4 <= 1.25 x 3.25
    within = [
        dataclasses.replace(v, outstanding_requests=4 if v.replica_id == home else 3) for v in views
    ]
    assert router.choose(_req(session_id=0), within) == home
    # a down home: the next on the ring; no session: least outstanding
    down = [dataclasses.replace(v, up=v.replica_id != home) for v in views]
    assert router.choose(_req(session_id=0), down) not in (None, home)
    busy = [dataclasses.replace(v, outstanding_requests=5 - v.replica_id) for v in views]
    assert router.choose(_req(), busy) == 3


def test_session_affinity_follows_replica_ids_not_positions() -> None:
    router = _router("session_affinity")
    views = [FakeView(i) for i in range(5)]
    home = router.choose(_req(session_id=7), views)
    assert home is not None
    shuffled = views[::-1]
    assert shuffled[router.choose(_req(session_id=7), shuffled) or 0].replica_id == home


def test_length_pools_separate_long_and_short_requests() -> None:
    router = _router("length_pools", threshold_tokens=1000, long_replicas=[2, 3])
    views = [
        FakeView(0, outstanding_requests=4),
        FakeView(1, outstanding_requests=1),
        FakeView(2, outstanding_requests=9),
        FakeView(3, outstanding_requests=8),
    ]
    assert router.choose(_req(prompt=900, output=100), views) == 1  # 1000: not over
    assert router.choose(_req(prompt=900, output=101), views) == 3
    # the long pool down: long requests spill over rather than being refused
    no_long = [dataclasses.replace(v, up=v.replica_id < 2) for v in views]
    assert router.choose(_req(prompt=5000), no_long) == 1


def test_weighted_scorer_prefers_the_prefix_affine_replica_at_equal_load() -> None:
    router = _router("weighted")  # llm-d's 2/2/3
    views = [FakeView(i) for i in range(3)]
    hashes = (11, 12, 13, 14)
    first = router.choose(_req(prefix_hashes=hashes), views)
    assert first == 0  # all equal: lowest index
    views = [dataclasses.replace(v, kv_usage=0.1) if v.replica_id == 0 else v for v in views]
    # a little fuller, but the prefix is cached there: 3 x 1.0 outweighs 2 x 0.1
    assert router.choose(_req(prefix_hashes=(11, 12, 13, 99)), views) == 0
    assert router.choose(_req(prefix_hashes=(50, 51)), views) == 1  # no affinity: load
    # a restart empties the router's memory of the replica
    restarted = [dataclasses.replace(views[0], restarts=1), *views[1:]]
    assert router.choose(_req(prefix_hashes=hashes), restarted) == 1


def test_weighted_scorer_queue_and_kv_scores() -> None:
    router = _router("weighted", prefix_weight=0)
    views = [
        FakeView(0, waiting_requests=4, kv_usage=0.1),
        FakeView(1, waiting_requests=0, kv_usage=0.3),
        FakeView(2, waiting_requests=2, kv_usage=0.0),
    ]
    # queue scores 0, 1, 0.5; kv 0.9, 0.7, 1.0: totals 1.8, 3.4, 3.0
    assert router.choose(_req(), views) == 1


def test_weighted_scorer_forgets_least_recently_sent_hashes() -> None:
    router = _router("weighted", queue_weight=0, kv_usage_weight=0, lru_blocks=2)
    views = [FakeView(0), FakeView(1)]
    assert router.choose(_req(prefix_hashes=(1, 2)), views) == 0
    busy = [views[0], FakeView(1)]
    assert router.choose(_req(prefix_hashes=(1,)), busy) == 0
    assert router.choose(_req(prefix_hashes=(3,)), busy) == 0  # all tie at 0: index 0
    # 0 now remembers {1, 3}: 2 was evicted
    assert router.choose(_req(prefix_hashes=(2,)), busy) == 0  # no one has 2: tie


# -- configs -----------------------------------------------------------------------------


def test_parse_router_refuses_unknown_kinds_fields_and_out_of_range_values() -> None:
    with pytest.raises(ValueError, match="unknown router kind 'nope'; allowed: "):
        parse_router({"kind": "nope"})
    bad: list[dict[str, Any]] = [
        {"kind": "random", "seed": -1},
        {"kind": "random", "seed": True},  # strict: a bool is not a seed
        {"kind": "random", "seed": "3"},
        {"kind": "round_robin", "extra": 1},
        {"kind": "session_affinity", "epsilon": -0.1},
        {"kind": "session_affinity", "virtual_nodes": 0},
        {"kind": "length_pools", "long_replicas": []},
        {"kind": "length_pools", "long_replicas": [1, 1]},
        {"kind": "length_pools", "threshold_tokens": 0},
        {"kind": "weighted", "queue_weight": 0, "kv_usage_weight": 0, "prefix_weight": 0},
        {"kind": "weighted", "lru_blocks": 0},
    ]
    for data in bad:
        with pytest.raises(ValidationError):
            parse_router(data)


def test_the_weighted_preset_is_llm_d_s_default_weights() -> None:
    config = parse_router({"kind": "weighted"})
    assert isinstance(config, WeightedConfig)
    assert (config.queue_weight, config.kv_usage_weight, config.prefix_weight) == (2, 2, 3)


def test_registering_a_router_kind_twice_is_an_error() -> None:
    from typing import Literal

    class _A(RouterConfig):
        kind: Literal["a"] = "a"

    class _A2(RouterConfig):
        kind: Literal["a"] = "a"

    with pytest.raises(ValueError, match="registered twice"):
        Registry("router", [_A, _A2])


# -- over real replicas ------------------------------------------------------------------


class _Log(ReplicaOutlet):
    def __init__(self) -> None:
        self.done: list[tuple[int, Group]] = []

    def on_done(self, replica: Replica, group: Group) -> None:
        self.done.append((replica.replica_id, group))


def _replicas(
    env: simpy.Environment, kinds: Sequence[str], n: int, log: Any = None
) -> list[Replica]:
    spec = PoolSpec(capacity_tokens=6_000, kv_bytes_per_token=524_288, max_seq_tokens=2048)
    configs = [parse_allocator({"kind": k}) for k in (kinds or ["paged"] * n)]
    return [
        Replica(
            env,
            i,
            SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=2048, max_seq_tokens=2048),
            lambda c=c: c.build(spec),  # type: ignore[misc]
            ConstantLatency(step_s=0.01),
            outlet=log,
            # Exact mode: two fast-mode replicas on one environment do not get past
            # t = 0 today (each yields to the other's event at the same instant); the
            # fleet issue (11) owns that fix.
            exact=True,
        )
        for i, c in enumerate(configs)
    ]


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_every_router_routes_a_trace_over_real_replicas(kind: str) -> None:
    env = simpy.Environment()
    log = _Log()
    replicas = _replicas(env, ["best_fit", "paged", "first_fit"], 3, log)
    requests = _requests(17, 150)
    rng = np.random.default_rng(17)
    arrivals = np.cumsum(rng.exponential(0.03, len(requests)))
    requests = [
        dataclasses.replace(
            r,
            arrival_s=round(float(a), 6),
            prompt_tokens=min(r.prompt_tokens, 1500),
            output_tokens=min(r.output_tokens, 400),
        )
        for r, a in zip(requests, arrivals, strict=True)
    ]
    router = parse_router(
        {
            "kind": kind,
            **({"long_replicas": [2], "threshold_tokens": 1200} if kind == "length_pools" else {}),
        }
    ).build()
    sent: dict[int, int] = {}

    def fleet() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1.0)
        replicas[1].request_restart("kill", 2.0)  # down from about 1 s to 3 s

    def route() -> Generator[simpy.Event, Any, None]:
        for r in requests:
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            for rep in replicas:
                rep.observe()  # the owner brings them to now; views only read
            views = [rep.view for rep in replicas]
            i = router.choose(r, views)
            assert i is not None and replicas[i].up, (r.request_id, i)
            sent[r.request_id] = i
            replicas[i].submit(
                Group(
                    r.request_id,
                    r.arrival_s,
                    r.prompt_tokens,
                    r.output_tokens,
                    r.num_seqs,
                    r.prefix_hashes,
                )
            )

    env.process(fleet())
    env.process(route())
    env.run(until=float(arrivals[-1]) + 300.0)
    assert replicas[1].restarts == 1
    ended = {g.request_id: rid for rid, g in log.done}
    assert sorted(ended) == [r.request_id for r in requests]  # every request ended
    assert all(ended[k] == replicas[v].replica_id for k, v in sent.items())


def test_least_in_flight_reads_the_routers_own_count_not_the_scraped_one() -> None:
    views = [
        FakeView(0, outstanding_requests=0, in_flight_requests=4),
        FakeView(1, outstanding_requests=9, in_flight_requests=1),
        FakeView(2, outstanding_requests=1, in_flight_requests=1, up=False),
    ]
    assert _router("least_in_flight").choose(_req(), views) == 1
    assert _router("least_outstanding").choose(_req(), views) == 0
    two = _router("least_in_flight", power_of_two_seed=7)
    picks = {two.choose(_req(i), views) for i in range(40)}
    assert picks == {1}  # of two sampled up views, the one with fewer in flight
    four = [FakeView(i, in_flight_requests=i) for i in range(4)]
    sampled = [two.choose(_req(i), four) for i in range(200)]
    assert set(sampled) == {0, 1, 2}  # never the most loaded of the four: it always loses
