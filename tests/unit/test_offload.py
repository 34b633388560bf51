"""KV offload tiers (sim.engine.offload): what a store copies, what a load finds and
costs, LRU eviction by object, the inclusive cascade and promotion, restarts, and the
run's outputs: a tier hit costs a GPU hit plus its stated transfer time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.fast_exact import assert_frames_match, run_mode
from support.scenarios import request_frame

from sim.engine import offload as engine_offload
from sim.engine.offload import OffloadTiers, Tier
from sim.engine.offload_record import METRICS, OffloadSamples
from sim.results import offload_summary
from sim.runner import run
from sim.scenario.offload import OffloadConfig
from sim.scenario.schema import ScenarioError, parse_scenario

CHUNK = 4


def _tier(kind: str = "host", tokens: int = 16, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "capacity_bytes": tokens,
        "bandwidth_gb_per_s": 1.0,
        "latency_s": 0.5,
        **extra,
    }


def _tiers(*tiers: dict[str, Any], **options: Any) -> OffloadTiers:
    """Tiers of 1-byte tokens (capacity_bytes = tokens), chunks of 4 tokens, one hash per
    chunk; ``options``: the block's other fields."""
    config = OffloadConfig.model_validate({"chunk_tokens": CHUNK, "tiers": list(tiers), **options})
    return OffloadTiers(config.build(1, 4096, CHUNK))


def _held(tier: Tier) -> int:
    """Tokens the tier's objects hold, after checking the tier's books agree: its
    allocator holds exactly the objects' slots, and its chunk index names exactly
    their chunks (each in one object)."""
    objects = tier.objects
    tokens = sum(len(keys) * CHUNK for keys in objects.values())
    assert tier.held_tokens == tokens
    assert tier.allocator.stats().used_tokens == tokens
    assert {oid: tier.allocator.held_tokens(oid) for oid in objects} == {
        oid: len(keys) * CHUNK for oid, keys in objects.items()
    }
    expected = {key: oid for oid, keys in objects.items() for key in keys}
    assert tier.where == expected
    return tokens


def test_a_store_copies_the_prompts_full_chunks_only() -> None:
    t = _tiers(_tier(tokens=64))
    t.store([1, 2, 3], 11)  # chunks 0 and 1 are full; tokens 8..10 are a partial tail
    host = t.tiers[0]
    assert set(host.where) == {(1, 0), (2, 1)}
    assert _held(host) == 8 and host.bytes_down == 8
    # a later prompt with the same prefix loads what was stored, not its partial tail
    assert t.load([1, 2, 3, 4], 0, 15) == (8, 0.5 + 8 / 1e9)
    assert (host.hits, host.hit_tokens, host.bytes_up) == (1, 8, 8)


def test_a_load_starts_past_the_gpu_hits_and_stops_at_the_first_missing_chunk() -> None:
    t = _tiers(_tier(tokens=64))
    t.store([1, 2, 3, 4], 16)
    # the GPU cached 6 tokens: chunk 1 is loaded for its last 2, then chunks 2 and 3
    tokens, _ = t.load([1, 2, 3, 4], 6, 99)
    assert tokens == 10
    # a prompt differing in chunk 2 loads chunks 0 and 1 only
    assert t.load([1, 2, 9, 4], 0, 99)[0] == 8
    # at most max_tokens (the last prompt token is always computed): whole chunks
    assert t.load([1, 2, 3, 4], 0, 15)[0] == 12
    # nothing to look up past the GPU's hits: neither a hit nor a miss
    host = t.tiers[0]
    before = (host.hits, host.misses)
    assert t.load([1, 2, 3, 4], 16, 99) == (0, 0.0)
    assert (host.hits, host.misses) == before
    assert t.load([7], 0, 99) == (0, 0.0)
    assert host.misses == before[1] + 1


