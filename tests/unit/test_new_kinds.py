"""A kind only its registry knows is one a scenario may name and a fleet runs: the claim
that a new router, allocator, restart policy or autoscaler is one module plus one
registry line (docs/layout.md, "Where to add ..."). Each test registers a kind defined
here, at run time, and runs a small fleet naming it; a list of kinds kept anywhere else
(a ``Literal`` in the schema, a choice list, a hand-kept map) would refuse the name."""

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import pytest
from pydantic import ValidationError
from support.fleet import evenly, fleet_data, run_fleet_data

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.config import AllocatorConfig, GrowthConfig
from policies.allocators.contiguous import ContiguousAllocator
from policies.allocators.extents import FreeExtentIndex
from policies.allocators.hybrid import HybridKvManager
from policies.allocators.registry import ALLOCATORS
from policies.autoscale.base import Autoscaler, Cooldowns, ScaleDecision, ScaleTiming, clamped
from policies.autoscale.config import AutoscalerConfig
from policies.autoscale.registry import AUTOSCALERS
from policies.fleet_view import FleetView
from policies.restart.base import RestartDecision, RestartPolicy
from policies.restart.config import RestartConfig
from policies.restart.registry import RESTART_POLICIES
from policies.routing.base import Router, RouteRequest, RouterView, up_indices
from policies.routing.config import RouterConfig
from policies.routing.registry import ROUTERS
from sim.results.io import RunResult
from sim.scenario.offload import TierConfig


class _HighestUp(Router):
    reads_request = False
    reads_memory = False

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        return ups[-1] if ups else None


class _HighestUpConfig(RouterConfig):
    """The up replica of the highest index."""

    kind: Literal["test_highest_up"] = "test_highest_up"

    def build(self) -> Router:
        return _HighestUp()


class _ChunkedFitConfig(GrowthConfig):
    """First fit growing by chunks of 128 slots."""

    kind: Literal["test_chunked_fit"] = "test_chunked_fit"

    def build(self, spec: PoolSpec) -> Allocator:
        return ContiguousAllocator(
            spec,
            FreeExtentIndex(spec.capacity_tokens, "first_fit"),
            initial_extra_tokens=self.initial_extra_tokens,
            growth_factor=self.growth_factor,
            growth_chunk_tokens=128,
        )


class _LayerSplitConfig(AllocatorConfig):
    """A KV manager (vLLM's hybrid manager under another kind)."""

    kind: Literal["test_layer_split"] = "test_layer_split"
    kv_manager: ClassVar[bool] = True

    def build(self, spec: PoolSpec) -> Allocator:
        return HybridKvManager(spec, block_size_tokens=16, prefill_chunk_tokens=8192)


class _RestartNodeZero(RestartPolicy):
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._done = False

    def decide(self, fleet: FleetView) -> list[RestartDecision]:
        if self._done:
            return []
        self._done = True
        return [RestartDecision(fleet.nodes[0].replica_id, "test_restart_zero: once")]


class _RestartZeroConfig(RestartConfig):
    """Restart the first node at the first check, once."""

    kind: Literal["test_restart_zero"] = "test_restart_zero"
    example_fields: ClassVar[Mapping[str, int | float]] = {}

    def build(self) -> RestartPolicy:
        return _RestartNodeZero(self.interval_s)


class _UpOnQueue(Autoscaler):
    def __init__(self, timing: ScaleTiming) -> None:
        super().__init__(timing)
        self._cooldowns = Cooldowns(timing)

    def decide(self, fleet: FleetView) -> ScaleDecision | None:
        if fleet.waiting_requests == 0 or not self._cooldowns.can_scale_up(fleet.now_s):
            return None
        delta = clamped(fleet, self.step)
        if delta == 0:
            return None
        cause = f"test_up_on_queue: {fleet.waiting_requests} waiting"
        return self._cooldowns.note(ScaleDecision(delta, cause), fleet.now_s)


class _UpOnQueueConfig(AutoscalerConfig):
    """Add nodes while requests wait."""

    kind: Literal["test_up_on_queue"] = "test_up_on_queue"

    def build(self) -> Autoscaler:
        return _UpOnQueue(self.timing())


def _events(r: RunResult, kind: str) -> list[str]:
    ev = r.events
    return [str(c) for c in ev.loc[ev["kind"] == kind, "cause"]]


def test_a_registered_router_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ROUTERS, "test_highest_up", _HighestUpConfig)
    r = run_fleet_data(fleet_data(count=3, router="test_highest_up"), evenly(20, 0.5))
    assert set(r.requests["replica"]) == {2}
    assert (r.requests["status"] == "ok").all()


def test_a_registered_allocator_allocates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALLOCATORS, "test_chunked_fit", _ChunkedFitConfig)
    r = run_fleet_data(fleet_data(count=2, allocator="test_chunked_fit"), evenly(20, 0.5))
    assert r.summary.allocator == "test_chunked_fit"
    assert (r.requests["status"] == "ok").all()


def test_a_registered_kv_manager_is_refused_as_a_tier_allocator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(ALLOCATORS, "test_layer_split", _LayerSplitConfig)
    tier = {"kind": "host", "capacity_gib": 1.0, "bandwidth_gb_per_s": 25.0, "latency_s": 0.0}
    with pytest.raises(ValidationError, match="test_layer_split is a KV manager"):
        TierConfig.model_validate({**tier, "allocator": {"kind": "test_layer_split"}})
    assert TierConfig.model_validate({**tier, "allocator": {"kind": "best_fit"}}).allocator


def test_a_registered_restart_policy_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RESTART_POLICIES, "test_restart_zero", _RestartZeroConfig)
    data = fleet_data(count=2, restart={"kind": "test_restart_zero", "interval_s": 2.0}, load_s=1.0)
    r = run_fleet_data(data, evenly(20, 0.5))
    assert _events(r, "restart") == ["test_restart_zero: once"]


def test_a_registered_autoscaler_scales(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AUTOSCALERS, "test_up_on_queue", _UpOnQueueConfig)
    data = fleet_data(
        count=1,
        autoscaler={"kind": "test_up_on_queue", "interval_s": 5.0, "step": 1},
        min_replicas=1,
        max_replicas=2,
        provision_s=5.0,
        load_s=1.0,
        warmup_s=1.0,
    )
    r = run_fleet_data(data, evenly(60, 0.5, prompt=3000, output=500))
    ups = _events(r, "scale-up")
    assert ups and all(c.startswith("test_up_on_queue: ") for c in ups)
    assert 1 in set(r.requests["replica"])  # the node it added served
