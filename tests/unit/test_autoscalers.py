"""Autoscalers as usage stories over hand-made fleet views (tests.support.fleet_views):
each scales exactly when it should, respects its cooldowns and the fleet's bounds, and
the runbook restarts a fragmented node instead of buying replicas."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError
from support.fleet_views import FakeNode, aged, fleet_at, node, restarted, with_state

from policies.autoscale.base import Autoscaler, ScaleDecision, ScaleTiming
from policies.autoscale.registry import AUTOSCALERS, parse_autoscaler
from policies.fleet_view import countable
from policies.registry import Registry


def build(kind: str, **fields: Any) -> Autoscaler:
    return parse_autoscaler({"kind": kind, **fields}).build()


def fail(
    nodes: list[FakeNode], replica_id: int, *, frag: int = 0, high_free: int = 0, other: int = 0
):
    """The nodes after ``replica_id`` failed ``frag`` fragmentation failures (of which
    ``high_free`` at high free memory) and ``other`` capacity failures."""
    return [
        replace(
            n,
            failures_total=n.failures_total + frag + other,
            fragmentation_failures_total=n.fragmentation_failures_total + frag,
            high_free_failures_total=n.high_free_failures_total + high_free,
        )
        if n.replica_id == replica_id
        else n
        for n in nodes
    ]


# --- registry and configs ----------------------------------------------------------


def test_the_registry_lists_every_shipped_kind() -> None:
    assert {"none", "naive", "kv_target", "queue", "runbook"} <= set(AUTOSCALERS)


@pytest.mark.parametrize("kind", sorted(AUTOSCALERS))
def test_every_kind_has_the_common_fields_and_builds_fresh_autoscalers(kind: str) -> None:
    config = parse_autoscaler(
        {
            "kind": kind,
            "interval_s": 20,
            "step": 3,
            "scale_up_cooldown_s": 5,
            "scale_down_cooldown_s": 7,
        }
    )
    assert (config.interval_s, config.step) == (20.0, 3)
    assert (config.scale_up_cooldown_s, config.scale_down_cooldown_s) == (5.0, 7.0)
    first, second = config.build(), config.build()
    assert first is not second
    assert first.timing == config.timing() == ScaleTiming(20.0, 3, 5.0, 7.0)
    assert (first.interval_s, first.step) == (20.0, 3)


def test_parse_autoscaler_names_the_allowed_kinds() -> None:
    allowed = ", ".join(sorted(AUTOSCALERS))
    with pytest.raises(ValueError, match=f"allowed: {allowed}$"):
        parse_autoscaler({"kind": "hpa"})


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "none", "step": 0},
        {"kind": "none", "interval_s": 0},
        {"kind": "none", "scale_up_cooldown_s": -1},
        {"kind": "none", "target": 0.5},
        {"kind": "naive", "failure_threshold": 0},
        {"kind": "naive", "queue_threshold": 0},
        {"kind": "naive", "scale_down_window_s": -1},
        {"kind": "naive", "step": "2"},
        {"kind": "kv_target", "target": 0},
        {"kind": "kv_target", "target": 1.2},
        {"kind": "kv_target", "tolerance": -0.1},
        {"kind": "queue", "queue_threshold": 0},
        {"kind": "queue", "interval_s": 0.5},
        {"kind": "runbook", "max_concurrent_restarts": 0},
        {"kind": "runbook", "min_uptime_s": -1},
    ],
)
def test_configs_refuse_bad_values(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_autoscaler(data)


def test_registering_a_kind_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        Registry("autoscaler", [AUTOSCALERS["naive"], AUTOSCALERS["naive"]])


def _story(scaler: Autoscaler, min_replicas: int, max_replicas: int) -> list[ScaleDecision | None]:
    """A fleet under changing load and failures that applies every decision at once."""
    nodes = [node(r, uptime_s=1_000.0) for r in range(3)]
    out = []
    next_id = 3
    for step in range(120):
        now = 15.0 * step
        load = 0.95 if (step // 20) % 2 == 0 else 0.1
        nodes = [replace(n, kv_usage=load, waiting_requests=int(200 * load)) for n in nodes]
        if step % 7 == 0:
            nodes = fail(nodes, nodes[0].replica_id, frag=1, high_free=step % 2, other=step % 3)
        fleet = fleet_at(now, nodes, min_replicas=min_replicas, max_replicas=max_replicas)
        decision = scaler.decide(fleet)
        out.append(decision)
        if decision is not None:
            size = countable(nodes) + decision.delta
            assert min_replicas <= size <= max_replicas
            if decision.delta > 0:
                nodes += [node(next_id + i, uptime_s=0.0) for i in range(decision.delta)]
                next_id += decision.delta
            elif decision.delta < 0:
                nodes = nodes[: decision.delta]
        nodes = aged(nodes, 15.0)
    return out


@pytest.mark.parametrize("kind", sorted(AUTOSCALERS))
def test_every_kind_is_deterministic_and_stays_within_bounds(kind: str) -> None:
    config = parse_autoscaler({"kind": kind})
    first = _story(config.build(), 2, 5)
    assert first == _story(config.build(), 2, 5)
    assert all(d.cause for d in first if d is not None)
    assert (kind == "none") == all(d is None for d in first)


# --- naive ---------------------------------------------------------------------------


def test_naive_adds_step_nodes_on_one_failure_and_reports_its_kind() -> None:
    scaler = build("naive")
    nodes = [node(0), node(1)]
    assert scaler.decide(fleet_at(0.0, nodes)) is None
    nodes = fail(nodes, 1, frag=1, high_free=1)
    decision = scaler.decide(fleet_at(30.0, nodes))
    assert decision is not None
    assert (decision.delta, decision.restart) == (2, ())
    assert (decision.fragmentation_failures, decision.capacity_failures) == (1, 0)
    assert "1 failure(s) >= 1" in decision.cause and "2 -> 4" in decision.cause


def test_naive_scale_up_cooldown() -> None:
    scaler = build("naive", scale_up_cooldown_s=300)
    nodes = fail([node(0)], 0, other=1)
    assert scaler.decide(fleet_at(0.0, nodes)).delta == 2  # type: ignore[union-attr]
    for now in (30.0, 270.0):
        nodes = fail(nodes, 0, other=1)
        assert scaler.decide(fleet_at(now, nodes)) is None
    nodes = fail(nodes, 0, other=1)
    decision = scaler.decide(fleet_at(300.0, nodes))
    assert decision is not None and decision.capacity_failures == 1


def test_naive_queue_trigger_and_clamp_at_max() -> None:
    scaler = build("naive", queue_threshold=50, scale_up_cooldown_s=0)
    nodes = [node(r) for r in range(3)]
    assert scaler.decide(fleet_at(0.0, nodes, queued=49, max_replicas=4)) is None
    decision = scaler.decide(fleet_at(30.0, nodes, queued=50, max_replicas=4))
    assert decision is not None and decision.delta == 1  # step 2 cut to the max of 4
    assert "50 waiting >= 50" in decision.cause
    nodes.append(node(3, state="provisioning"))
    assert scaler.decide(fleet_at(60.0, nodes, queued=80, max_replicas=4)) is None


def test_naive_scales_down_one_after_a_quiet_window_not_before() -> None:
    scaler = build("naive", scale_down_window_s=600, scale_down_cooldown_s=0)
    nodes = fail([node(r) for r in range(4)], 2, other=1)
    assert scaler.decide(fleet_at(0.0, nodes, max_replicas=5)).delta == 1  # type: ignore[union-attr]
    for now in range(30, 600, 30):
        assert scaler.decide(fleet_at(float(now), nodes, max_replicas=5)) is None
    decision = scaler.decide(fleet_at(600.0, nodes, max_replicas=5))
    assert decision is not None and decision.delta == -1
    assert "for 600 s" in decision.cause


def test_naive_scale_down_waits_for_its_cooldown_and_stops_at_min() -> None:
    scaler = build("naive", scale_down_window_s=0, scale_down_cooldown_s=600)
    nodes = [node(r) for r in range(3)]
    assert scaler.decide(fleet_at(0.0, nodes, min_replicas=1)).delta == -1  # type: ignore[union-attr]
    assert scaler.decide(fleet_at(570.0, nodes[:2], min_replicas=1)) is None
    assert scaler.decide(fleet_at(600.0, nodes[:2], min_replicas=1)).delta == -1  # type: ignore[union-attr]
    assert scaler.decide(fleet_at(1_200.0, nodes[:1], min_replicas=1)) is None


def test_naive_counts_new_nodes_from_zero_and_forgets_gone_ones() -> None:
    scaler = build("naive", scale_up_cooldown_s=0, failure_threshold=3)
    nodes = [node(0, failures_total=5)]
    assert scaler.decide(fleet_at(0.0, nodes)).delta == 2  # type: ignore[union-attr]
    # node 0 leaves; node 1 arrives with 2 failures: 2 < 3, no scale-up, no negative delta
    assert scaler.decide(fleet_at(30.0, [node(1, failures_total=2)])) is None
    assert scaler.decide(fleet_at(60.0, [node(1, failures_total=5)])).delta == 2  # type: ignore[union-attr]


# --- kv_target -----------------------------------------------------------------------


def test_kv_target_scales_up_at_once_to_ceil_n_mean_over_target() -> None:
    scaler = build("kv_target", target=0.7)
    nodes = [node(r, kv_usage=0.9) for r in range(4)]
    decision = scaler.decide(fleet_at(0.0, nodes))
    assert decision is not None and decision.delta == 2  # ceil(4 * 0.9 / 0.7) = 6
    assert "desired 6: 4 -> 6" in decision.cause
    # provisioning nodes count toward the size: no second scale-up for the same load
    pending = [*nodes, node(4, state="provisioning"), node(5, state="provisioning")]
    assert scaler.decide(fleet_at(15.0, pending)) is None


def test_kv_target_tolerance_and_step() -> None:
    scaler = build("kv_target", target=0.5, tolerance=0.1)
    assert scaler.decide(fleet_at(0.0, [node(r, kv_usage=0.54) for r in range(4)])) is None
    scaler = build("kv_target", target=0.1, step=3)
    decision = scaler.decide(fleet_at(0.0, [node(0, kv_usage=1.0)], max_replicas=100))
    assert decision is not None and decision.delta == 3


def test_kv_target_scales_down_after_the_whole_stabilization_window() -> None:
    scaler = build("kv_target", target=0.7, scale_down_window_s=300)
    nodes = [node(r, kv_usage=0.35) for r in range(4)]  # desired 2
    for now in range(0, 300, 15):
        assert scaler.decide(fleet_at(float(now), nodes)) is None
    decision = scaler.decide(fleet_at(300.0, nodes))
    assert decision is not None and decision.delta == -2


def test_kv_target_a_peak_in_the_window_holds_the_size() -> None:
    scaler = build("kv_target", target=0.7, scale_down_window_s=300)
    low = [node(r, kv_usage=0.35) for r in range(4)]
    steady = [node(r, kv_usage=0.7) for r in range(4)]  # desired 4 = size
    for now in range(0, 465, 15):  # the peak at 150 s is in the window until 450 s
        view = steady if now == 150 else low
        assert scaler.decide(fleet_at(float(now), view)) is None, now
    assert scaler.decide(fleet_at(465.0, low)).delta == -2  # type: ignore[union-attr]


# --- queue ---------------------------------------------------------------------------


def test_queue_scales_up_to_one_node_per_threshold_waiting() -> None:
    scaler = build("queue", queue_threshold=10, step=4)
    nodes = [node(0), node(1)]
    assert scaler.decide(fleet_at(0.0, nodes, queued=20)) is None
    decision = scaler.decide(fleet_at(30.0, nodes, queued=45))
    assert decision is not None and decision.delta == 3  # ceil(45 / 10) = 5
    assert "45 waiting" in decision.cause


def test_queue_scales_down_after_its_cooldown_since_last_active() -> None:
    scaler = build("queue", queue_threshold=10, scale_down_cooldown_s=300, step=1)
    nodes = [node(r) for r in range(3)]
    assert scaler.decide(fleet_at(0.0, nodes, queued=30)) is None  # active
    for now in range(30, 300, 30):
        assert scaler.decide(fleet_at(float(now), nodes, queued=5)) is None, now
    decision = scaler.decide(fleet_at(300.0, nodes, queued=5, min_replicas=1))
    assert decision is not None and decision.delta == -1
    assert "desired 1 for 300 s" in decision.cause
    assert scaler.decide(fleet_at(330.0, nodes[:2], queued=5)) is None  # cooldown again
    assert scaler.decide(fleet_at(600.0, nodes[:2], queued=5)).delta == -1  # type: ignore[union-attr]
    assert scaler.decide(fleet_at(900.0, nodes[:1], queued=5, min_replicas=1)) is None


# --- runbook -------------------------------------------------------------------------


def test_runbook_restarts_a_node_failing_at_high_free_memory_instead_of_scaling() -> None:
    nodes = [node(r, uptime_s=86_400.0 * 5) for r in range(4)]
    failed = fail(nodes, 3, frag=1, high_free=1)
    failed = [replace(n, free_share=0.38) if n.replica_id == 3 else n for n in failed]
    naive, runbook = build("naive"), build("runbook")
    for scaler in (naive, runbook):
        assert scaler.decide(fleet_at(0.0, nodes)) is None
    assert naive.decide(fleet_at(30.0, failed)).delta == 2  # type: ignore[union-attr]
    decision = runbook.decide(fleet_at(30.0, failed))
    assert decision is not None
    assert (decision.delta, decision.restart) == (0, (3,))
    assert decision.cause.startswith("runbook: failures at high free memory on replica 3")
    assert decision.cause.endswith("restart, not scale")
    assert "38% free" in decision.cause


def test_runbook_scales_up_for_genuine_capacity_failures() -> None:
    scaler = build("runbook")
    nodes = fail([node(r, uptime_s=10_000.0) for r in range(2)], 0, other=2, frag=1)
    decision = scaler.decide(fleet_at(0.0, nodes))
    assert decision is not None and decision.delta == 2 and decision.restart == ()
    assert (decision.fragmentation_failures, decision.capacity_failures) == (1, 2)


def test_runbook_bounds_its_restarts_and_ignores_the_queue_while_restarting() -> None:
    scaler = build("runbook", max_concurrent_restarts=1, queue_threshold=10, scale_up_cooldown_s=0)
    nodes = [node(r, uptime_s=10_000.0) for r in range(3)]
    nodes = fail(fail(nodes, 0, frag=1, high_free=1), 1, frag=1, high_free=1)
    assert scaler.decide(fleet_at(0.0, nodes)).restart == (0,)  # type: ignore[union-attr]
    nodes = with_state(aged(nodes, 30.0), 0, "down")
    assert scaler.decide(fleet_at(30.0, nodes, queued=50)) is None
    nodes = restarted(aged(nodes, 30.0), 0, 60.0)
    decision = scaler.decide(fleet_at(60.0, nodes, queued=50))
    assert decision is not None and (decision.delta, decision.restart) == (0, (1,))
    assert "on replica 1 (1 failure(s), 50% free)" in decision.cause
    nodes = restarted(aged(nodes, 30.0), 1, 90.0)
    decision = scaler.decide(fleet_at(90.0, nodes, queued=50))
    assert decision is not None and (decision.delta, decision.restart) == (2, ())
