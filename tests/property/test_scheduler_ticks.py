"""Decode ticks change nothing: the scheduler with ``ticks=True`` (the default: decoding
groups on a global counter, pooled growth drawn in bulk) makes the same steps, the same
allocator decisions, the same events with the same pool state and the same records as
with ``ticks=False`` (every group stepped one by one), over every allocator policy and
preemption mode, tight pools included.

Samples are compared too: at random steps the driver reads the pool as a failure
sample would (``unsynced_tokens`` added, nothing synced) and as a periodic sample does
(after ``sync_allocator``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.allocators import assert_covers_registry, build_allocator, config_id, registry_configs
from support.scheduler import SchedulerDriver

from sim.engine.batch import ClientRetry, Group, SchedulerConfig

POLICIES = registry_configs(
    {"kind": "paged", "block_size_tokens": 4},
    {"kind": "vm_paged", "page_bytes": 64 << 10},  # 8-token page groups
    {"kind": "static", "mode": "pow2"},
)


def test_every_registered_policy_is_driven() -> None:
    assert_covers_registry(POLICIES)


def drive(
    policy: dict[str, Any],
    capacity_tokens: int,
    config: SchedulerConfig,
    rows: list[tuple[float, int, int, int, int]],
    probes: set[int],
    ticks: bool,
) -> list[Any]:
    """Run the scheduler as the replica's exact mode does and log everything observable
    (steps, events with the pool a failure sample would read, records, and the pool a
    periodic sample reads after the ``probes`` steps)."""
    driver = SchedulerDriver(
        config, build_allocator(policy, capacity_tokens), ticks=ticks, probes=probes
    )
    for i, (t, prompt, output, width, prefix) in enumerate(rows):
        hashes = tuple(range(prefix)) if prefix else ()
        driver.add(Group(i, t, prompt, output, width, hashes))
    return driver.run().log


rows_strategy = st.lists(
    st.tuples(
        st.floats(0, 0.5, allow_nan=False).map(lambda x: round(x, 3)),
        st.integers(1, 200),
        st.integers(1, 300),
        st.sampled_from([1, 1, 1, 1, 2, 3]),
        st.sampled_from([0, 0, 4, 9]),
    ),
    min_size=1,
    max_size=40,
).map(lambda rs: sorted(rs, key=lambda r: r[0]))


@given(
    policy=st.sampled_from(POLICIES),
    rows=rows_strategy,
    capacity=st.sampled_from([500, 1_000, 2_000, 50_000]),
    preemption=st.sampled_from(["recompute", "swap", "fail"]),
    max_num_seqs=st.sampled_from([3, 8, 64]),
    chunked=st.booleans(),
    probes=st.sets(st.integers(0, 300), max_size=12),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ticks_change_nothing(
    policy: dict[str, Any],
    rows: list[tuple[float, int, int, int, int]],
    capacity: int,
    preemption: str,
    max_num_seqs: int,
    chunked: bool,
    probes: set[int],
) -> None:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=512,
        chunked_prefill=chunked,
        preemption=preemption,  # type: ignore[arg-type]
        retry=ClientRetry(1),
        max_seq_tokens=4096,
        swap_s_per_token=1e-6,
        copy_s_per_token=1e-7,
    )
    want = drive(policy, capacity, config, rows, probes, ticks=False)
    got = drive(policy, capacity, config, rows, probes, ticks=True)
    assert got == want


def _random_rows(seed: int, n: int) -> list[tuple[float, int, int, int, int]]:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.exponential(0.02, n).cumsum()).round(3)
    return [
        (
            float(arrivals[i]),
            int(rng.integers(1, 400)),
            int(rng.integers(1, 400)),
            int(rng.choice([1, 1, 1, 1, 2, 4])),
            int(rng.choice([0, 0, 5, 12])),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("policy", POLICIES, ids=config_id)
@pytest.mark.parametrize("preemption", ["recompute", "swap", "fail"])
def test_ticks_change_nothing_on_long_tight_runs(policy: dict[str, Any], preemption: str) -> None:
    config = SchedulerConfig(
        max_num_seqs=32,
        max_num_batched_tokens=1024,
        preemption=preemption,  # type: ignore[arg-type]
        retry=ClientRetry(2),
        max_seq_tokens=4096,
        swap_s_per_token=1e-6,
        copy_s_per_token=1e-7,
    )
    rows = _random_rows(len(preemption) * 7 + len(policy), 100)
    probes = set(range(0, 3000, 37))
    want = drive(policy, 3_000, config, rows, probes, ticks=False)
    got = drive(policy, 3_000, config, rows, probes, ticks=True)
    assert got == want
    assert sum(1 for e in want if e[0] == "event") > 10  # the pool was tight
