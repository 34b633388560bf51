"""Every registered restart policy and autoscaler, driven by a tiny fleet that applies its
decisions (a restart: down for a few checks, then active with uptime 0; a scale-up:
provisioning, then active) under drawn readings, failures and crashes:

* restart policies name only active nodes, each once, and never have more than their
  bound of their own restarts in flight (``rolling``: of nodes not active, any cause);
* autoscalers keep the fleet within min..max replicas and restart only active nodes;
* a second policy built from the same config decides the same on the same views.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.fleet_views import fleet_at, node

from policies.autoscale.registry import AUTOSCALERS, parse_autoscaler
from policies.fleet_view import SERVING, countable
from policies.restart.registry import RESTART_POLICIES, parse_restart

DT_S = 30.0
DOWN_CHECKS = 3

_tick = st.fixed_dictionaries(
    {
        "ratio": st.one_of(st.none(), st.floats(0.0, 1.0)),
        "kv": st.floats(0.0, 1.0),
        "waiting": st.integers(0, 300),
        "fail": st.integers(0, 3),
        "high_free": st.booleans(),
        "crash": st.booleans(),
        "who": st.integers(0, 7),
    }
)
_ticks = st.lists(_tick, min_size=1, max_size=40)


class _Fleet:
    """Nodes and the checks left until each restarting node is active again."""

    def __init__(self, size: int) -> None:
        self.nodes = [node(r, uptime_s=50_000.0 * (r + 1)) for r in range(size)]
        self.back_in: dict[int, int] = {}
        self.ours: set[int] = set()
        self.next_id = size

    def tick(self, t: dict[str, Any]) -> None:
        """One interval passes: restarts progress, readings change, maybe a crash."""
        for rid in list(self.back_in):
            self.back_in[rid] -= 1
            if self.back_in[rid] == 0:
                del self.back_in[rid]
                self.ours.discard(rid)
                self._set(rid, state="active", uptime_s=0.0)
        self.nodes = [
            replace(
                n,
                uptime_s=n.uptime_s + DT_S if n.state in SERVING else 0.0,
                largest_contiguous_free_block_ratio=t["ratio"] if n.state in SERVING else None,
                kv_usage=t["kv"] if n.state in SERVING else 0.0,
                waiting_requests=t["waiting"] if n.state in SERVING else 0,
            )
            for n in self.nodes
        ]
        victim = self.nodes[t["who"] % len(self.nodes)]
        if victim.state == "active":
            self._set(
                victim.replica_id,
                failures_total=victim.failures_total + t["fail"],
                fragmentation_failures_total=victim.fragmentation_failures_total + t["fail"],
                high_free_failures_total=victim.high_free_failures_total
                + (t["fail"] if t["high_free"] else 0),
            )
            if t["crash"] and victim.replica_id not in self.back_in:
                self.restart(victim.replica_id, ours=False)

    def _set(self, rid: int, **fields: Any) -> None:
        self.nodes = [replace(n, **fields) if n.replica_id == rid else n for n in self.nodes]

    def restart(self, rid: int, ours: bool = True) -> None:
        self._set(rid, state="down", uptime_s=0.0)
        self.back_in[rid] = DOWN_CHECKS
        if ours:
            self.ours.add(rid)


def _bound(config: Any) -> int:
    return int(getattr(config, "max_concurrent", getattr(config, "max_down", 1 << 30)))


def _bounds_any_cause(config: Any) -> bool:
    """A ``max_down`` bounds the nodes not active for any cause (``rolling``); a
    ``max_concurrent``, the policy's own restarts in flight."""
    return "max_down" in type(config).model_fields


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(sorted(RESTART_POLICIES)),
    example=st.booleans(),
    ticks=_ticks,
    size=st.integers(1, 6),
)
def test_restart_policies_stay_within_their_bound(
    kind: str, example: bool, ticks: list[Any], size: int
) -> None:
    # Its defaults (nodes start 50,000 s old and more: some due, some not) or its worked
    # example (``example_fields``: due at the first check), both declared by the config.
    fields = RESTART_POLICIES[kind].example_fields if example else {}
    config = parse_restart({"kind": kind, **fields})
    first, second = config.build(), config.build()
    fleet = _Fleet(size)
    for step, t in enumerate(ticks):
        view = fleet_at(step * DT_S, fleet.nodes)
        decisions = first.decide(view)
        assert decisions == second.decide(view)
        chosen = [d.replica_id for d in decisions]
        assert len(chosen) == len(set(chosen))
        active = {n.replica_id for n in fleet.nodes if n.state == "active"}
        assert set(chosen) <= active
        for rid in chosen:
            fleet.restart(rid)
        down = len(fleet.back_in) if _bounds_any_cause(config) else len(fleet.ours)
        assert not decisions or down <= _bound(config)
        fleet.tick(t)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(sorted(AUTOSCALERS)),
    ticks=_ticks,
    bounds=st.tuples(st.integers(1, 4), st.integers(0, 4)),
)
def test_autoscalers_stay_within_min_and_max(kind: str, ticks: list[Any], bounds: Any) -> None:
    low, extra = bounds
    high = low + extra
    config = parse_autoscaler({"kind": kind, "interval_s": DT_S, "scale_up_cooldown_s": 0.0})
    first, second = config.build(), config.build()
    fleet = _Fleet(low)
    for step, t in enumerate(ticks):
        view = fleet_at(step * DT_S, fleet.nodes, min_replicas=low, max_replicas=high)
        decision = first.decide(view)
        assert decision == second.decide(view)
        if decision is None:
            fleet.tick(t)
            continue
        size = countable(fleet.nodes) + decision.delta
        assert low <= size <= high
        active = {n.replica_id for n in fleet.nodes if n.state == "active"}
        assert set(decision.restart) <= active
        for rid in decision.restart:
            fleet.restart(rid)
        if decision.delta > 0:
            for _ in range(decision.delta):
                fleet.nodes.append(node(fleet.next_id, state="loading"))
                fleet.back_in[fleet.next_id] = DOWN_CHECKS
                fleet.next_id += 1
        else:
            fleet.nodes = fleet.nodes[: len(fleet.nodes) + decision.delta]
        fleet.tick(t)
