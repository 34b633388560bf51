"""Every autoscaler's configuration: the ``{kind: ..., ...}`` mapping a fleet scenario
names, validated with pydantic at the edge (strict types, bounded fields, unknown fields
refused), and ``build`` for a fresh autoscaler (it holds state: build one per run).

Every kind carries ``interval_s``, ``step`` and the two cooldowns (``timing()``: one
:class:`~policies.autoscale.base.ScaleTiming`, the autoscaler's first argument; its own
parameters follow by name); the defaults differ by kind (an HPA scales up at once, the
naive scaler waits five minutes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.autoscale.base import Autoscaler, ScaleTiming
from policies.autoscale.failures import NaiveAutoscaler, RunbookAutoscaler
from policies.autoscale.metrics import KvTargetAutoscaler, NoAutoscaler, QueueAutoscaler

MAX_TIME_S = 7 * 86_400.0
"""A week: the longest time any autoscaler field may name."""
MAX_NODES = 1 << 16
MAX_REQUESTS = 1 << 40


class AutoscalerConfig(BaseModel):
    """An autoscaler as a scenario names it: ``{kind: kv_target, ...parameters}``.

    Subclasses fix ``kind`` to a ``Literal`` and give every parameter bounds and a
    docstring; ``build`` makes a fresh autoscaler."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    kind: str
    example_fields: ClassVar[Mapping[str, int | float]] = {}
    """A worked example of this kind's own fields under which it scales a fleet of one up
    on a surge and down after it (``tests/unit/test_fleet_lifecycle.py`` runs every
    registered kind with it: a new kind brings its own case, no test edit)."""
    interval_s: float = Field(15.0, gt=0.0, le=3_600.0)
    """Seconds of simulated time between the fleet's calls to ``decide``; a run makes at
    most 1,000,000 calls (``sim.scenario.bounds.MAX_POLICY_CHECKS``: span / interval_s,
    checked before the run), so no lower bound is needed here."""
    step: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many nodes added (or removed) by one decision."""
    scale_up_cooldown_s: float = Field(0.0, ge=0.0, le=MAX_TIME_S)
    """Seconds after a scale-up before the next scale-up."""
    scale_down_cooldown_s: float = Field(300.0, ge=0.0, le=MAX_TIME_S)
    """Seconds after any scale event before a scale-down."""

    def timing(self) -> ScaleTiming:
        """The four fields every kind carries, as the autoscaler takes them."""
        return ScaleTiming(
            interval_s=self.interval_s,
            step=self.step,
            scale_up_cooldown_s=self.scale_up_cooldown_s,
            scale_down_cooldown_s=self.scale_down_cooldown_s,
        )

    def build(self) -> Autoscaler:
        raise NotImplementedError


class NoAutoscalerConfig(AutoscalerConfig):
    """Never scale: the fleet keeps its initial size."""

    kind: Literal["none"] = "none"

    def build(self) -> Autoscaler:
        return NoAutoscaler(self.timing())


class _FailureTriggersConfig(AutoscalerConfig):
    """The fields of the failure-triggered autoscalers (``naive`` and ``runbook``)."""

    interval_s: float = Field(30.0, gt=0.0, le=3_600.0)
    """Seconds of simulated time between the fleet's calls to ``decide``."""
    step: int = Field(2, ge=1, le=MAX_NODES)
    """Nodes added per scale-up (the seed's example adds 2)."""
    scale_up_cooldown_s: float = Field(300.0, ge=0.0, le=MAX_TIME_S)
    """Seconds after a scale-up before the next scale-up."""
    scale_down_cooldown_s: float = Field(600.0, ge=0.0, le=MAX_TIME_S)
    """Seconds after any scale event before a scale-down."""
    failure_threshold: int = Field(1, ge=1, le=MAX_REQUESTS)
    """Allocation failures since the previous check (all nodes) that trigger a scale-up."""
    queue_threshold: int = Field(100, ge=1, le=MAX_REQUESTS)
    """Waiting requests over the fleet that trigger a scale-up."""
    scale_down_window_s: float = Field(600.0, ge=0.0, le=MAX_TIME_S)
    """Seconds with no failure and the queue below its threshold before one node goes."""


