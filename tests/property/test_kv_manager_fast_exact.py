"""Fast mode equals exact mode under the KV managers on hybrid models (the registry-driven
``test_fast_exact_more.py`` runs them on a uniform one): sliding windows that free
blocks as requests grow, and Mamba state blocks, must give the same full outputs
whether the engine grows sequences one step at a time or in closed-form runs up to each
``headroom_tokens``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.allocators import kv_manager_kinds
from support.fast_exact import assert_modes_agree


@st.composite
def hybrid_cases(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], pd.DataFrame]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 20))
    df = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "arrival_s": np.sort(rng.uniform(0.0, 20.0, n)) + 1e-3,
            "prompt_tokens": rng.integers(1, 3000, n).astype(np.int64),
            "output_tokens": rng.integers(1, 1500, n).astype(np.int64),
        }
    )
    policy = draw(st.sampled_from(["queue", "reject"]))
    model = draw(st.sampled_from(["gemma-3-27b", "gpt-oss-20b", "nemotron-h-8b"]))
    # Nemotron-H's state is 51.8 MB a request: its pools need more slots to hold a few
    capacities = [60_000, 200_000] if model == "nemotron-h-8b" else [6_000, 12_000, 40_000]
    data: dict[str, Any] = {
        "name": "kv-fast-exact",
        "seed": 1,
        "workload": {"preset": "bimodal"},  # unused: the trace is passed directly
        "hardware": {
            "model": model,
            "gpu": "h100-80gb",
            "kv_capacity_tokens": draw(st.sampled_from(capacities)),
            "max_seq_tokens": 8192,
        },
        "allocator": {"kind": kind},
        "scheduler": {
            "max_num_seqs": draw(st.sampled_from([2, 8, 32])),
            "preemption": draw(st.sampled_from(["recompute", "swap", "fail"])),
            "chunked_prefill": draw(st.booleans()),
            "on_admission_failure": policy,
            "retry_attempts": draw(st.integers(0, 2)),
        },
        "metrics": {"sample_interval_s": float(rng.uniform(0.5, 5.0))},
    }
    return data, df


@pytest.mark.parametrize("kind", kv_manager_kinds())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_mode_matches_exact_mode_on_hybrid_models(kind: str, data: st.DataObject) -> None:
    assert_modes_agree(*data.draw(hybrid_cases(kind)))
