"""A remote store shared by a fleet's replicas (``kv_offload.tiers[].shared``): one
store (allocator, LRU, chunk index) behind every replica's remote tier, each replica
counting its own loads and the evictions its own stores caused; exact mode only."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.tier_fleet import TIER_FLEET

from sim.engine.offload import OffloadTiers, TierStore
from sim.runner import run
from sim.scenario.offload import OffloadConfig
from sim.scenario.schema import ScenarioError, parse_scenario

CHUNK = 4


def _remote(tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "remote",
        "capacity_bytes": tokens,
        "bandwidth_gb_per_s": 1.0,
        "latency_s": 0.5,
        "allocator": {"kind": "best_fit"},
        **extra,
    }


def _replicas(n: int, tokens: int = 32) -> tuple[list[OffloadTiers], TierStore]:
    """``n`` replicas' tiers built as a run builds its pools: one dict of shared stores."""
    config = OffloadConfig.model_validate(
        {"chunk_tokens": CHUNK, "tiers": [_remote(tokens, shared=True)]}
    )
    shared: dict[str, tuple[int, TierStore]] = {}
    tiers = [OffloadTiers(config.build(1, 4096, CHUNK, shared)) for _ in range(n)]
    return tiers, shared["remote"][1]


def test_a_prefix_one_replica_stored_is_a_hit_on_another() -> None:
    (a, b), store = _replicas(2)
    assert a.tiers[0].store is b.tiers[0].store is store
    a.store([1, 2, 3], 12)  # three full chunks
    assert b.load([1, 2, 3, 4], 0, 15) == (12, 0.5 + 12 / 1e9)
    ra, rb = a.tiers[0], b.tiers[0]
    # each replica counts what it did: a stored, b loaded
    assert (ra.bytes_down, ra.hits, rb.bytes_down, rb.hits, rb.hit_tokens) == (12, 0, 0, 1, 12)
    # a store of chunks already there writes nothing and touches them
    b.store([1, 2, 3], 12)
    assert rb.bytes_down == 0 and len(store.objects) == 1


def test_evictions_are_counted_by_the_replica_whose_store_caused_them() -> None:
    (a, b), store = _replicas(2, tokens=16)
    a.store([1, 2], 8)
    b.store([5, 6], 8)  # the store is full: 16 tokens
    a.store([9, 10, 11], 12)  # evicts both objects, LRU first (a's, then b's)
    assert (a.tiers[0].evictions, b.tiers[0].evictions) == (2, 0)
    assert set(store.where) == {(9, 0), (10, 1), (11, 2)}
    # the store's books: written = held + evicted, however many replicas wrote
    written = sum(t.tiers[0].bytes_down for t in (a, b))
    assert written == store.held_tokens + store.evicted_tokens == 28
    # a replica's restart keeps a remote store (a separate service)
    b.restart()
    assert store.held_tokens == 12 and a.load([9, 10, 11, 12], 0, 15)[0] == 12


def test_without_shared_each_replica_has_its_own_store() -> None:
    config = OffloadConfig.model_validate({"chunk_tokens": CHUNK, "tiers": [_remote(32)]})
    shared: dict[str, tuple[int, TierStore]] = {}
    a, b = (OffloadTiers(config.build(1, 4096, CHUNK, shared)) for _ in range(2))
    a.store([1, 2, 3], 12)
    assert b.load([1, 2, 3, 4], 0, 15) == (0, 0.0) and not shared


def _fleet(shared: bool, count: int = 3, gib: float = 64) -> dict[str, Any]:
    """The tier fleet with a best-fit remote tier of ``gib`` per store, in exact mode."""
    data = copy.deepcopy(TIER_FLEET)
    data["mode"] = "exact"
    data["workload"]["synth"]["duration_s"] = 300.0
    data["fleet"]["pools"] = [{"name": "a", "count": count}]
    data["kv_offload"]["tiers"] = [_remote(0, shared=shared) | {"capacity_gib": gib}]
    del data["kv_offload"]["tiers"][0]["capacity_bytes"]
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"mode": "fast"},
            "kv_offload.tiers.0.shared needs mode: exact: fast mode runs replicas ahead",
        ),
        (
            {"kv_offload": {"tiers": [_remote(1 << 30, shared=True) | {"kind": "host"}]}},
            "shared: a host tier is the replica's own memory; only a remote store is shared",
        ),
    ],
)
def test_a_shared_store_is_refused_where_it_cannot_be_modelled(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(_fleet(True) | change)


def test_pools_of_other_kv_sizes_cannot_share_one_store() -> None:
    data = _fleet(True, count=1)
    data["fleet"]["pools"].append({"name": "b", "count": 1, "hardware": {"model": "llama-3.1-8b"}})
    with pytest.raises(ScenarioError, match=r"kv_offload.tiers.0.shared: one store holds one"):
        run(parse_scenario(data))


def test_one_replica_sharing_a_store_is_one_replica_with_its_own() -> None:
    own = run(parse_scenario(_fleet(False, count=1)))
    shared = run(parse_scenario(_fleet(True, count=1)))
    assert own.summary.to_json_dict() == shared.summary.to_json_dict()
    assert own.timeseries.equals(shared.timeseries)


def test_a_fleet_shares_one_store_in_exact_mode() -> None:
    own = run(parse_scenario(_fleet(False)))
    shared = run(parse_scenario(_fleet(True, gib=3 * 64)))  # the same memory in all
    ts = shared.timeseries
    final = ts[ts["trigger"] == "final"]
    # every replica reports the one store's pool at the run's end
    assert final["offload_remote_used_bytes"].nunique() == 1
    assert final["offload_remote_objects"].nunique() == 1
    # one store of the three replicas' memory finds a document any of them stored
    tier_own, tier_shared = own.summary.offload.tiers[0], shared.summary.offload.tiers[0]  # type: ignore[union-attr]
    assert tier_shared.hits > tier_own.hits


def test_fast_mode_set_past_the_schema_is_refused_before_simulating() -> None:
    """``fragsim run --mode fast`` sets the mode on a parsed scenario (no validation)."""
    scenario = parse_scenario(_fleet(True)).model_copy(update={"mode": "fast"})
    with pytest.raises(ScenarioError, match=r"field kv_offload.tiers.0.shared: a shared store"):
        run(scenario)
