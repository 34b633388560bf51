"""Fast mode = exact mode on the FULL outputs: the request records, every timeseries
sample (periodic and failure-time) and the event log, over every allocator family,
scheduled restarts (drain and kill), queue timeouts, skip-ahead admission, refusals with
client retries, chunked prefill, the three preemption modes, multi-sequence groups,
prefix-hash traces, tight pools and runs cut at ``duration_s``.

Compared: same row count and columns; non-float columns (status, trigger, kind, cause,
counts, token figures) exactly; float columns (times, uptimes, shares) to 1e-9 absolute
or relative, NaN matching NaN.

Ties. Every continuous quantity is drawn from a numpy Generator (arrival times, sample
interval, restart period and downtime, queue timeout, retry backoff, duration), never a
round number, so that no two events of different processes fall at the same float time.
At an exact tie (an arrival exactly on a sample time or a restart time, say) the two
modes may legitimately order the simultaneous events differently (exact mode follows
SimPy's event queue, fast mode its own feed list), and their outputs may then differ
without either being wrong. Hypothesis still shrinks the discrete choices (allocator,
options, sizes) and the seed of the continuous ones.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.allocators import assert_covers_registry, config_id, registry_configs
from support.fast_exact import assert_modes_agree, run_mode
from support.scenarios import request_frame, scenario_data

from policies.allocators.base import PoolSpec
from policies.allocators.paged import PagedAllocator
from sim.engine.outlet import ReplicaOutlet
from sim.engine.replica import Replica
from sim.engine.scheduler import Group, SchedulerConfig
from sim.latency.models import ConstantLatency

PREFIX_CACHING: dict[str, Any] = {"kind": "paged", "block_size_tokens": 16, "prefix_caching": True}
ALLOCATORS = registry_configs(
    {"kind": "paged", "block_size_tokens": 16, "prefix_caching": False},
    PREFIX_CACHING,
    {"kind": "vm_paged", "page_bytes": 64 << 10},
    {"kind": "static", "mode": "pow2"},
)
"""Every registered policy with its defaults, then variants."""

HASH_BLOCK_TOKENS = 16
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PER_POLICY = settings(SETTINGS, max_examples=18)
"""Fewer examples a policy: the list grows with the registry."""


def make_trace(
    rng: np.random.Generator, n: int, max_samples: int, hashes: bool, span_s: float
) -> pd.DataFrame:
    """``n`` requests with continuous arrival times in (0, span_s]; with ``hashes``, a
    ``prefix_hashes`` column where requests of one family share a random-length prefix."""
    arrivals = np.sort(rng.uniform(0.0, span_s, n)) + rng.uniform(1e-3, 0.5)
    prompts = rng.integers(1, 2500, n)
    df = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "arrival_s": arrivals,
            "prompt_tokens": prompts.astype(np.int64),
            "output_tokens": rng.integers(1, 500, n).astype(np.int64),
            "num_samples": rng.integers(1, max_samples + 1, n).astype(np.int64),
        }
    )
    if hashes:
        rows: list[list[int]] = []
        for i, p in enumerate(prompts.tolist()):
            blocks = int(p) // HASH_BLOCK_TOKENS
            family = int(rng.integers(0, 3))
            shared = int(rng.integers(0, blocks + 1))
            rows.append(
                [family * 1_000_000 + j for j in range(shared)]
                + [(i + 1) * 1_000_000_000 + j for j in range(shared, blocks)]
            )
        df["prefix_hashes"] = rows
    return df


@st.composite
def cases(
    draw: st.DrawFn,
    allocator: dict[str, Any] | None = None,
    restart: bool | None = None,
    duration: bool | None = None,
    hashes: bool | None = None,
    retention: bool = False,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """A scenario mapping and its trace: discrete choices from Hypothesis, continuous
    values from a numpy Generator seeded by Hypothesis (see the module docstring)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if allocator is None:
        allocator = draw(st.sampled_from(ALLOCATORS))
    n = draw(st.integers(2, 25))
    max_samples = draw(st.integers(1, 3))
    if hashes is None:
        hashes = allocator["kind"] == "paged" and draw(st.booleans())
    span_s = float(rng.uniform(5.0, 30.0))
    df = make_trace(rng, n, max_samples, hashes, span_s)
    if hashes and draw(st.booleans()):  # the allocator adopts the trace's hash block size
        df["prefix_block_tokens"] = np.int64(HASH_BLOCK_TOKENS)

    policy = draw(st.sampled_from(["queue", "queue", "reject"]))
    sched: dict[str, Any] = {
        "max_num_seqs": draw(st.sampled_from([1, 2, 4, 16])),
        "preemption": draw(st.sampled_from(["recompute", "swap", "fail"])),
        "chunked_prefill": draw(st.booleans()),
        "head_of_line": draw(st.booleans()),
        "on_admission_failure": policy,
    }
    if policy == "reject" or draw(st.booleans()):
        sched["retry_attempts"] = draw(st.integers(0, 3))
        sched["retry_backoff_s"] = float(rng.uniform(0.05, 3.0))
    if draw(st.booleans()):
        sched["queue_timeout_s"] = float(rng.uniform(0.3, 10.0))
    if sched["chunked_prefill"] and draw(st.booleans()):
        sched["max_num_batched_tokens"] = draw(st.sampled_from([256, 1000, 4096]))

    data: dict[str, Any] = {
        "name": "fast-exact",
        "seed": draw(st.integers(0, 3)),
        "workload": {"preset": "bimodal"},  # unused: the trace is passed directly
        "hardware": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "kv_capacity_tokens": draw(st.sampled_from([3_000, 5_000, 8_000, 20_000])),
            "max_seq_tokens": 32768,
        },
        "allocator": allocator,
        "scheduler": sched,
        "metrics": {"sample_interval_s": float(rng.uniform(0.5, 5.0))},
    }
    if restart is None:
        restart = draw(st.booleans())
    if restart:
        data["restart"] = {
            "every_s": float(rng.uniform(2.0, 25.0)),
            "mode": draw(st.sampled_from(["drain", "kill"])),
            "downtime_s": float(rng.uniform(0.2, 5.0)),
        }
    if duration is None:
        duration = draw(st.booleans())
    if duration:
        data["duration_s"] = float(rng.uniform(0.3, 1.2) * span_s)
    if retention:
        data["retention"] = draw_retention(draw, rng, df)
    return data, df


