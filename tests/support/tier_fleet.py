"""A small fleet whose KV offload tier fragments while much of it is free: the tier
alert's run for tests/unit/test_offload_alerts.py and tests/e2e/test_prometheus_tiers.py."""

from __future__ import annotations

from typing import Any

TIER_FLEET: dict[str, Any] = {
    "name": "tier-alert-fleet",
    "seed": 1,
    "mode": "fast",
    "workload": {
        "preset": "chat",
        "synth": {
            "duration_s": 900.0,
            "arrival": {"kind": "poisson", "rate_per_s": 1.5},
            "lengths": {
                "kind": "pair",
                "prompt": {"kind": "uniform", "min_tokens": 50, "max_tokens": 499},
                "output": {"kind": "lognormal", "mean_tokens": 150, "cv": 1.0, "max_tokens": 1024},
            },
            "shared_prefix": {
                "fraction": 0.3,
                "prefix_tokens": 20000,
                "num_prompts": 40,
                "block_tokens": 16,
            },
        },
    },
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
    "allocator": {"kind": "best_fit"},
    "latency": {"kind": "roofline"},
    "metrics": {"sample_interval_s": 45.0},
    "fleet": {"pools": [{"name": "a", "count": 1}], "router": {"kind": "least_outstanding"}},
    "kv_offload": {
        "chunk_tokens": 256,
        "tiers": [
            {
                "kind": "host",
                "capacity_gib": 48,
                "bandwidth_gb_per_s": 25,
                "latency_s": 0.00001,
                "allocator": {"kind": "best_fit"},
            }
        ],
    },
}
"""seed-docs-offload-host's traffic on one replica with a 48 GiB best-fit host tier,
sampled every 45 s (a reading spans one or two 30 s scrapes): documents of 20,000
tokens and chat prompts of a chunk or two fragment the tier while much of it is free.
About a second to simulate."""
