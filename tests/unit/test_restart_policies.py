"""Restart policies as usage stories over hand-made fleet views (tests.support.fleet_views):
each policy restarts exactly when it should, not a check before, within its bound."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError
from support.fleet_views import FakeNode, aged, fleet_at, node, restarted, with_state

from policies.registry import Registry
from policies.restart.base import RestartDecision, RestartPolicy
from policies.restart.config import RestartConfig
from policies.restart.registry import RESTART_POLICIES, parse_restart


def build(kind: str, **fields: Any) -> RestartPolicy:
    return parse_restart({"kind": kind, **fields}).build()


def ids(decisions: list[RestartDecision]) -> list[int]:
    return [d.replica_id for d in decisions]


def first_restart(
    policy: RestartPolicy, nodes: list[FakeNode], until_s: float, dt_s: float = 30.0
) -> tuple[float, list[RestartDecision]] | None:
    """Check every ``dt_s`` from 0 (nodes aging) until a decision; its time and content."""
    now = 0.0
    while now <= until_s:
        decisions = policy.decide(fleet_at(now, nodes))
        if decisions:
            return now, decisions
        nodes = aged(nodes, dt_s)
        now += dt_s
    return None


# --- registry and configs ----------------------------------------------------------


def test_the_registry_lists_every_shipped_kind() -> None:
    assert {"none", "scheduled", "fragmentation", "alert", "rolling"} <= set(RESTART_POLICIES)


@pytest.mark.parametrize("kind", sorted(RESTART_POLICIES))
def test_every_kind_carries_the_fleet_fields_and_builds_fresh_policies(kind: str) -> None:
    config = parse_restart({"kind": kind, "interval_s": 15, "drain": "redirect"})
    assert (config.drain, config.drain_timeout_s, config.interval_s) == ("redirect", 300.0, 15.0)
    assert parse_restart({"kind": kind}).drain == "wait"
    first, second = config.build(), config.build()
    assert first is not second
    assert first.interval_s == 15.0


def test_parse_restart_names_the_allowed_kinds() -> None:
    allowed = ", ".join(sorted(RESTART_POLICIES))
    with pytest.raises(ValueError, match=f"allowed: {allowed}$"):
        parse_restart({"kind": "reboot"})
    with pytest.raises(ValueError, match=f"needs a kind, one of {allowed}$"):
        parse_restart({})


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "none", "drain": "nope"},
        {"kind": "none", "drain_timeout_s": -1},
        {"kind": "none", "interval_s": 0},
        {"kind": "none", "every_s": 10},
        {"kind": "scheduled", "every_s": 0},
        {"kind": "scheduled", "jitter_s": -1},
        {"kind": "scheduled", "seed": -1},
        {"kind": "scheduled", "max_concurrent": 0},
        {"kind": "scheduled", "every_s": "600"},
        {"kind": "fragmentation", "threshold": 0},
        {"kind": "fragmentation", "threshold": 1.5},
        {"kind": "fragmentation", "for_s": -1},
        {"kind": "alert", "min_uptime_s": -5},
        {"kind": "alert", "max_concurrent": 1.5},
        {"kind": "rolling", "max_down": 0},
        {"kind": "rolling", "by": "size"},
    ],
)
def test_configs_refuse_bad_values(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_restart(data)


def test_configs_are_frozen() -> None:
    config = parse_restart({"kind": "fragmentation"})
    with pytest.raises(ValidationError):
        config.interval_s = 1.0  # type: ignore[misc]


def test_registering_a_kind_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        Registry("restart policy", [RESTART_POLICIES["none"], RESTART_POLICIES["none"]])


def _story(policy: RestartPolicy) -> list[list[RestartDecision]]:
    """A fleet that ages, fragments and fails; the decisions at each check."""
    nodes = [
        node(r, uptime_s=90_000.0 + 100 * r, largest_contiguous_free_block_ratio=0.1 * r)
        for r in range(5)
    ]
    out = []
    for step in range(60):
        now = 30.0 * step
        nodes = [replace(n, high_free_failures_total=step // (n.replica_id + 1)) for n in nodes]
        decisions = policy.decide(fleet_at(now, nodes))
        active = {n.replica_id for n in nodes if n.state == "active"}
        assert {d.replica_id for d in decisions} <= active
        assert len(decisions) == len({d.replica_id for d in decisions})
        for d in decisions:
            nodes = with_state(nodes, d.replica_id, "down")
        if step % 10 == 9:
            for n in nodes:
                if n.state == "down":
                    nodes = restarted(nodes, n.replica_id, now)
        out.append(decisions)
        nodes = aged(nodes, 30.0)
    return out


@pytest.mark.parametrize("kind", sorted(RESTART_POLICIES))
def test_every_kind_is_deterministic_and_restarts_only_active_nodes(kind: str) -> None:
    config: RestartConfig = parse_restart({"kind": kind})
    first, second = _story(config.build()), _story(config.build())
    assert first == second
    assert all(d.cause for step in first for d in step)
    assert (kind == "none") == (not any(first))


# --- none ------------------------------------------------------------------------------


def test_none_never_restarts() -> None:
    nodes = [node(0, uptime_s=1e9, largest_contiguous_free_block_ratio=0.0)]
    assert first_restart(build("none"), nodes, until_s=3_600) is None


# --- scheduled ---------------------------------------------------------------------


def test_scheduled_restarts_at_every_s_of_uptime_not_before() -> None:
    policy = build("scheduled", every_s=1_000, jitter_s=0)
    found = first_restart(policy, [node(0, uptime_s=10.0)], until_s=5_000, dt_s=10.0)
    assert found is not None
    now, decisions = found
    assert now == 990.0  # uptime 1000 then
    assert decisions == [RestartDecision(0, "scheduled: uptime 1000 s >= 1000 s + jitter 0 s")]


def test_scheduled_jitter_is_per_replica_seeded_and_bounded() -> None:
    def due_uptimes(seed: int) -> list[float]:
        policy = build("scheduled", every_s=1_000, jitter_s=500, seed=seed, max_concurrent=8)
        nodes = [node(r) for r in range(4)]
        due: dict[int, float] = {}
        now = 0.0
        while len(due) < 4:
            for d in policy.decide(fleet_at(now, nodes)):
                due[d.replica_id] = now
                nodes = with_state(nodes, d.replica_id, "down")
            nodes = aged(nodes, 1.0)
            now += 1.0
        return [due[r] for r in range(4)]

    first = due_uptimes(seed=7)
    assert first == due_uptimes(seed=7)
    assert first != due_uptimes(seed=8)
    assert all(1_000 <= t < 1_500 for t in first)
    assert len(set(first)) == 4  # staggered by the jitter


def test_scheduled_staggers_oldest_first_within_max_concurrent() -> None:
    policy = build("scheduled", every_s=1_000, jitter_s=0, max_concurrent=1)
    nodes = [node(0, uptime_s=1_500.0), node(1, uptime_s=2_000.0), node(2, uptime_s=1_200.0)]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [1]
    # The fleet has not acted yet: node 1 still active, still counted.
    assert policy.decide(fleet_at(30.0, aged(nodes, 30.0))) == []
    nodes = with_state(aged(nodes, 60.0), 1, "loading")
    assert policy.decide(fleet_at(60.0, nodes)) == []
    nodes = restarted(nodes, 1, 90.0)
    assert ids(policy.decide(fleet_at(90.0, nodes))) == [0]


def test_scheduled_ignores_nodes_down_for_other_reasons_in_its_bound() -> None:
    policy = build("scheduled", every_s=1_000, jitter_s=0, max_concurrent=1)
    nodes = [node(0, state="down"), node(1, state="provisioning"), node(2, uptime_s=1_000.0)]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [2]


# --- fragmentation -----------------------------------------------------------------


def _ratios(
    policy: RestartPolicy, readings: dict[float, float | None], uptime_s: float = 0.0
) -> tuple[float, str] | None:
    """Feed one node's ratio readings (time -> ratio; unlisted times repeat the last)."""
    ratio: float | None = 1.0
    for step in range(200):
        now = 30.0 * step
        ratio = readings.get(now, ratio)
        n = node(0, uptime_s=uptime_s + now, largest_contiguous_free_block_ratio=ratio)
        decisions = policy.decide(fleet_at(now, [n]))
        if decisions:
            return now, decisions[0].cause
    return None