def test_eviction_is_lru_by_object() -> None:
    t = _tiers(_tier(tokens=12))
    host = t.tiers[0]
    t.store([10], 4)  # object a
    t.store([20], 4)  # object b
    t.store([30], 4)  # object c: the tier is full
    t.load([10], 0, 99)  # a is now the most recently used
    t.store([40], 4)  # evicts b, the least recently used
    assert set(host.where) == {(10, 0), (30, 0), (40, 0)}
    assert host.evictions == 1
    assert _held(host) == 12


def test_a_contiguous_tier_evicts_until_one_extent_fits() -> None:
    """Best fit over objects of 4 tokens in a 16-token tier: after the LRU object of a
    hole-ridden pool goes, an 8-token object still does not fit, so eviction goes on
    until an extent of 8 opens (fragmentation costs evictions)."""
    t = _tiers(_tier(tokens=16, allocator={"kind": "best_fit"}))
    host = t.tiers[0]
    for h in (1, 2, 3, 4):
        t.store([h], 4)  # objects at 0, 4, 8, 12
    t.load([2], 0, 99)
    t.load([4], 0, 99)  # LRU order now 1, 3, 2, 4: evicting 1 then 3 leaves holes
    t.store([5, 6], 8)
    assert host.evictions == 3  # 1 and 3 free two 4-token holes; 2 goes too
    assert (4, 0) in host.where and (5, 0) in host.where
    _held(host)


def test_a_store_larger_than_the_tier_is_refused_and_counted() -> None:
    t = _tiers(_tier(tokens=8))
    t.store([1], 4)
    t.store([1, 2, 3], 12)  # chunk 0 is there; chunks 1 and 2 (8 tokens) fit once 1 goes
    host = t.tiers[0]
    assert host.store_refusals == 0 and host.evictions == 1
    t.store([5, 6, 7], 12)
    assert host.store_refusals == 1
    _held(host)


def test_stores_cascade_to_every_tier_and_lower_hits_are_promoted() -> None:
    t = _tiers(
        _tier("host", tokens=8),
        _tier("nvme", tokens=64, bandwidth_gb_per_s=2.0, latency_s=0.25),
    )
    host, nvme = t.tiers
    t.store([1, 2], 8)
    assert set(host.where) == set(nvme.where) == {(1, 0), (2, 1)}
    t.store([3, 4], 8)  # the host evicts the first object; the NVMe keeps both
    assert set(host.where) == {(3, 0), (4, 1)}
    tokens, load_s = t.load([1, 2], 0, 99)
    assert tokens == 8
    assert load_s == 0.25 + 8 / 2e9  # from the NVMe alone
    assert (nvme.hits, host.hits, host.misses) == (1, 0, 1)
    assert set(host.where) == {(1, 0), (2, 1)}  # promoted into the host tier
    # the next load reads the host
    assert t.load([1, 2], 0, 99) == (8, 0.5 + 8 / 1e9)
    _held(host)
    _held(nvme)


def test_a_load_from_two_tiers_pays_each_tiers_latency() -> None:
    t = _tiers(_tier("host", tokens=64), _tier("remote", tokens=64, latency_s=0.125))
    host = t.tiers[0]
    t.store([1, 2], 8)
    host.clear()
    t.store([1], 4)  # the host holds chunk 0 only
    tokens, load_s = t.load([1, 2], 0, 99)
    assert tokens == 8
    assert load_s == (0.5 + 4 / 1e9) + (0.125 + 4 / 1e9)


def test_a_restart_loses_host_and_nvme_tiers_not_a_remote_store() -> None:
    t = _tiers(_tier("host"), _tier("nvme"), _tier("remote"))
    t.store([1], 4)
    t.restart()
    assert [len(tier.where) for tier in t.tiers] == [0, 0, 1]
    assert [tier.bytes_down for tier in t.tiers] == [4, 4, 4]  # counters run on
    assert [tier.allocator.stats().used_tokens for tier in t.tiers] == [0, 0, 4]


