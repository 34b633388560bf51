"""Every restart policy's configuration: the ``{kind: ..., ...}`` mapping a fleet scenario
names, validated with pydantic at the edge (strict types, bounded fields, unknown fields
refused), and ``build`` for a fresh policy (a policy holds state: build one per run).

The fields on :class:`RestartConfig` are common to every kind and read by the fleet, not
by the policy: how a node is drained before its restart and how often the fleet asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.restart.base import RestartPolicy
from policies.restart.signals import AlertRestart, FragmentationRestart
from policies.restart.simple import NoRestart, RollingRestart, ScheduledRestart

MAX_SEED = (1 << 63) - 1
MAX_TIME_S = 365 * 86_400.0
"""A year: the longest time any restart field may name."""
MAX_NODES = 1 << 16


class RestartConfig(BaseModel):
    """A restart policy as a scenario names it: ``{kind: scheduled, ...parameters}``.

    Subclasses fix ``kind`` to a ``Literal`` and give every parameter bounds and a
    docstring; ``build`` makes a fresh policy."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    kind: str
    example_fields: ClassVar[Mapping[str, int | float]] = {}
    """A worked example of this kind's own fields under which it restarts a node at its
    first check on a small fragmented replica (``tests/unit/test_fleet_lifecycle.py``
    runs every registered kind with it: a new kind brings its own case, no test edit)."""
    drain: Literal["wait", "kill", "redirect"] = "wait"
    """How the fleet drains a node before restarting it: ``wait`` for its batch (up to
    ``drain_timeout_s``), ``kill`` the batch at once, or ``redirect`` its waiting queue to
    other replicas and then wait for the batch."""
    drain_timeout_s: float = Field(300.0, ge=0.0, le=MAX_TIME_S)
    """Seconds a drain waits for the batch; what is still running then is killed."""
    interval_s: float = Field(30.0, gt=0.0, le=86_400.0)
    """Seconds of simulated time between the fleet's calls to ``decide``; a run makes at
    most 1,000,000 calls (``sim.scenario.bounds.MAX_POLICY_CHECKS``: span / interval_s,
    checked before the run), so no lower bound is needed here."""

    def build(self) -> RestartPolicy:
        raise NotImplementedError


class NoRestartConfig(RestartConfig):
    """Never restart a node."""

    kind: Literal["none"] = "none"

    def build(self) -> RestartPolicy:
        return NoRestart(self.interval_s)


class ScheduledConfig(RestartConfig):
    """Restart each node after ``every_s`` of uptime plus a per-node jitter, staggered."""

    kind: Literal["scheduled"] = "scheduled"
    example_fields: ClassVar[Mapping[str, int | float]] = {"every_s": 3.0, "jitter_s": 0.0}
    every_s: float = Field(86_400.0, gt=0.0, le=MAX_TIME_S)
    """Uptime after which a node is restarted (before its jitter)."""
    jitter_s: float = Field(3_600.0, ge=0.0, le=MAX_TIME_S)
    """Each node's uptime cycle adds a jitter uniform in ``[0, jitter_s)`` (0: none), so
    nodes started together are not all restarted together."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seed of the jitters (one generator per replica, seeded by ``(seed, replica id)``)."""
    max_concurrent: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many nodes not active because of this policy at once."""

    def build(self) -> RestartPolicy:
        return ScheduledRestart(
            self.interval_s, self.every_s, self.jitter_s, self.seed, self.max_concurrent
        )


class FragmentationConfig(RestartConfig):
    """Restart a node whose largest contiguous free block ratio stayed below ``threshold``
    for ``for_s`` (the seed's alert metric, alert threshold 0.5)."""

    kind: Literal["fragmentation"] = "fragmentation"
    example_fields: ClassVar[Mapping[str, int | float]] = {"threshold": 0.99, "for_s": 0.0}
    threshold: float = Field(0.5, gt=0.0, le=1.0)
    """Ratio (largest usable free extent / total free) below which a node is fragmented."""
    for_s: float = Field(600.0, ge=0.0, le=MAX_TIME_S)
    """Seconds the ratio must stay below ``threshold`` (as seen at the checks)."""
    max_concurrent: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many nodes not active because of this policy at once."""

    def build(self) -> RestartPolicy:
        return FragmentationRestart(
            self.interval_s, self.threshold, self.for_s, self.max_concurrent
        )


class AlertConfig(RestartConfig):
    """Restart a node that failed an allocation at high free memory (> 25 % free) since the
    previous check: the seed's high-severity alert."""

    kind: Literal["alert"] = "alert"
    example_fields: ClassVar[Mapping[str, int | float]] = {"min_uptime_s": 0.0}
    min_uptime_s: float = Field(600.0, ge=0.0, le=MAX_TIME_S)
    """A node younger than this is not restarted again (its alert is dropped)."""
    max_concurrent: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many nodes not active because of this policy at once."""

    def build(self) -> RestartPolicy:
        return AlertRestart(self.interval_s, self.min_uptime_s, self.max_concurrent)


class RollingConfig(RestartConfig):
    """Rolling recycling: nodes older than ``max_uptime_s`` are restarted, at most
    ``max_down`` nodes of the fleet not active at a time."""

    kind: Literal["rolling"] = "rolling"
    example_fields: ClassVar[Mapping[str, int | float]] = {"max_uptime_s": 3.0}
    max_uptime_s: float = Field(86_400.0, gt=0.0, le=MAX_TIME_S)
    """A node whose uptime exceeds this is due for recycling."""
    max_down: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many nodes draining, down, loading or warming (any cause) at once."""
    by: Literal["fragmentation", "age"] = "age"
    """Victim order among the due nodes: lowest ratio first, or longest uptime first."""

    def build(self) -> RestartPolicy:
        return RollingRestart(self.interval_s, self.max_uptime_s, self.max_down, self.by)