def test_fragmentation_restarts_after_for_s_below_threshold_not_a_check_before() -> None:
    policy = build("fragmentation", threshold=0.5, for_s=600)
    assert _ratios(policy, {0.0: 0.41}) == (600.0, "fragmentation: ratio 0.41 < 0.5 for 600 s")


def test_fragmentation_ratio_at_threshold_breaks_the_run() -> None:
    policy = build("fragmentation", threshold=0.5, for_s=600)
    found = _ratios(policy, {0.0: 0.4, 300.0: 0.5, 330.0: 0.3})
    assert found == (930.0, "fragmentation: ratio 0.30 < 0.5 for 600 s")


def test_fragmentation_none_readings_neither_start_nor_break_a_run() -> None:
    policy = build("fragmentation", threshold=0.5, for_s=600)
    found = _ratios(policy, {0.0: 0.4, 300.0: None, 450.0: 0.45})
    assert found == (600.0, "fragmentation: ratio 0.45 < 0.5 for 600 s")
    policy = build("fragmentation", threshold=0.5, for_s=600)
    found = _ratios(policy, {0.0: None, 300.0: 0.4})
    assert found == (900.0, "fragmentation: ratio 0.40 < 0.5 for 600 s")


def test_fragmentation_picks_lowest_ratio_then_longest_uptime_within_bound() -> None:
    policy = build("fragmentation", threshold=0.5, for_s=0, max_concurrent=2)
    nodes = [
        node(0, uptime_s=5_000.0, largest_contiguous_free_block_ratio=0.3),
        node(1, uptime_s=1_000.0, largest_contiguous_free_block_ratio=0.2),
        node(2, uptime_s=9_000.0, largest_contiguous_free_block_ratio=0.3),
        node(3, uptime_s=9_900.0, largest_contiguous_free_block_ratio=0.6),
    ]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [1, 2]
    nodes = with_state(with_state(aged(nodes, 30.0), 1, "draining"), 2, "down")
    assert policy.decide(fleet_at(30.0, nodes)) == []
    nodes = restarted(aged(nodes, 30.0), 1, 60.0)
    assert ids(policy.decide(fleet_at(60.0, nodes))) == [0]


