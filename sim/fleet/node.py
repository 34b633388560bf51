"""A node of the fleet: one replica on one node of a pool, its lifecycle state, its
bill and its failure counters; and the read-only views policies get of it
(``policies.fleet_view``).

A node's ``replica`` exists from the end of its first model load; a restart keeps the
same ``Replica`` (it goes down and comes back with a fresh allocator). ``epoch`` counts
lifecycle changes that cancel pending timers (a node scaled down while provisioning)."""

# fragsim: compiled
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from policies.fleet_view import SERVING, NodeState
from sim.engine.replica import Replica


@dataclass(eq=False)
class Node:
    replica_id: int
    pool: str
    pool_index: int
    gpus: int
    usd_per_gpu_hour: float
    state: NodeState
    state_since_s: float
    billed_from_s: float
    """When the node was bought (t = 0 for the initial fleet)."""
    replica: Replica | None = None
    epoch: int = 0
    gone_s: float = math.nan
    avoidable: bool = False
    """Bought by a scale-up whose trigger failures were all fragmentation failures."""
    bought_cause: str = ""
    pending: str = ""
    """Why the replica will go down next (a restart's or a crash's cause)."""
    failures_total: int = 0
    fragmentation_failures_total: int = 0
    high_free_failures_total: int = 0
    last_high_free_failure_s: float | None = None
    restarts_total: int = 0
    crashes_total: int = 0
    down_load_s: float = 0.0
    """The model load of the restart or crash in progress."""
    repair_s: float = 0.0
    """The repair time of the crash in progress."""

    @property
    def routable(self) -> bool:
        return self.state == "active"

    def billed_s(self, now_s: float) -> float:
        end = self.gone_s if not math.isnan(self.gone_s) else now_s
        return max(0.0, min(end, now_s) - self.billed_from_s)

    def cost_usd(self, now_s: float) -> float:
        return self.billed_s(now_s) / 3600.0 * self.gpus * self.usd_per_gpu_hour


class NodeReading:
    """:class:`policies.fleet_view.NodeView` over a live node (reads are brought up to now
    through the replica's own view)."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def replica_id(self) -> int:
        return self._node.replica_id

    @property
    def pool(self) -> str:
        return self._node.pool

    @property
    def state(self) -> NodeState:
        return self._node.state

    @property
    def state_since_s(self) -> float:
        return self._node.state_since_s

    def _serving(self) -> Replica | None:
        n = self._node
        return n.replica if n.state in SERVING and n.replica is not None else None

    @property
    def uptime_s(self) -> float:
        r = self._serving()
        return r.uptime_s if r is not None else 0.0

    @property
    def waiting_requests(self) -> int:
        r = self._serving()
        return r.view.waiting_requests if r is not None else 0

    @property
    def running_requests(self) -> int:
        r = self._serving()
        return r.view.running_requests if r is not None else 0

    @property
    def kv_usage(self) -> float:
        r = self._serving()
        return r.view.kv_usage if r is not None else 0.0

    @property
    def free_share(self) -> float:
        r = self._serving()
        if r is None:
            return 1.0
        v = r.view
        return v.free_tokens / v.capacity_tokens

    @property
    def largest_contiguous_free_block_ratio(self) -> float | None:
        r = self._serving()
        if r is None:
            return None
        v = r.view
        free, largest = v.free_tokens, v.largest_free_extent_tokens
        return largest / free if free > 0 else None

    @property
    def failures_total(self) -> int:
        return self._node.failures_total

    @property
    def fragmentation_failures_total(self) -> int:
        return self._node.fragmentation_failures_total

    @property
    def high_free_failures_total(self) -> int:
        return self._node.high_free_failures_total

    @property
    def last_high_free_failure_s(self) -> float | None:
        return self._node.last_high_free_failure_s


@dataclass
class FleetReading:
    """:class:`policies.fleet_view.FleetView` at one instant."""

    now_s: float
    nodes: Sequence[NodeReading]
    min_replicas: int
    max_replicas: int
    _waiting: int | None = field(default=None, repr=False)

    @property
    def waiting_requests(self) -> int:
        if self._waiting is None:
            self._waiting = sum(n.waiting_requests for n in self.nodes)
        return self._waiting
