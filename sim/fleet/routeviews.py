"""The replica views a router reads: fresh (every read brings the replica up to now) or
stale (load signals as of the last refresh, as a gateway that scrapes its endpoints'
metrics every ``refresh_s``). ``up`` is always fresh: a replica that went down or
started draining is out of rotation at once (endpoint readiness), only its load
signals lag.

A stale snapshot is taken lazily: at the first routing decision at or after each
refresh time, each field read at most once per refresh, and only the fields the
router reads (a router that reads the queue never materialises KV usage)."""

from __future__ import annotations

from typing import Any

import simpy

from sim.engine.view import ReplicaView

_FIELDS = (
    "restarts",
    "waiting_requests",
    "outstanding_requests",
    "largest_free_extent_tokens",
    "kv_usage",
)


class AbsentView:
    """A node without a serving process yet (provisioning, loading): never up."""

    __slots__ = ("replica_id",)

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id

    up = False
    uptime_s = 0.0
    restarts = 0
    waiting_requests = 0
    running_requests = 0
    outstanding_requests = 0
    largest_free_extent_tokens = 0
    free_tokens = 0
    kv_usage = 0.0


class StaleView:
    """A replica's load signals as of the refresh that made it (read lazily)."""

    __slots__ = ("_cache", "_live")

    def __init__(self, live: Any) -> None:
        self._live = live
        self._cache: dict[str, Any] = {}

    @property
    def replica_id(self) -> int:
        return self._live.replica_id

    @property
    def up(self) -> bool:
        return self._live.up

    def _read(self, name: str) -> Any:
        cache = self._cache
        if name not in cache:
            cache[name] = getattr(self._live, name)
        return cache[name]

    @property
    def restarts(self) -> int:
        return self._read("restarts")

    @property
    def waiting_requests(self) -> int:
        return self._read("waiting_requests")

    @property
    def outstanding_requests(self) -> int:
        return self._read("outstanding_requests")

    @property
    def largest_free_extent_tokens(self) -> int:
        return self._read("largest_free_extent_tokens")

    @property
    def kv_usage(self) -> float:
        return self._read("kv_usage")


class RouteViews:
    """One view per node, indexed by replica id (gone nodes stay, never up)."""

    def __init__(self, env: simpy.Environment, refresh_s: float) -> None:
        self.env = env
        self.refresh_s = refresh_s
        self.live: list[Any] = []
        self._stale: list[Any] = []
        self._next_refresh_s = -1.0

    def set(self, replica_id: int, view: ReplicaView | AbsentView) -> None:
        if replica_id == len(self.live):
            self.live.append(view)
        else:
            self.live[replica_id] = view
        self._next_refresh_s = -1.0  # membership changed: snapshot again

    def current(self) -> list[Any]:
        if self.refresh_s <= 0:
            return self.live
        now = self.env.now
        if now >= self._next_refresh_s:
            self._stale = [v if isinstance(v, AbsentView) else StaleView(v) for v in self.live]
            # The refresh grid: every refresh_s from t = 0.
            self._next_refresh_s = (now // self.refresh_s + 1) * self.refresh_s
        return self._stale