def test_fragmentation_a_restart_starts_the_clock_again() -> None:
    policy = build("fragmentation", threshold=0.5, for_s=600)
    low = node(0, uptime_s=10_000.0, largest_contiguous_free_block_ratio=0.2)
    assert policy.decide(fleet_at(0.0, [low])) == []
    back = replace(low, uptime_s=20.0)  # restarted by someone else at t=280
    assert policy.decide(fleet_at(300.0, [back])) == []
    assert policy.decide(fleet_at(600.0, [replace(back, uptime_s=320.0)])) == []
    assert ids(policy.decide(fleet_at(900.0, [replace(back, uptime_s=620.0)]))) == [0]


# --- alert ---------------------------------------------------------------------------


def test_alert_restarts_a_node_whose_high_free_failures_went_up() -> None:
    policy = build("alert", min_uptime_s=600)
    nodes = [node(0, uptime_s=5_000.0), node(1, uptime_s=5_000.0, high_free_failures_total=3)]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [1]
    nodes = restarted(nodes, 1, 20.0)
    assert policy.decide(fleet_at(30.0, aged(nodes, 10.0))) == []  # no increase since
    failed = [replace(nodes[0], high_free_failures_total=1, free_share=0.38), nodes[1]]
    (decision,) = policy.decide(fleet_at(60.0, failed))
    assert decision.replica_id == 0
    assert "1 allocation failure(s) at high free memory" in decision.cause
    assert "38% free" in decision.cause


def test_alert_leaves_a_freshly_restarted_node_alone() -> None:
    policy = build("alert", min_uptime_s=600)
    young = node(0, uptime_s=120.0, high_free_failures_total=1)
    assert policy.decide(fleet_at(0.0, [young])) == []
    # the dropped alert does not come back once the node is old enough
    assert policy.decide(fleet_at(600.0, [replace(young, uptime_s=720.0)])) == []
    failed_again = replace(young, uptime_s=750.0, high_free_failures_total=2)
    assert ids(policy.decide(fleet_at(630.0, [failed_again]))) == [0]


def test_alert_keeps_alerts_over_its_bound_until_a_slot_frees() -> None:
    policy = build("alert", min_uptime_s=0, max_concurrent=1)
    nodes = [node(r, uptime_s=1_000.0, high_free_failures_total=1) for r in range(2)]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [0]
    nodes = with_state(aged(nodes, 30.0), 0, "down")
    assert policy.decide(fleet_at(30.0, nodes)) == []
    nodes = restarted(aged(nodes, 30.0), 0, 60.0)
    assert ids(policy.decide(fleet_at(60.0, nodes))) == [1]


# --- rolling -----------------------------------------------------------------------


def test_rolling_recycles_by_age_with_at_most_max_down_not_active() -> None:
    policy = build("rolling", max_uptime_s=1_000, max_down=1, by="age")
    nodes = [node(0, uptime_s=1_500.0), node(1, uptime_s=2_000.0), node(2, uptime_s=1_000.0)]
    (decision,) = policy.decide(fleet_at(0.0, nodes))
    assert decision.replica_id == 1
    assert decision.cause.startswith("rolling: uptime 2000 s > 1000 s")
    nodes = with_state(nodes, 1, "warming")
    assert policy.decide(fleet_at(30.0, nodes)) == []
    nodes = restarted(nodes, 1, 60.0)
    assert ids(policy.decide(fleet_at(60.0, nodes))) == [0]  # node 2 is not *over* 1000 s


def test_rolling_counts_nodes_down_for_any_reason() -> None:
    policy = build("rolling", max_uptime_s=1_000, max_down=2)
    nodes = [node(0, state="down"), node(1, uptime_s=3_000.0), node(2, uptime_s=2_000.0)]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [1]
    nodes = [node(0, state="down"), node(3, state="draining"), node(1, uptime_s=3_000.0)]
    assert build("rolling", max_uptime_s=1_000, max_down=2).decide(fleet_at(0.0, nodes)) == []


def test_rolling_by_fragmentation_takes_the_lowest_ratio_first() -> None:
    policy = build("rolling", max_uptime_s=1_000, max_down=1, by="fragmentation")
    nodes = [
        node(0, uptime_s=9_000.0, largest_contiguous_free_block_ratio=0.8),
        node(1, uptime_s=2_000.0, largest_contiguous_free_block_ratio=0.3),
        node(2, uptime_s=5_000.0, largest_contiguous_free_block_ratio=None),
    ]
    assert ids(policy.decide(fleet_at(0.0, nodes))) == [1]
