"""Which kinds of KV retention make fragmentation depend on uptime (issue 11).

The seed's example workload (bimodal chat / document ingestion, best-fit contiguous
allocator, a naive server that refuses at once) over one or two days instead of six.
Without retention every allocation lives seconds to minutes: the pool mixes within
minutes and the fragmentation ratio (largest free extent / free) does not depend on
uptime. Retention whose lifetimes are bounded or light-tailed (a session TTL, a
heavy tail with a finite mean) mixes too, only more slowly. Allocations that outlive
any window -- a leak, a heavy tail with an infinite mean -- accumulate: the ratio falls
as the node stays up, and a restart (a fresh allocator) resets it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pandas as pd
import pytest
import scipy.stats as sps

from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario

pytestmark = pytest.mark.slow  # two-day runs: about 15 s in all

DAY_S = 86_400.0
NONE: dict[str, Any] = {"kind": "none"}
LEAK: dict[str, Any] = {"kind": "leak", "fraction": 0.001}
"""One request in a thousand never frees its KV."""
SESSION_TTL: dict[str, Any] = {"kind": "session_ttl", "ttl_s": 300.0}
HEAVY_FINITE: dict[str, Any] = {
    "kind": "heavy_tail",
    "fraction": 0.1,
    "alpha": 1.5,
    "scale_s": 60.0,
}
HEAVY_INFINITE: dict[str, Any] = {
    "kind": "heavy_tail",
    "fraction": 0.1,
    "alpha": 0.8,
    "scale_s": 60.0,
}


def scenario(
    retention: dict[str, Any], days: float, restart_every_s: float | None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "retention-uptime",
        "seed": 1,
        "workload": {
            "preset": "bimodal",
            "synth": {
                "duration_s": days * DAY_S,
                "arrival": {"kind": "poisson", "rate_per_s": 0.1},
            },
        },
        "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
        "allocator": {"kind": "best_fit"},
        "scheduler": {
            "on_admission_failure": "reject",
            "preemption": "fail",
            "retry_attempts": 1,
            "retry_backoff_s": 1.0,
        },
        "metrics": {"sample_interval_s": 300.0},
        "retention": retention,
    }
    if restart_every_s is not None:
        data["restart"] = {"every_s": restart_every_s, "mode": "drain", "downtime_s": 120.0}
    return data


@cache
def _run(kind: str, days: float, restart_every_s: float | None) -> RunResult:
    retention = {
        "none": NONE,
        "leak": LEAK,
        "session_ttl": SESSION_TTL,
        "heavy_finite": HEAVY_FINITE,
        "heavy_infinite": HEAVY_INFINITE,
    }[kind]
    sc = parse_scenario(scenario(retention, days, restart_every_s))
    if kind != "session_ttl":
        return run(sc)
    from sim.scenario.workload import load_workload

    requests = load_workload(sc).copy()
    # Four-turn sessions of consecutive requests (the preset has no session ids).
    requests["session_id"] = pd.array(requests["request_id"].to_numpy() // 4, dtype="Int64")
    return run(sc, requests)


def periodic(result: RunResult) -> pd.DataFrame:
    ts = result.timeseries
    p = ts[(ts.trigger == "periodic") & ts.up]
    return p.dropna(subset=["largest_contiguous_free_block_ratio"])


def uptime_rho(result: RunResult) -> float:
    p = periodic(result)
    return float(sps.spearmanr(p.uptime_s, p.largest_contiguous_free_block_ratio)[0])


def ratio_at_uptime(result: RunResult, lo_s: float, hi_s: float) -> float:
    p = periodic(result)
    window = p[(p.uptime_s >= lo_s) & (p.uptime_s < hi_s)]
    assert len(window) >= 6, f"too few samples with uptime in [{lo_s}, {hi_s})"
    return float(window.largest_contiguous_free_block_ratio.mean())


def used_share_at_uptime(result: RunResult, lo_s: float, hi_s: float) -> float:
    p = periodic(result)
    window = p[(p.uptime_s >= lo_s) & (p.uptime_s < hi_s)]
    return float((1.0 - window.free_tokens / window.capacity_tokens).mean())


def restart_reset(result: RunResult) -> tuple[float, float]:
    """Mean ratio in the first hour after a (re)start and in the two hours before the
    next restart (restarts every 12 hours)."""
    assert int((result.events.kind == "restart").sum()) >= 3
    return ratio_at_uptime(result, 0.0, 3600), ratio_at_uptime(result, 10 * 3600, DAY_S / 2)


@pytest.mark.parametrize("kind", ["none", "session_ttl", "heavy_finite"])
def test_retention_shorter_than_the_uptime_makes_no_trend(kind: str) -> None:
    """No retention, a 5-minute session TTL, or a heavy tail with a finite mean: the
    pool mixes within the hour, so the ratio does not depend on uptime and a restart
    changes nothing (the retained kinds only lower its level)."""
    result = _run(kind, 1.0, None)
    assert abs(uptime_rho(result)) < 0.1
    early = ratio_at_uptime(result, 0.0, 6 * 3600)
    late = ratio_at_uptime(result, 18 * 3600, DAY_S)
    assert abs(early - late) < 0.05
    after, before = restart_reset(_run(kind, 2.0, DAY_S / 2))
    assert abs(after - before) < 0.05
    if kind != "none":
        baseline = periodic(_run("none", 1.0, None)).largest_contiguous_free_block_ratio.mean()
        assert periodic(result).largest_contiguous_free_block_ratio.mean() < baseline - 0.05


def test_a_leak_fragments_with_uptime_and_a_restart_resets_it() -> None:
    """One request in a thousand never frees: the leaked buffers pile up at scattered
    addresses, the ratio falls and the used share rises as the node stays up; right
    after a restart the ratio is back near a fresh node's."""
    result = _run("leak", 1.0, None)
    assert uptime_rho(result) < -0.2
    assert ratio_at_uptime(result, 18 * 3600, DAY_S) < ratio_at_uptime(result, 0.0, 6 * 3600) - 0.08
    assert used_share_at_uptime(result, 18 * 3600, DAY_S) > used_share_at_uptime(
        result, 0.0, 6 * 3600
    )
    restarted = _run("leak", 2.0, DAY_S / 2)
    assert uptime_rho(restarted) < -0.3
    after, before = restart_reset(restarted)
    assert after > 0.9
    assert before < after - 0.08


def test_an_infinite_mean_heavy_tail_fragments_over_hours_and_a_restart_resets_it() -> None:
    """A tenth of requests kept for Pareto(0.8) times (infinite mean): the ratio falls
    with uptime and a restart lifts it, but not to a fresh node's level -- the newly
    kept buffers fragment the pool again within the first hour."""
    restarted = _run("heavy_infinite", 2.0, DAY_S / 2)
    assert uptime_rho(restarted) < -0.15
    after, before = restart_reset(restarted)
    assert before < after - 0.08
