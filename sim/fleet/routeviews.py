"""The replica views a router reads: fresh (every read brings the replica up to now) or
stale (load signals as of the last refresh, as a gateway that scrapes its endpoints'
metrics every ``refresh_s``). ``up`` is always fresh: a replica that went down or
started draining is out of rotation at once (endpoint readiness), only its load
signals lag.

A stale snapshot is taken lazily: at the first routing decision at or after each
refresh time, each field read at most once per refresh, and only the fields the
router reads (a router that reads the queue never materialises KV usage).

Cost. A router reads ``up`` and a signal of every view for every request, so a
snapshot's fields are plain attributes: a load signal is filled in by ``__getattr__``
at its first read after a refresh (later reads never reach it), and ``up`` is copied at
the refresh. ``up`` changes only when the fleet makes a node routable or not (a
lifecycle state change, ``Replica.accepting``; ``Replica.up`` changes only while
``accepting`` is already False): the fleet calls :meth:`RouteViews.invalidate` there,
and the next decision copies ``up`` again, keeping the load signals it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.routing.base import RouterView
from sim.engine.view import ReplicaView

_FIELDS = frozenset(
    name
    for name in vars(RouterView)
    if not name.startswith("_") and name not in ("replica_id", "up")
)
"""The load signals a snapshot lends lazily: the router contract's fields
(``policies.routing.base.RouterView``), less identity and ``up``."""


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
    """A replica's load signals as of the last refresh, ``up`` as of the last routability
    change (see the module docstring). No ``__slots__``: a signal read once is stored
    in the instance, so every later read is a plain attribute load."""

    def __init__(self, live: Any) -> None:
        self._live = live
        self.replica_id: int = live.replica_id
        self.up: bool = live.up

    def __getattr__(self, name: str) -> Any:
        """Only called for a field not read since the last refresh: read it now."""
        if name not in _FIELDS:
            raise AttributeError(name)
        value = getattr(self._live, name)
        self.__dict__[name] = value
        return value

    def refresh(self) -> None:
        """Forget the load signals read (a new refresh) and copy ``up`` again."""
        d = self.__dict__
        live = d["_live"]
        d.clear()
        d["_live"] = live
        d["replica_id"] = live.replica_id
        d["up"] = live.up


class RouteViews:
    """One view per node, indexed by replica id (gone nodes stay, never up)."""

    def __init__(self, now_s: Callable[[], float], refresh_s: float) -> None:
        self._now_s = now_s
        """The fleet's instant (a routing decision's time)."""
        self.refresh_s = refresh_s
        self.live: list[Any] = []
        self._stale: list[Any] = []
        self._snapshots: list[StaleView] = []
        """The ``StaleView`` entries of ``_stale`` (reused from refresh to refresh)."""
        self._next_refresh_s = -1.0
        self._up_stale = False

    def set(self, replica_id: int, view: ReplicaView | AbsentView) -> None:
        if replica_id == len(self.live):
            self.live.append(view)
        else:
            self.live[replica_id] = view
        self._next_refresh_s = -1.0  # membership changed: snapshot again

    def invalidate(self) -> None:
        """A node's routability may have changed: the next decision reads ``up`` again
        (its load signals stay as of the last refresh)."""
        self._up_stale = True

    def current(self) -> list[Any]:
        if self.refresh_s <= 0:
            return self.live
        now = self._now_s()
        if now >= self._next_refresh_s:
            if self._next_refresh_s < 0:  # membership changed: new snapshot objects
                self._stale = [v if isinstance(v, AbsentView) else StaleView(v) for v in self.live]
                self._snapshots = [v for v in self._stale if isinstance(v, StaleView)]
            else:
                for snap in self._snapshots:
                    snap.refresh()
            self._up_stale = False
            # The refresh grid: every refresh_s from t = 0.
            self._next_refresh_s = (now // self.refresh_s + 1) * self.refresh_s
        elif self._up_stale:
            for snap in self._snapshots:
                snap.__dict__["up"] = snap._live.up
            self._up_stale = False
        return self._stale