def test_a_store_threshold_stores_a_chunk_at_its_nth_offer() -> None:
    t = _tiers(_tier(tokens=64), store_threshold=2)
    host = t.tiers[0]
    t.store([1, 2], 8)  # first offer of both chunks: nothing stored
    assert not host.where and t.skipped_stores == 2
    t.store([1, 3], 8)  # second offer of chunk (1, 0); first of (3, 1)
    assert set(host.where) == {(1, 0)}
    t.store([1, 2], 8)  # (2, 1) at its second offer; (1, 0) is already there
    assert set(host.where) == {(1, 0), (2, 1)}
    assert t.offers == {(3, 1): 1, (1, 0): 3, (2, 1): 2}  # least recently offered first


def test_the_offer_tracker_forgets_the_least_recent_key_not_being_offered() -> None:
    t = _tiers(_tier(tokens=64), store_threshold=2, max_tracker_size=2)
    t.store([1], 4)
    t.store([2], 4)
    t.store([1, 3], 8)  # (1, 0) counted and protected; (3, 1) forgets (2, 0)
    assert t.offers == {(1, 0): 2, (3, 1): 1}
    t.store([4, 5], 8)  # two new keys, tracker full: both older keys go
    assert t.offers == {(4, 0): 1, (5, 1): 1}
    t = _tiers(_tier(tokens=64), store_threshold=2, max_tracker_size=1)
    t.store([1, 2], 8)  # a full tracker of keys of this very offer: (2, 1) untracked
    assert t.offers == {(1, 0): 1}


def test_chunk_keys_follow_the_hash_covering_each_chunks_last_token() -> None:
    # 8-token hashes, 4-token chunks: chunks 0 and 1 share hash 0's block
    keys = engine_offload.chunk_keys([11, 22], 8, 4, 0, 100)
    assert keys == [(11, 0), (11, 1), (22, 2), (22, 3)]
    assert engine_offload.chunk_keys([11, 22], 8, 4, 1, 11) == [(11, 1)]


def test_the_results_layer_names_the_engines_tier_kinds() -> None:
    assert offload_summary.TIER_KINDS == engine_offload.TIER_KINDS


# -- a run ----------------------------------------------------------------------------------

PROMPT = 1000
HASH_BLOCK = 16
BPT = 2 * 32 * 4096 * 2  # llama-2-7b


