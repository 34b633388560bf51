"""Scenario mappings and request frames for tests that run the whole simulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from support.allocators import assert_pool_accounting


def scenario_data(
    allocator: Mapping[str, Any] | str,
    capacity_tokens: int,
    *,
    name: str = "test",
    max_seq_tokens: int = 32768,
    sample_interval_s: float = 5.0,
    **extra: Any,
) -> dict[str, Any]:
    """A scenario mapping (for ``parse_scenario``) of one llama-2-7b replica on an A100
    with ``capacity_tokens`` KV slots and ``allocator`` (a mapping, or a kind for its
    defaults); its workload is a placeholder, for a trace passed to ``run`` directly.
    ``extra``: further top-level fields (``scheduler``, ``mode``, ``restart``, ...)."""
    return {
        "name": name,
        "workload": {"preset": "bimodal"},  # unused: the trace is passed directly
        "hardware": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "kv_capacity_tokens": capacity_tokens,
            "max_seq_tokens": max_seq_tokens,
        },
        "allocator": {"kind": allocator} if isinstance(allocator, str) else dict(allocator),
        "metrics": {"sample_interval_s": sample_interval_s},
        **extra,
    }


def request_frame(
    arrivals_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    num_samples: Sequence[int] | np.ndarray | None = None,
) -> pd.DataFrame:
    """A trace in the canonical request schema, request ids 0, 1, ... in the given order
    (``arrivals_s`` must already be sorted)."""
    df = pd.DataFrame(
        {
            "request_id": np.arange(len(arrivals_s), dtype=np.int64),
            "arrival_s": np.asarray(arrivals_s, dtype=float),
            "prompt_tokens": np.asarray(prompt_tokens, dtype=np.int64),
            "output_tokens": np.asarray(output_tokens, dtype=np.int64),
        }
    )
    if num_samples is not None:
        df["num_samples"] = np.asarray(num_samples, dtype=np.int64)
    return df


WASTE_SHARES = (
    "share_token_states",
    "share_reservation",
    "share_internal_fragmentation",
    "share_external_fragmentation_free",
)
"""The timeseries columns that split the pool's waste (they sum to 1)."""


def assert_samples_add_up(timeseries: pd.DataFrame) -> None:
    """Every sample's pool adds up (:func:`support.allocators.assert_pool_accounting`),
    and in every sample but failure-time ones (which record the pool's signals only,
    the split may be missing) the waste shares are >= 0 and sum to 1."""
    ts = timeseries
    assert_pool_accounting(
        ts["used_tokens"],
        ts["reserved_unused_tokens"],
        ts["free_tokens"],
        ts["capacity_tokens"],
        ts["largest_free_extent_tokens"],
    )
    shares = ts.loc[ts["trigger"] != "failure", list(WASTE_SHARES)]
    assert (shares >= -1e-12).all().all()
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, rtol=0, atol=1e-9)