class NaiveConfig(_FailureTriggersConfig):
    """The seed's autoscaler: any allocation failure (or a long queue) adds ``step``
    nodes; a quiet ``scale_down_window_s`` removes one."""

    kind: Literal["naive"] = "naive"
    example_fields: ClassVar[Mapping[str, int | float]] = {
        "queue_threshold": 1,
        "scale_down_window_s": 50.0,
    }

    def build(self) -> Autoscaler:
        return NaiveAutoscaler(
            self.timing(),
            failure_threshold=self.failure_threshold,
            queue_threshold=self.queue_threshold,
            scale_down_window_s=self.scale_down_window_s,
        )


class RunbookConfig(_FailureTriggersConfig):
    """Diagnose before scaling: nodes failing at high free memory are restarted; only
    genuine capacity failures (or a queue no restart explains) scale up."""

    kind: Literal["runbook"] = "runbook"
    example_fields: ClassVar[Mapping[str, int | float]] = {
        "queue_threshold": 1,
        "scale_down_window_s": 50.0,
    }
    max_concurrent_restarts: int = Field(1, ge=1, le=MAX_NODES)
    """At most this many of the runbook's restarts in flight at once."""
    min_uptime_s: float = Field(600.0, ge=0.0, le=MAX_TIME_S)
    """A node younger than this is not restarted again (its failures are not scaled for
    either: they stay high-free failures)."""

    def build(self) -> Autoscaler:
        return RunbookAutoscaler(
            self.timing(),
            failure_threshold=self.failure_threshold,
            queue_threshold=self.queue_threshold,
            scale_down_window_s=self.scale_down_window_s,
            max_concurrent_restarts=self.max_concurrent_restarts,
            min_uptime_s=self.min_uptime_s,
        )


class KvTargetConfig(AutoscalerConfig):
    """Kubernetes HPA on mean KV usage: ``desired = ceil(serving * mean / target)``."""

    kind: Literal["kv_target"] = "kv_target"
    example_fields: ClassVar[Mapping[str, int | float]] = {
        "target": 0.5,
        "scale_down_window_s": 50.0,
    }
    step: int = Field(4, ge=1, le=MAX_NODES)
    """At most this many nodes added or removed per decision (HPA's default scale-up
    policy allows 4 pods per 15 s)."""
    scale_down_cooldown_s: float = Field(0.0, ge=0.0, le=MAX_TIME_S)
    """Seconds after any scale event before a scale-down (the window does the work)."""
    target: float = Field(0.7, gt=0.0, le=1.0)
    """Target mean KV usage of the serving nodes."""
    tolerance: float = Field(0.1, ge=0.0, le=1.0)
    """No change while ``|mean / target - 1|`` is within this (HPA's default 0.1)."""
    scale_down_window_s: float = Field(300.0, ge=0.0, le=MAX_TIME_S)
    """HPA's scale-down stabilization window: the highest desired over it must be below
    the current size."""

    def build(self) -> Autoscaler:
        return KvTargetAutoscaler(
            self.timing(),
            target=self.target,
            tolerance=self.tolerance,
            scale_down_window_s=self.scale_down_window_s,
        )


class QueueConfig(AutoscalerConfig):
    """KEDA on the queue: one node per ``queue_threshold`` waiting requests."""

    kind: Literal["queue"] = "queue"
    example_fields: ClassVar[Mapping[str, int | float]] = {"queue_threshold": 1}
    interval_s: float = Field(30.0, ge=1.0, le=3_600.0)
    """KEDA's polling interval (default 30 s; 15-30 s is typical)."""
    step: int = Field(4, ge=1, le=MAX_NODES)
    """At most this many nodes added or removed per decision."""
    scale_down_cooldown_s: float = Field(300.0, ge=0.0, le=MAX_TIME_S)
    """KEDA's ``cooldownPeriod``: seconds since the trigger was last active (and since the
    last scale event) before a scale-down."""
    queue_threshold: int = Field(10, ge=1, le=MAX_REQUESTS)
    """Waiting requests per node the fleet is sized for."""

    def build(self) -> Autoscaler:
        return QueueAutoscaler(
            self.timing(),
            queue_threshold=self.queue_threshold,
        )