def _trace() -> pd.DataFrame:
    """Two requests of one 1,000-token prompt, the second long after the first."""
    df = request_frame([0.0, 100.0], [PROMPT, PROMPT], [4, 4])
    hashes = list(range(1, -(-PROMPT // HASH_BLOCK) + 1))
    df["prefix_hashes"] = [hashes, hashes]
    df["prefix_block_tokens"] = np.int64(HASH_BLOCK)
    return df


def _scenario(**extra: Any) -> dict[str, Any]:
    return {
        "name": "offload-test",
        "workload": {"trace": "unused.csv"},
        "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
        "metrics": {"sample_interval_s": 50},
        **extra,
    }


HOST = {
    "chunk_tokens": HASH_BLOCK,
    "tiers": [{"kind": "host", "capacity_gib": 4, "bandwidth_gb_per_s": 2.0, "latency_s": 0.01}],
}


def test_a_tier_hit_costs_a_gpu_hit_plus_its_transfer_time() -> None:
    """The second request finds its prefix in the GPU's prefix cache (paged, caching)
    or, with a GPU pool that caches nothing, in a host tier: the same tokens are not
    computed, and the tier's costs latency + bytes / bandwidth more, to the request's
    TTFT exactly."""
    gpu = run(
        parse_scenario(
            _scenario(allocator={"kind": "paged", "block_size_tokens": 16, "prefix_caching": True})
        ),
        _trace(),
    )
    tier = run(
        parse_scenario(
            _scenario(
                allocator={"kind": "paged", "block_size_tokens": 16, "prefix_caching": False},
                kv_offload=HOST,
            )
        ),
        _trace(),
    )
    g, t = gpu.requests, tier.requests
    hit = (PROMPT - 1) // HASH_BLOCK * HASH_BLOCK
    assert g["cached_tokens"].tolist() == t["cached_tokens"].tolist() == [0, hit]
    ttft_g = (g["first_token_s"] - g["arrival_s"]).to_numpy()
    ttft_t = (t["first_token_s"] - t["arrival_s"]).to_numpy()
    assert ttft_t[0] == ttft_g[0]
    assert ttft_t[1] == pytest.approx(ttft_g[1] + 0.01 + hit * BPT / 2e9, rel=1e-12)
    section = tier.summary.offload
    assert section is not None and gpu.summary.offload is None
    (host,) = section.tiers
    assert (host.hits, host.misses, host.hit_tokens) == (1, 1, hit)  # the first missed
    assert host.bytes_down == hit * BPT  # the first prompt's 62 full chunks
    assert host.bytes_up == hit * BPT
    assert host.load_s == pytest.approx(0.01 + hit * BPT / 2e9)
    assert section.loaded_tokens == hit


def test_without_kv_offload_the_outputs_have_no_tier_columns() -> None:
    r = run(parse_scenario(_scenario(allocator={"kind": "best_fit"})), _trace())
    assert not [c for c in r.timeseries.columns if c.startswith("offload_")]
    assert "offload" not in r.summary.to_json_dict()


def test_a_best_fit_gpu_pool_gains_prefix_hits_from_a_tier() -> None:
    r = run(parse_scenario(_scenario(allocator={"kind": "best_fit"}, kv_offload=HOST)), _trace())
    hit = (PROMPT - 1) // HASH_BLOCK * HASH_BLOCK
    assert r.requests["cached_tokens"].tolist() == [0, hit]
    ts = r.timeseries
    final = ts[ts["trigger"] == "final"].iloc[-1]
    assert final["offload_host_used_bytes"] == hit * BPT
    assert final["offload_host_hits_total"] == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"capacity_bytes": 1024, "capacity_gib": None}, "kv_offload.tiers.0.capacity_bytes"),
        ({"capacity_bytes": 1024}, "give exactly one of capacity_bytes and capacity_gib"),
        ({"allocator": {"kind": "hybrid_kv"}}, "is a KV manager"),
        ({"allocator": {"kind": "paged", "prefix_caching": True}}, "prefix_caching"),
        ({"allocator": {"kind": "best_fit", "growth_factor": 0.5}}, "growth_factor"),
        ({"bandwidth_gb_per_s": 0}, "bandwidth_gb_per_s"),
        ({"kind": "disk"}, "kind"),
    ],
)
def test_a_bad_tier_is_refused_naming_its_field(change: dict[str, Any], message: str) -> None:
    tier = {**HOST["tiers"][0], **change}  # type: ignore[dict-item]
    tier = {k: v for k, v in tier.items() if v is not None}
    data = _scenario(allocator={"kind": "best_fit"}, kv_offload={**HOST, "tiers": [tier]})
    with pytest.raises(ScenarioError) as err:
        run(parse_scenario(data), _trace())
    text = str(err.value)
    assert message in text and "kv_offload" in text, text
    assert len(text.splitlines()) == 1, text


def test_two_tiers_of_one_kind_and_per_chunk_allocation_are_refused() -> None:
    twice = {**HOST, "tiers": [HOST["tiers"][0], HOST["tiers"][0]]}  # type: ignore[index]
    with pytest.raises(ScenarioError, match="tier kind 'host' is given 2 times"):
        parse_scenario(_scenario(allocator={"kind": "best_fit"}, kv_offload=twice))
    with pytest.raises(ScenarioError, match="allocate_per_chunk is not modelled"):
        parse_scenario(
            _scenario(
                allocator={"kind": "paged"},
                scheduler={"allocate_per_chunk": True, "chunked_prefill": True},
                kv_offload=HOST,
            )
        )