def draw_retention(draw: st.DrawFn, rng: np.random.Generator, df: pd.DataFrame) -> dict[str, Any]:
    """A retention block (``sim.scenario.retention``); for ``session_ttl`` the trace gets
    a ``session_id`` column (some requests without one)."""
    kind = draw(st.sampled_from(["session_ttl", "heavy_tail", "leak"]))
    if kind == "session_ttl":
        n = len(df)
        ids = rng.integers(0, max(1, n // 3), n)
        missing = rng.random(n) < 0.2
        missing[0] = False  # at least one request has a session
        df["session_id"] = pd.array(
            [None if m else int(i) for i, m in zip(ids, missing, strict=True)],
            dtype="Int64",
        )
        return {"kind": kind, "ttl_s": float(rng.uniform(0.2, 20.0))}
    seed = draw(st.integers(0, 3))
    fraction = draw(st.sampled_from([0.1, 0.5, 1.0]))
    if kind == "leak":
        return {"kind": kind, "fraction": fraction * 0.3, "seed": seed}
    return {
        "kind": kind,
        "fraction": fraction,
        "alpha": float(rng.uniform(0.8, 3.0)),
        "scale_s": float(rng.uniform(0.1, 5.0)),
        "seed": seed,
    }


def test_every_registered_policy_is_covered() -> None:
    assert_covers_registry(ALLOCATORS)


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=config_id)
@given(data=st.data())
@PER_POLICY
def test_full_outputs_match(allocator: dict[str, Any], data: st.DataObject) -> None:
    """Every option mixed at random, per allocator policy."""
    assert_modes_agree(*data.draw(cases(allocator=allocator)))


@given(case=cases(restart=True))
@SETTINGS
def test_full_outputs_match_with_restarts(case: tuple[dict[str, Any], pd.DataFrame]) -> None:
    """A drain or kill restart every few seconds, with its downtime."""
    assert_modes_agree(*case)


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=config_id)
@given(data=st.data())
@settings(SETTINGS, max_examples=10)
def test_full_outputs_match_with_retention(allocator: dict[str, Any], data: st.DataObject) -> None:
    """KV kept after requests finish (session TTL, heavy-tailed, leaked): releases are
    decisions, in both modes at the same step boundaries; idle replicas wake for them."""
    assert_modes_agree(*data.draw(cases(allocator=allocator, retention=True)))


@given(case=cases(retention=True, restart=True))
@SETTINGS
def test_full_outputs_match_with_retention_and_restarts(
    case: tuple[dict[str, Any], pd.DataFrame],
) -> None:
    """A restart forgets retained allocations with the allocator."""
    assert_modes_agree(*case)


