"""Routers that balance a load signal: least outstanding requests, least in-flight
requests (the router's own count), join the shortest queue, power of two choices, least
KV usage, and sequence-length-aware pools."""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.routing.base import (
    Router,
    RouteRequest,
    RouterView,
    in_flight,
    least,
    outstanding,
    up_indices,
)


class LeastOutstanding(Router):
    """The up view with the fewest waiting plus running requests."""

    reads_request = False
    reads_memory = False
    views_only = True

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        loads = [(v.outstanding_requests, i) for i, v in enumerate(views) if v.up]
        return min(loads)[1] if loads else None


class LeastInFlight(Router):
    """The up view with the fewest requests the router itself has in flight there
    (``in_flight_requests``: counted at dispatch and completion, never scraped), as
    llm-d's inference scheduler, the Gateway API inference extension and BLIS keep it.
    With ``power_of_two_seed`` set, of two sampled up views (Envoy's least-request
    balancer, which also counts its own active requests)."""

    reads_request = False
    reads_memory = False

    def __init__(self, power_of_two_seed: int | None = None) -> None:
        self._rng = None if power_of_two_seed is None else np.random.default_rng(power_of_two_seed)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        if self._rng is None or len(ups) <= 1:
            return least(views, ups, in_flight)
        picks = self._rng.choice(len(ups), size=2, replace=False)
        return least(views, sorted(ups[int(p)] for p in picks), in_flight)


class ShortestQueue(Router):
    """Join the shortest queue: the up view with the fewest waiting (not yet admitted)
    requests."""

    reads_request = False
    reads_memory = False
    views_only = True

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        queues = [(v.waiting_requests, i) for i, v in enumerate(views) if v.up]
        return min(queues)[1] if queues else None


class LeastKvUsage(Router):
    """The up view whose KV pool is least used (owned share of its capacity)."""

    reads_request = False
    views_only = True

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        usages = [(v.kv_usage, i) for i, v in enumerate(views) if v.up]
        return min(usages)[1] if usages else None


class PowerOfTwo(Router):
    """Power of two choices: sample two distinct up views (the only one when one is up)
    with the config's seeded generator; send to the one with fewer outstanding requests
    (the lower index on ties). Reads the signal of those two only."""

    reads_request = False
    reads_memory = False

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        if len(ups) <= 1:
            return ups[0] if ups else None
        picks = self._rng.choice(len(ups), size=2, replace=False)
        return least(views, sorted(ups[int(p)] for p in picks), outstanding)


class LengthPools(Router):
    """Sequence-length-aware pools: a request whose prompt + output tokens exceed
    ``threshold_tokens`` goes to the long pool (``long_indices``), any other to the rest;
    within a pool, least outstanding. When none of a pool's views is up the request
    spills over to the other pool (a refusal is only for "no replica is up"). Indices
    past the end of ``views`` are ignored."""

    reads_memory = False

    def __init__(self, threshold_tokens: int, long_indices: Sequence[int]) -> None:
        self.threshold_tokens = threshold_tokens
        self._long = frozenset(long_indices)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        is_long = request.total_tokens > self.threshold_tokens
        own = [i for i in ups if (i in self._long) == is_long]
        return least(views, own or ups, outstanding)