def _reuse_trace(n: int = 120) -> pd.DataFrame:
    """Requests over 10 prefixes of 600-2,400 tokens (with their own tails), arriving
    every 0.4 s: the tiers store, evict, hit and promote."""
    rng = np.random.default_rng(3)
    prompts, hashes = [], []
    for i in range(n):
        family = int(rng.integers(0, 10))
        shared = 600 + 200 * family
        tail = int(rng.integers(1, 400))
        blocks = -(-(shared + tail) // HASH_BLOCK)
        own = [10_000 * (i + 1) + j for j in range(blocks)]
        hashes.append(
            [family * 1000 + j if j < shared // HASH_BLOCK else own[j] for j in range(blocks)]
        )
        prompts.append(shared + tail)
    df = request_frame(
        [0.4 * i for i in range(n)], prompts, [int(v) for v in rng.integers(1, 60, n)]
    )
    df["prefix_hashes"] = hashes
    df["prefix_block_tokens"] = np.int64(HASH_BLOCK)
    return df


TWO_TIERS = {
    "chunk_tokens": 64,
    "tiers": [
        {
            "kind": "host",
            "capacity_bytes": 4_000 * BPT,
            "bandwidth_gb_per_s": 25.0,
            "latency_s": 1e-4,
            "allocator": {"kind": "best_fit"},
        },
        {
            "kind": "nvme",
            "capacity_bytes": 20_000 * BPT,
            "bandwidth_gb_per_s": 6.0,
            "latency_s": 1e-3,
        },
    ],
}


def _filled(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns with their missing values as "" (NaN is not equal to NaN)."""
    text = [c for c in df.columns if pd.api.types.is_string_dtype(df[c]) or df[c].dtype == object]
    return df.assign(**{c: df[c].fillna("") for c in text})


@pytest.mark.parametrize("fleet", [False, True])
def test_fast_mode_equals_exact_mode_with_tiers(fleet: bool) -> None:
    data = _scenario(
        allocator={"kind": "paged", "block_size_tokens": 16, "prefix_caching": False},
        hardware={"model": "llama-2-7b", "gpu": "a100-80gb", "kv_capacity_tokens": 6_000},
        kv_offload=TWO_TIERS,
    )
    if fleet:
        data["fleet"] = {"pools": [{"name": "a", "count": 2}], "router": {"kind": "round_robin"}}
    else:
        data["restart"] = {"every_s": 20.0, "mode": "kill", "downtime_s": 1.0}
    df = _reuse_trace()
    fast, exact = run_mode(data, df, "fast"), run_mode(data, df, "exact")
    for name in ("requests", "events", "timeseries"):
        f, e = (_filled(getattr(r, name)) for r in (fast, exact))
        assert_frames_match(name, f, e)
    assert fast.summary.offload == exact.summary.offload
    r = fast
    assert r.summary.offload is not None
    host, nvme = r.summary.offload.tiers
    assert host.hits and host.evictions and nvme.hits  # the case is not vacuous
    # every transfer ends: each load completes within the step that admits its request,
    # and every request of the trace ends, none left waiting on a tier
    assert len(r.requests) == len(df) and (r.requests["status"] != "").all()
    assert r.requests["finish_s"].notna().all()
    assert r.summary.offload.loaded_tokens == host.hit_tokens + nvme.hit_tokens
    assert host.bytes_up + nvme.bytes_up == r.summary.offload.loaded_tokens * BPT


def test_tier_columns_backfill_replicas_and_samples_without_the_tier() -> None:
    samples = OffloadSamples()
    samples.add(None)  # a replica without tiers, before any tier was seen
    t = _tiers(_tier("host"), _tier("remote"))
    t.store([1], 4)
    samples.add(t)
    samples.add(None)
    frame = samples.frame()
    assert list(frame.columns) == [
        f"offload_{kind}_{m}" for kind in ("host", "remote") for m in METRICS
    ]
    assert len(frame) == 3
    used = frame["offload_host_used_bytes"].tolist()
    assert np.isnan(used[0]) and used[1] == 4 and np.isnan(used[2])