@given(case=cases(duration=True))
@SETTINGS
def test_full_outputs_match_when_cut_at_duration(
    case: tuple[dict[str, Any], pd.DataFrame],
) -> None:
    """The run stops at ``duration_s`` with requests still queued or running."""
    assert_modes_agree(*case)


@given(case=cases(allocator=PREFIX_CACHING, hashes=True))
@SETTINGS
def test_full_outputs_match_with_prefix_hashes(
    case: tuple[dict[str, Any], pd.DataFrame],
) -> None:
    """vLLM prefix caching over a trace whose requests share prompt prefixes."""
    assert_modes_agree(*case)


@given(case=cases())
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_mode_is_deterministic(case: tuple[dict[str, Any], pd.DataFrame]) -> None:
    """The same scenario and trace twice: byte-identical frames."""
    data, df = case
    a, b = run_mode(data, df, "fast"), run_mode(data, df, "fast")
    assert a.requests.equals(b.requests)
    assert a.timeseries.equals(b.timeseries)
    assert a.events.equals(b.events)


def _known_case(scheduler: dict[str, Any], allocator: str, capacity_tokens: int) -> dict[str, Any]:
    return scenario_data(
        allocator, capacity_tokens, name="fast-exact", sample_interval_s=3600.0, scheduler=scheduler
    )


def test_timeout_of_an_arrival_behind_a_blocked_head() -> None:
    """Request 1 is preempted (recompute) at 7.59 s and blocks the head; request 2
    arrives at 7.63 s behind it and must time out at 7.63 + 0.81 s."""
    data = _known_case({"queue_timeout_s": 0.8108185428665167}, "best_fit", 5_000)
    df = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_s": [4.631557568809968, 6.8326929794793845, 7.625976635277308],
            "prompt_tokens": [540, 1952, 2241],
            "output_tokens": [432, 330, 310],
        }
    )
    assert_modes_agree(data, df, in_hypothesis=False)


def test_refusal_on_arrival_while_down() -> None:
    """A drain restart at 20.18 s with 4.16 s downtime; the only request arrives at
    20.56 s with 2 samples on a 1-sequence batch and is refused at once."""
    data = _known_case({"max_num_seqs": 1}, "paged", 20_000)
    data["restart"] = {"every_s": 20.18453252355884, "mode": "drain", "downtime_s": 4.16}
    df = pd.DataFrame(
        {
            "request_id": [0],
            "arrival_s": [20.559310955797983],
            "prompt_tokens": [1820],
            "output_tokens": [305],
            "num_samples": [2],
        }
    )
    assert_modes_agree(data, df, in_hypothesis=False)


def test_requests_due_when_a_kill_restart_begins_are_queued_first() -> None:
    """Requests that arrived while a step was in flight are queued before the restart
    takes the replica down (found by the random test: fast mode once scheduled a
    negative delay for them)."""
    data = _known_case(
        {"max_num_seqs": 16, "head_of_line": False, "queue_timeout_s": 6.420709470801275},
        "buddy",
        3_000,
    )
    data["metrics"] = {"sample_interval_s": 2.965568464813328}
    data["restart"] = {"every_s": 4.1621223511808365, "mode": "kill", "downtime_s": 3.2371063}
    df = pd.DataFrame(
        {
            "request_id": list(range(19)),
            "arrival_s": [
                0.37067901993039415,
                1.1644220617154528,
                2.0916590128072747,
                2.1677769980856336,
                2.221535434572299,
                2.4610844890026273,
                2.671036841537868,
                2.760039071083072,
                3.0021075386575973,
                3.0773758306478887,
                3.997696269623503,
                4.041437972378643,
                4.1700274005731774,
                4.642652519983368,
                4.821516309003986,
                4.824088961452144,
                4.8962439377442415,
                4.923560883552337,
                5.529000709632644,
            ],
            "prompt_tokens": [
                6,
                1244,
                840,
                81,
                612,
                724,
                2288,
                1896,
                1298,
                1942,
                887,
                325,
                255,
                1228,
                427,
                996,
                2144,
                732,
                2309,
            ],
            "output_tokens": [
                498,
                141,
                489,
                200,
                234,
                222,
                99,
                2,
                37,
                232,
                229,
                425,
                327,
                427,
                474,
                393,
                145,
                163,
                207,
            ],
            "num_samples": [2, 2, 2, 1, 2, 1, 2, 1, 2, 2, 1, 2, 1, 2, 1, 2, 2, 2, 1],
        }
    )
    assert_modes_agree(data, df, in_hypothesis=False)


