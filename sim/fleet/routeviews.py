"""The replica views a router reads: fresh (signals as of the routing decision) or
stale (load signals as of the last refresh, as a gateway that scrapes its endpoints'
metrics every ``refresh_s``). Views only read (``sim.engine.view``); for a router that
reads memory (``Router.reads_memory``) the route views bring every replica to the
decision's instant first (``Replica.observe``): at each decision when fresh, at each
refresh when stale. Request counts need no such step (they change only at a replica's
decisions). ``up`` is always fresh: a replica that went down or
started draining is out of rotation at once (endpoint readiness), only its load
signals lag, and so is ``in_flight_requests``, the router's own count of what it
dispatched (it needs no scrape).

A stale snapshot is taken lazily: at the first routing decision at or after each
refresh time, each field read at most once per refresh, and only the fields the
router reads (a router that reads the queue never materialises KV usage).

Cost. A router reads ``up`` and a signal of every view for every request, so a
snapshot holds each signal in a plain field with a bit saying whether it was read in
the current refresh: a refresh only bumps a shared epoch (a snapshot notices at its
next read), and ``up`` is copied at the refresh. ``up`` changes only when the fleet
makes a node routable or not (a lifecycle state change, ``Replica.accepting``;
``Replica.up`` changes only while ``accepting`` is already False): the fleet calls
:meth:`RouteViews.invalidate` there, and the next decision copies ``up`` again, keeping
the load signals it has. Between two such changes a router whose choice depends on
the views alone (``Router.views_only``: the load routers) would answer the same again:
:meth:`RouteViews.choose` reuses its last answer (with a 50 ms refresh on the Azure
trace x16, most routing decisions read no view). Compiled with the
engine (no attribute tricks).
"""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.routing.base import Router, RouteRequest
from sim.engine.replica import Replica
from sim.engine.view import ReplicaView


class AbsentView:
    """A node without a serving process yet (provisioning, loading): never up."""

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.up = False
        self.uptime_s = 0.0
        self.restarts = 0
        self.waiting_requests = 0
        self.running_requests = 0
        self.outstanding_requests = 0
        self.in_flight_requests = 0
        self.largest_free_extent_tokens = 0
        self.free_tokens = 0
        self.kv_usage = 0.0


class Epoch:
    """The refresh count of a set of snapshots (shared, so a refresh is O(1))."""

    def __init__(self) -> None:
        self.count = 0


class StaleView:
    """A replica's load signals as of the last refresh, ``up`` as of the last routability
    change (see the module docstring): each signal read from the live view at its first
    read after a refresh, then kept until the next. The fields are the router
    contract's (``policies.routing.base.RouterView``; a test holds them to it)."""

    def __init__(self, live: ReplicaView, epoch: Epoch) -> None:
        self._live = live
        self._epoch = epoch
        self.replica_id: int = live.replica_id
        self.up: bool = live.up
        self._read_in = -1
        """The refresh whose signals the fields hold."""
        self._read = 0
        """Which of them were read in that refresh (bits)."""
        self._restarts = 0
        self._waiting = 0
        self._outstanding = 0
        self._largest = 0
        self._kv_usage = 0.0

    def _has(self, bit: int) -> bool:
        """Whether the signal ``bit`` was read in this refresh (marked read if not)."""
        if self._read_in != self._epoch.count:
            self._read_in = self._epoch.count
            self._read = 0
        if self._read & bit:
            return True
        self._read |= bit
        return False

    @property
    def restarts(self) -> int:
        if not self._has(1):
            self._restarts = self._live.restarts
        return self._restarts

    @property
    def waiting_requests(self) -> int:
        if not self._has(2):
            self._waiting = self._live.waiting_requests
        return self._waiting

    @property
    def outstanding_requests(self) -> int:
        if not self._has(4):
            self._outstanding = self._live.outstanding_requests
        return self._outstanding

    @property
    def in_flight_requests(self) -> int:
        """The router's own count (``ReplicaView.in_flight_requests``): always current,
        a refresh does not apply to what the router counts itself."""
        return self._live.in_flight_requests

    @property
    def largest_free_extent_tokens(self) -> int:
        if not self._has(8):
            self._largest = self._live.largest_free_extent_tokens
        return self._largest

    @property
    def kv_usage(self) -> float:
        if not self._has(16):
            self._kv_usage = self._live.kv_usage
        return self._kv_usage

    def copy_up(self) -> None:
        self.up = self._live.up


