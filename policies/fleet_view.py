"""What restart policies and autoscalers read of the fleet (read-only): the contract the
fleet (``sim.fleet``) implements for them, kept here beside the policies, as the routing
contract is (``policies.routing.base``). The decisions they return are
``policies.restart.base.RestartDecision`` and ``policies.autoscale.base.ScaleDecision``.
The fleet builds a :class:`FleetView` at each policy tick; policies keep their own state
(counters seen last time, cooldown timers) and never mutate a view.

Lifecycle of a node (one replica on one node of a pool)::

    provisioning -> loading -> warming -> active -> draining -> down -> (loading ...)
                                                             \\-> gone (scaled down)

* ``provisioning``: a scale-up bought the node; it is billed, not serving.
* ``loading``: the model loads (after provisioning, a restart or a crash's repair).
* ``warming``: loaded; the readiness probe has not passed yet (CUDA graphs, JIT): not
  routable, billed.
* ``active``: serving. ``draining``: not admitting (a restart or scale-down waits for its
  batch, up to a timeout). ``down``: restarting or crashed (billed). ``gone``: scaled down
  (no longer billed, no longer in views).

Failure counters are cumulative over the run (policies difference them): a
*fragmentation* failure is one where total free memory covered the request's need but no
usable extent did; *high free* is the seed's alert condition (free share > 25 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

NodeState = Literal["provisioning", "loading", "warming", "active", "draining", "down", "gone"]
SERVING: frozenset[str] = frozenset({"active", "draining"})
"""States in which a node's replica holds requests (its readings are meaningful)."""


class NodeView(Protocol):
    """One node as a policy may read it now."""

    @property
    def replica_id(self) -> int: ...
    @property
    def pool(self) -> str: ...
    @property
    def state(self) -> NodeState: ...
    @property
    def state_since_s(self) -> float:
        """When the node entered its current state."""
        ...

    @property
    def uptime_s(self) -> float:
        """Seconds since the replica's process (re)started serving; 0 unless serving."""
        ...

    @property
    def waiting_requests(self) -> int: ...
    @property
    def running_requests(self) -> int: ...
    @property
    def kv_usage(self) -> float:
        """Share of the KV pool held by requests, in [0, 1] (0 unless serving)."""
        ...

    @property
    def free_share(self) -> float:
        """Free KV / capacity, in [0, 1] (1 unless serving)."""
        ...

    @property
    def largest_contiguous_free_block_ratio(self) -> float | None:
        """Largest usable free extent / total free (the seed's metric); None with no free
        memory (undefined, never alerted on) or when not serving."""
        ...

    @property
    def failures_total(self) -> int:
        """Allocation failures (admission refusals and growth failures) so far."""
        ...

    @property
    def fragmentation_failures_total(self) -> int: ...
    @property
    def high_free_failures_total(self) -> int:
        """Failures while free share exceeded the high-free threshold (25 %)."""
        ...

    @property
    def last_high_free_failure_s(self) -> float | None: ...


class FleetView(Protocol):
    """The fleet now: every node not ``gone``, in replica-id order."""

    @property
    def now_s(self) -> float: ...
    @property
    def nodes(self) -> Sequence[NodeView]: ...
    @property
    def waiting_requests(self) -> int:
        """Requests queued on every serving node."""
        ...

    @property
    def min_replicas(self) -> int:
        """Scale-downs never take the fleet below this many nodes (not gone)."""
        ...

    @property
    def max_replicas(self) -> int:
        """Scale-ups never take the fleet above this many nodes (not gone)."""
        ...


def serving(nodes: Sequence[NodeView]) -> list[NodeView]:
    """The nodes whose replica holds requests now (active or draining)."""
    return [n for n in nodes if n.state in SERVING]


def countable(nodes: Sequence[NodeView]) -> int:
    """Nodes that count toward the fleet size (everything not gone)."""
    return sum(1 for n in nodes if n.state != "gone")