@pytest.mark.parametrize("offset_s", [0.002, 0.006, 0.0105])
def test_a_request_refused_on_arrival_during_the_last_step_does_not_end_the_run_early(
    offset_s: float,
) -> None:
    """The last request to end (refused at once: 3 samples on a 2-sequence batch)
    arrives inside the final step of the last running one: the run ends when that step
    does, not at the refusal (found by review: the end took the last *reported* finish)."""
    data = _known_case({"max_num_seqs": 2}, "paged", 20_000)
    data["metrics"] = {"sample_interval_s": 1000.0}
    exact = run_mode(data, request_frame([0.01, 5.0], [100, 50], [40, 5], [1, 3]), "exact")
    last_finish_s = float(exact.requests["finish_s"].iloc[0])
    df = request_frame([0.01, last_finish_s - offset_s], [100, 50], [40, 5], [1, 3])
    assert_modes_agree(data, df, in_hypothesis=False)


def test_a_failure_sample_does_not_queue_a_zero_backoff_retry_mid_step() -> None:
    """With ``retry_backoff_s: 0`` a refused request's retry is due at once; a failure
    sample taken inside that same step must not queue it (found by review)."""
    data = _known_case(
        {
            "on_admission_failure": "reject",
            "retry_attempts": 3,
            "retry_backoff_s": 0.0,
            "head_of_line": False,
        },
        "best_fit",
        3_000,
    )
    data["metrics"] = {"sample_interval_s": 0.001}
    df = request_frame([0.01, 0.2, 0.2005], [2000, 2000, 2000], [300, 5, 5], [1, 1, 1])
    assert_modes_agree(data, df, in_hypothesis=False)


@pytest.mark.parametrize("exact", [True, False])
def test_a_submitted_request_queues_behind_fed_requests_already_arrived(exact: bool) -> None:
    """A router's ``submit`` at t queues after fed requests that arrived before t, in
    both modes (found by review: fast mode let it jump the queue)."""
    env = simpy.Environment()
    admitted: dict[int, float] = {}

    class Hooks(ReplicaOutlet):
        def on_done(self, replica: Replica, group: Group) -> None:
            admitted[group.request_id] = round(group.admit_s, 6)

    spec = PoolSpec(capacity_tokens=100_000, max_seq_tokens=4096)
    replica = Replica(
        env,
        0,
        SchedulerConfig(max_num_seqs=1, max_seq_tokens=4096),
        lambda: PagedAllocator(spec),
        ConstantLatency(0.01),
        outlet=Hooks(),
        exact=exact,
    )
    replica.feed([Group(0, 0.0, 10, 200), Group(1, 0.503, 10, 300)])

    def router() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(0.505)
        replica.submit(Group(2, 0.505, 10, 300))

    env.process(router())
    env.run(until=10)
    assert admitted[1] < admitted[2]


@given(case=cases(), grid_s=st.sampled_from([0.5, 1.0]), interval=st.sampled_from([1, 2, 5]))
@SETTINGS
def test_full_outputs_match_when_arrivals_fall_on_sample_times(
    case: tuple[dict[str, Any], pd.DataFrame], grid_s: float, interval: int
) -> None:
    """Arrivals (and client retries) on a grid that periodic samples also land on,
    starting at t = 0 as real traces do: at an instant where both happen, requests are
    queued first, then the sample is taken, then the replica acts — in both modes
    (found by the acceptance audit: fast mode admitted a t = 0 arrival before the t = 0
    sample)."""
    data, df = case
    df = df.copy()
    df["arrival_s"] = np.sort(np.round(df["arrival_s"].to_numpy() / grid_s) * grid_s)
    df.loc[0, "arrival_s"] = 0.0
    data["metrics"] = {"sample_interval_s": float(interval)}
    sched = data["scheduler"]
    if "retry_backoff_s" in sched:
        sched["retry_backoff_s"] = grid_s
    assert_modes_agree(data, df)


def test_an_arrival_at_t0_is_queued_not_admitted_in_the_t0_sample() -> None:
    data = _known_case({}, "paged", 10_000)
    data["metrics"] = {"sample_interval_s": 5.0}
    for arrivals in ([0.0, 1.0], [0.5, 5.0]):
        df = request_frame(arrivals, [100, 100], [10, 10], [1, 1])
        assert_modes_agree(data, df, in_hypothesis=False)
        first = run_mode(data, df, "fast").timeseries.iloc[0]
        assert first["time_s"] == 0.0
        assert first["used_tokens"] == 0