class RouteViews:
    """One view per node, indexed by replica id (gone nodes stay, never up)."""

    def __init__(self, now_s: Callable[[], float], refresh_s: float) -> None:
        self._now_s = now_s
        """The fleet's instant (a routing decision's time)."""
        self.refresh_s = refresh_s
        self.live: list[Any] = []
        self._replicas: list[Replica | None] = []
        """The replica behind each live view (None: an ``AbsentView``)."""
        self._stale: list[Any] = []
        self._snapshots: list[StaleView] = []
        """The ``StaleView`` entries of ``_stale`` (reused from refresh to refresh)."""
        self._epoch = Epoch()
        self._next_refresh_s = -1.0
        self._up_stale = False
        self._version = 0
        """Changes whenever what :meth:`current`'s views say may have changed: at each
        refresh, routability change and membership change of stale views, and at every
        call for live views (whose signals change with every read)."""
        self._choice: int | None = None
        self._choice_version = -1
        """A ``views_only`` router's last choice and the version it was made on."""

    def set(self, replica_id: int, view: Any, replica: Replica | None = None) -> None:
        """The view of node ``replica_id``: a live ``ReplicaView`` of ``replica`` or an
        ``AbsentView`` (``replica`` None)."""
        if replica_id == len(self.live):
            self.live.append(view)
            self._replicas.append(replica)
        else:
            self.live[replica_id] = view
            self._replicas[replica_id] = replica
        self._next_refresh_s = -1.0  # membership changed: snapshot again

    def choose(
        self, router: Router, request: RouteRequest, views_only: bool, reads_memory: bool = True
    ) -> int | None:
        """``router.choose(request, self.current(reads_memory))``; with ``views_only``
        (the router's ``Router.views_only``, read by the caller: compiled code would not
        see an interpreted subclass's class attribute; so is ``reads_memory``), its last
        choice again while the views cannot have changed since it was made (stale views
        within one refresh, no routability change): the same answer without asking (the
        first decision of the refresh made its reads)."""
        views = self.current(reads_memory)
        if not views_only:
            return router.choose(request, views)
        if self._version != self._choice_version:
            self._choice = router.choose(request, views)
            self._choice_version = self._version
        return self._choice

    def invalidate(self) -> None:
        """A node's routability may have changed: the next decision reads ``up`` again
        (its load signals stay as of the last refresh)."""
        self._up_stale = True

    def current(self, reads_memory: bool = True) -> list[Any]:
        """The views a decision now reads (``reads_memory``: the replicas brought to now
        first where the views' signals are taken now)."""
        if self.refresh_s <= 0:
            self._version += 1
            if reads_memory:
                self._catch_up()
            return self.live
        now = self._now_s()
        if now >= self._next_refresh_s:
            if reads_memory:
                self._catch_up()
            self._epoch.count += 1
            if self._next_refresh_s < 0:  # membership changed: new snapshot objects
                epoch = self._epoch
                self._stale = [
                    v if isinstance(v, AbsentView) else StaleView(v, epoch) for v in self.live
                ]
                self._snapshots = [v for v in self._stale if isinstance(v, StaleView)]
            else:
                for snap in self._snapshots:
                    snap.copy_up()
            self._up_stale = False
            self._version += 1
            # The refresh grid: every refresh_s from t = 0.
            self._next_refresh_s = (now // self.refresh_s + 1) * self.refresh_s
        elif self._up_stale:
            if reads_memory:  # a view up again is read first now
                self._catch_up()
            for snap in self._snapshots:
                snap.copy_up()
            self._up_stale = False
            self._version += 1
        return self._stale

    def _catch_up(self) -> None:
        """Bring every replica to the fleet's instant (decode steps completed inside a
        run applied), so that its memory signals are read as of now."""
        for replica in self._replicas:
            if replica is not None:
                replica.observe()
