"""Capacity planning: SLOs parsed strictly, the replica search's answer and its number
of evaluations, and a fleet whose capacity is computable by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim.scenario.schema import ScenarioError
from sim.sweep.execute import Executor
from sim.sweep.plan import as_fleet, plan, replica_search
from sim.sweep.slo import SloError, parse_slo
from sim.sweep.spec import load_base

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sweeps"


@pytest.mark.parametrize(
    ("text", "metric", "op", "threshold"),
    [
        ("ttft_p99<=2s", "ttft_p99_s", "<=", 2.0),
        (" e2e_p99 < 1500ms ", "e2e_p99_s", "<", 1.5),
        ("tpot_p99<=0.05", "tpot_p99_s", "<=", 0.05),
        ("failure_rate<=1e-3", "failure_rate", "<=", 0.001),
        ("at_high_free_failures<=0", "failures_at_high_free", "<=", 0.0),
        ("output_tokens_per_s>=500", "output_tokens_per_s", ">=", 500.0),
    ],
)
def test_slos_parse(text: str, metric: str, op: str, threshold: float) -> None:
    slo = parse_slo(text)
    assert (slo.metric, slo.op, slo.threshold) == (metric, op, pytest.approx(threshold))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p99=2s", "unknown operator '='"),
        ("ttft_p99<=2h", "unknown unit 'h'; ttft_p50, "),
        ("ttft_p99<=5sec", "unknown unit 'sec'; ttft_p50, "),
        ("ttft_p99<=-1s", "the value '-1s' is not a number >= 0"),
        ("failure_rate<=0.1s", "unknown unit 's'; "),
        ("ttft_p98<=2s", "unknown metric 'ttft_p98'; ttft_p50, "),
        ("ttft_p99", "expected METRIC OP VALUE"),
    ],
)
def test_bad_slos_say_why(text: str, message: str) -> None:
    with pytest.raises(SloError, match=message):
        parse_slo(text)


def test_an_slo_is_never_met_by_a_missing_value() -> None:
    slo = parse_slo("ttft_p99<=2s")
    assert slo.met_by(2.0) and not slo.met_by(2.1) and not slo.met_by(math.nan)


def drive(lo: int, hi: int, answer: int) -> tuple[int | None, list[int]]:
    """Run the search against "meets iff n >= answer"; (result, counts evaluated)."""
    search = replica_search(lo, hi)
    asked = [next(search)]
    try:
        while True:
            asked.append(search.send(asked[-1] >= answer))
    except StopIteration as stop:
        return stop.value, asked


@pytest.mark.parametrize("lo", [1, 3])
@pytest.mark.parametrize("hi", [1, 7, 64, 4096])
def test_the_search_finds_the_least_count_in_few_steps(lo: int, hi: int) -> None:
    for answer in range(lo, min(hi, 200) + 2):
        found, asked = drive(lo, hi, answer)
        assert found == (answer if answer <= hi else None)
        assert len(asked) == len(set(asked))  # no count twice
        assert len(asked) <= 2 * math.ceil(math.log2(max(answer, 2))) + 2


def test_a_single_replica_becomes_a_one_pool_fleet() -> None:
    base = {"name": "x", "initial_uptime_s": 60, "allocator": {"kind": "paged"}}
    fleet = as_fleet(base, "s")
    assert fleet["fleet"] == {"pools": [{"count": 1, "initial_uptime_s": 60}]}
    assert "initial_uptime_s" not in fleet
    with pytest.raises(ScenarioError, match="field restart"):
        as_fleet(base | {"restart": {"every_s": 10}}, "s")


@pytest.mark.parametrize(("rate_per_s", "expected"), [(3.5, 4), (6.2, 7)])
def test_plan_finds_the_hand_computed_count(
    tmp_path: Path, rate_per_s: float, expected: int
) -> None:
    """A step takes 0.1 s, a replica runs one request at a time, a request is one prefill
    step and 9 decode steps: 1 req/s per replica. Arrivals (near-even) at RATE req/s need
    ceil(RATE) replicas; with fewer, the queue and the TTFT grow without bound."""
    base = load_base("plan-constant.yaml", EXAMPLES, "test")
    base["workload"]["synth"]["duration_s"] = 60
    base["workload"]["synth"]["arrival"]["rate_per_s"] = rate_per_s
    vary = [("allocator.kind", ["paged", "best_fit"])]
    with Executor(tmp_path, workers=1) as ex:
        result = plan(base, [parse_slo("ttft_p99<=2s")], vary, ex, lo=1, hi=64)
    assert list(result.plan["replicas"]) == [expected, expected]
    assert all(result.plan["evaluated"] <= 2 * math.log2(expected) + 2)
    assert list(result.plan["cost_vs_cheapest"]) == pytest.approx([0.0, 0.0], abs=0.05)
    met = result.points[result.points["met"]]
    assert met.groupby("allocator.kind")["replicas"].min().tolist() == [expected] * 2
    with Executor(tmp_path, workers=1) as ex:  # the same plan again runs nothing
        again = plan(base, [parse_slo("ttft_p99<=2s")], vary, ex, lo=1, hi=64)
    assert all(o.skipped for o in again.outcomes)


def test_plan_says_when_no_count_in_range_meets_the_slos(tmp_path: Path) -> None:
    base = load_base("plan-constant.yaml", EXAMPLES, "test")
    base["workload"]["synth"]["duration_s"] = 30
    with Executor(tmp_path, workers=1) as ex:
        result = plan(base, [parse_slo("ttft_p99<=2s")], [], ex, lo=1, hi=2)
    assert result.plan["replicas"].isna().all()
    assert list(result.points["replicas"]) == [1, 2]
