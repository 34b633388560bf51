"""Routers that read no load signal: round robin and (seeded) uniform random."""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.routing.base import Router, RouteRequest, RouterView, up_indices


class RoundRobin(Router):
    """Cycle through the views by index, skipping those that are down: the next up view
    at or after the cursor, wrapping; the cursor then moves past the choice."""

    reads_request = False
    reads_memory = False

    def __init__(self) -> None:
        self._cursor = 0

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        n = len(views)
        for k in range(n):
            i = (self._cursor + k) % n
            if views[i].up:
                self._cursor = i + 1
                return i
        return None


class RandomRouter(Router):
    """A uniformly random up view, from its own generator seeded by the config."""

    reads_request = False
    reads_memory = False

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        if not ups:
            return None
        return ups[int(self._rng.integers(len(ups)))]
