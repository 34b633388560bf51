"""Hand-made fleet views for policy tests: plain dataclasses that satisfy
``policies.fleet_view.NodeView`` and ``FleetView``, and a builder that ages a fleet between
checks the way the real one would (uptime grows with the clock while active).

A story reads: build nodes with :func:`node`, wrap them with :func:`fleet_at`, call the
policy, change what the story needs with :func:`dataclasses.replace`, advance the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from policies.fleet_view import SERVING, FleetView, NodeState, NodeView


@dataclass(frozen=True)
class FakeNode:
    """One node; defaults are a healthy active node (no free-memory fragmentation)."""

    replica_id: int
    state: NodeState = "active"
    uptime_s: float = 0.0
    pool: str = "default"
    state_since_s: float = 0.0
    waiting_requests: int = 0
    running_requests: int = 0
    kv_usage: float = 0.5
    free_share: float = 0.5
    largest_contiguous_free_block_ratio: float | None = 1.0
    failures_total: int = 0
    fragmentation_failures_total: int = 0
    high_free_failures_total: int = 0
    last_high_free_failure_s: float | None = None


@dataclass(frozen=True)
class FakeFleet:
    now_s: float
    nodes: Sequence[FakeNode] = field(default_factory=list)
    min_replicas: int = 1
    max_replicas: int = 16
    queued: int | None = None
    """Fleet waiting requests; None: the sum over serving nodes."""

    @property
    def waiting_requests(self) -> int:
        if self.queued is not None:
            return self.queued
        return sum(n.waiting_requests for n in self.nodes if n.state in SERVING)


def node(replica_id: int, **fields: object) -> FakeNode:
    """A node with the given fields (others: :class:`FakeNode`'s defaults)."""
    return replace(FakeNode(replica_id), **fields)  # type: ignore[arg-type]


def fleet_at(now_s: float, nodes: Sequence[FakeNode], **fields: object) -> FakeFleet:
    """A fleet at ``now_s`` holding ``nodes``."""
    return replace(FakeFleet(now_s, list(nodes)), **fields)  # type: ignore[arg-type]


def aged(nodes: Sequence[FakeNode], dt_s: float) -> list[FakeNode]:
    """The nodes ``dt_s`` later: active and draining nodes' uptime grows."""
    return [replace(n, uptime_s=n.uptime_s + dt_s) if n.state in SERVING else n for n in nodes]


def restarted(nodes: Sequence[FakeNode], replica_id: int, now_s: float) -> list[FakeNode]:
    """The nodes with ``replica_id`` back active, just restarted (uptime 0, no
    fragmentation, failure counters kept: they are cumulative over the run)."""
    return [
        replace(
            n,
            state="active",
            uptime_s=0.0,
            state_since_s=now_s,
            largest_contiguous_free_block_ratio=1.0,
        )
        if n.replica_id == replica_id
        else n
        for n in nodes
    ]


def with_state(nodes: Sequence[FakeNode], replica_id: int, state: NodeState) -> list[FakeNode]:
    """The nodes with ``replica_id`` moved to ``state`` (uptime 0 unless serving)."""
    return [
        replace(n, state=state, uptime_s=n.uptime_s if state in SERVING else 0.0)
        if n.replica_id == replica_id
        else n
        for n in nodes
    ]


def _check_protocols(n: FakeNode, f: FakeFleet) -> tuple[NodeView, FleetView]:
    """mypy checks that the fakes satisfy the protocols."""
    return n, f
