"""Offload tiers under any sequence of stores, loads and restarts, on every single-pool
allocator a tier may use (the registry's kinds but the KV managers, read off the
registry): each tier's allocator keeps the pool's accounting, holds exactly the
tier's objects, and every chunk lives in exactly one object of a tier; every byte
written into a tier is held, evicted or lost to a restart; every load ends with at most
the tokens asked for, costing at least each tier's latency it read from."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.allocators import KV_BYTES_PER_TOKEN, check_pool, registry_configs

from sim.engine.offload import OffloadTiers, TierStore
from sim.scenario.offload import KV_MANAGERS, OffloadConfig

CHUNK = 16
TIER_KINDS = [c for c in registry_configs() if c["kind"] not in KV_MANAGERS]

ops = st.lists(
    st.tuples(
        st.sampled_from(["store", "store", "load", "load", "restart"]),
        st.integers(0, 5),  # prefix family
        st.integers(1, 1200),  # prompt tokens
        st.integers(0, 120),  # GPU cached tokens (a load)
    ),
    max_size=40,
)


def _check(t: OffloadTiers) -> None:
    for tier in t.tiers:
        s = check_pool(tier.allocator)
        tokens = sum(len(keys) * CHUNK for keys in tier.objects.values())
        assert tier.held_tokens == tokens
        assert s.used_tokens == tokens
        for oid, keys in tier.objects.items():
            assert tier.allocator.held_tokens(oid) == len(keys) * CHUNK
        owners = {key: oid for oid, keys in tier.objects.items() for key in keys}
        assert tier.where == owners
        assert len(owners) == sum(len(keys) for keys in tier.objects.values())  # no chunk twice
        bpt = tier.kv_bytes_per_token
        written = tier.bytes_down // bpt
        assert written == tier.held_tokens + tier.evicted_tokens + tier.lost_tokens


def _hashes(family: int, tokens: int) -> list[int]:
    """Chained hashes, one per chunk: families share their first two chunks."""
    n = -(-tokens // CHUNK)
    return [(0 if j < 2 else family) * 1000 + j for j in range(n)]


@given(
    allocator=st.sampled_from(TIER_KINDS),
    capacity_chunks=st.integers(16, 48),  # a vm_paged page group is 16 chunks
    two_tiers=st.booleans(),
    threshold=st.sampled_from([1, 1, 2, 3]),
    steps=ops,
)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_tiers_keep_their_books(
    allocator: dict[str, Any],
    capacity_chunks: int,
    two_tiers: bool,
    threshold: int,
    steps: list[tuple[str, int, int, int]],
) -> None:
    tier = {
        "kind": "host",
        "capacity_bytes": capacity_chunks * CHUNK * KV_BYTES_PER_TOKEN,
        "bandwidth_gb_per_s": 10.0,
        "latency_s": 0.001,
        "allocator": allocator,
    }
    tiers = [tier]
    if two_tiers:
        tiers.append({**tier, "kind": "remote", "capacity_bytes": 2 * tier["capacity_bytes"]})
    config = OffloadConfig.model_validate(
        {
            "chunk_tokens": CHUNK,
            "tiers": tiers,
            "store_threshold": threshold,
            "max_tracker_size": 50,
        }
    )
    t = OffloadTiers(config.build(KV_BYTES_PER_TOKEN, 4096, CHUNK))
    for op, family, tokens, cached in steps:
        hashes = _hashes(family, tokens)
        if op == "store":
            t.store(hashes, tokens)
        elif op == "load":
            gpu = min(cached, tokens - 1)
            loaded, load_s = t.load(hashes, gpu, tokens - 1)
            assert 0 <= loaded <= max(0, tokens - 1 - gpu)
            assert (loaded == 0) == (load_s == 0.0)
            if loaded:
                assert load_s >= 0.001
        else:
            t.restart()
        _check(t)
        assert len(t.offers) <= 50


@given(
    allocator=st.sampled_from(TIER_KINDS),
    capacity_chunks=st.integers(16, 48),
    steps=st.lists(st.tuples(st.integers(0, 2), ops.map(lambda s: s[:1])), max_size=40),
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_shared_store_keeps_its_books_across_replicas(
    allocator: dict[str, Any],
    capacity_chunks: int,
    steps: list[tuple[int, list[tuple[str, int, int, int]]]],
) -> None:
    """Three replicas' stores, loads and restarts on one shared remote store: its
    allocator holds exactly its objects, and the bytes the replicas wrote, summed, are
    the tokens it holds or evicted (a remote store loses nothing to a restart)."""
    tier = {
        "kind": "remote",
        "capacity_bytes": capacity_chunks * CHUNK * KV_BYTES_PER_TOKEN,
        "bandwidth_gb_per_s": 10.0,
        "latency_s": 0.001,
        "allocator": allocator,
        "shared": True,
    }
    config = OffloadConfig.model_validate({"chunk_tokens": CHUNK, "tiers": [tier]})
    shared: dict[str, tuple[int, TierStore]] = {}
    replicas = [
        OffloadTiers(config.build(KV_BYTES_PER_TOKEN, 4096, CHUNK, shared)) for _ in range(3)
    ]
    store = shared["remote"][1]
    for replica, one in steps:
        t = replicas[replica]
        for op, family, tokens, cached in one:
            hashes = _hashes(family, tokens)
            if op == "store":
                t.store(hashes, tokens)
            elif op == "load":
                t.load(hashes, min(cached, tokens - 1), tokens - 1)
            else:
                t.restart()
        s = check_pool(store.allocator)
        assert (
            s.used_tokens
            == store.held_tokens
            == sum(len(keys) * CHUNK for keys in store.objects.values())
        )
        assert store.where == {key: oid for oid, keys in store.objects.items() for key in keys}
        written = sum(r.tiers[0].bytes_down for r in replicas) // KV_BYTES_PER_TOKEN
        assert written == store.held_tokens + store.evicted_tokens and store.lost_tokens == 0
