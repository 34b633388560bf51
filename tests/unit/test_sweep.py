"""Sweeps: overrides by dotted path, sweep files expanded and validated before anything
runs, stable task ids, seeds per replication, and the summary's 95 % intervals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.scenario.builtin import builtin_names
from sim.scenario.schema import ScenarioError, load_scenario, parse_scenario
from sim.sweep.execute import Executor
from sim.sweep.overrides import OverrideError, apply_overrides, build_scenario, set_path
from sim.sweep.run import run_sweep
from sim.sweep.spec import expand, grid_points, load_base, load_sweep, scenario_key
from sim.sweep.summary import METRICS, ci95

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sweeps"


def small_base() -> dict:
    """The hand-checkable fleet of examples/sweeps/plan-constant.yaml, 2 replicas, 30 s."""
    base = load_base("plan-constant.yaml", EXAMPLES, "test")
    base["fleet"] = {"pools": [{"count": 2}]}
    base["workload"]["synth"]["duration_s"] = 30
    return base


def test_set_path_writes_nested_fields_and_list_items() -> None:
    data = {"fleet": {"pools": [{"count": 1}]}, "allocator": {"kind": "best_fit"}}
    set_path(data, "fleet.pools.0.count", 8)
    set_path(data, "fleet.router", {"kind": "round_robin"})
    set_path(data, "scheduler.max_num_seqs", 4)  # an absent block is created
    assert data["fleet"] == {"pools": [{"count": 8}], "router": {"kind": "round_robin"}}
    assert data["scheduler"] == {"max_num_seqs": 4}


def test_a_new_kind_replaces_the_block() -> None:
    data = {"allocator": {"kind": "best_fit", "growth_factor": 2.0}}
    assert apply_overrides(data, {"allocator.kind": "paged"}) == {"allocator": {"kind": "paged"}}
    same = apply_overrides(data, {"allocator.kind": "best_fit"})
    assert same == data  # the same kind keeps its fields
    assert data["allocator"]["growth_factor"] == 2.0  # the base is not touched


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("fleet.pools.3.count", "a list of 1; expected an index 0..0"),
        ("fleet.pools.x", "expected an index"),
        ("fleet.pools.0.count.x", "not a mapping or list"),
        ("a..b", "not a dotted field path"),
    ],
)
def test_bad_paths_say_why(path: str, message: str) -> None:
    with pytest.raises(OverrideError, match=message):
        set_path({"fleet": {"pools": [{"count": 1}]}}, path, 1)


def test_an_invalid_value_names_the_file_the_override_and_the_field() -> None:
    base = small_base()
    with pytest.raises(ScenarioError) as e:
        build_scenario(base, {"scheduler.max_num_seqs": 0, "seed": 3}, "s.yaml")
    (line,) = str(e.value).splitlines()
    assert line.startswith(
        "s.yaml: override scheduler.max_num_seqs=0: field scheduler.max_num_seqs"
    )
    with pytest.raises(ScenarioError, match=r"override allocator\.kind=nope: field allocator"):
        build_scenario(base, {"allocator.kind": "nope"}, "s.yaml")


def test_an_allocators_own_fields_survive_the_base_and_the_key() -> None:
    """A base's ``growth_factor`` (a field of the kind's class, not of the base allocator
    config) is kept in the base mapping and tells the scenarios' keys apart."""
    data = small_base() | {"allocator": {"kind": "best_fit", "growth_factor": 1.5}}
    base = load_base(data, Path.cwd(), "test")
    assert base["allocator"] == {"kind": "best_fit", "growth_factor": 1.5}
    scenario = build_scenario(base, {}, "test")
    assert scenario.allocator.model_dump() == parse_allocator(data["allocator"]).model_dump()
    other = build_scenario(base, {"allocator.growth_factor": 2.0}, "test")
    assert scenario_key(scenario) != scenario_key(other)


@pytest.mark.parametrize("kind", sorted(ALLOCATORS))
def test_a_scenario_dump_holds_every_field_of_its_allocator(kind: str) -> None:
    scenario = build_scenario(small_base() | {"allocator": {"kind": kind}}, {}, "test")
    dumped = scenario.model_dump(mode="json")["allocator"]
    assert set(dumped) == set(ALLOCATORS[kind].model_fields)
    assert parse_scenario(scenario.model_dump(mode="json")) == scenario


@pytest.mark.parametrize("name", builtin_names())
def test_a_base_scenario_round_trips(name: str) -> None:
    """The base mapping (what the file wrote) builds the scenario the file does."""
    assert build_scenario(load_base(name, Path.cwd(), name), {}, name) == load_scenario(name)


def test_grid_and_list_expand_to_points_and_replications() -> None:
    points = grid_points({"a": [1, 2], "b": ["x", "y"]}, [{"c": 0}, {"c": 1}])
    assert len(points) == 8
    assert points[0] == {"c": 0, "a": 1, "b": "x"}
    with pytest.raises(ScenarioError, match="list and grid both set a"):
        grid_points({"a": [1]}, [{"a": 2}])
    sweep = expand(small_base(), [{"scheduler.max_num_seqs": 1}, {"seed": 10}], 3, "s")
    assert [(t.point, t.replication, t.scenario.seed) for t in sweep.tasks] == [
        (0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 0, 10), (1, 1, 11), (1, 2, 12),
    ]  # fmt: skip
    assert len({t.id for t in sweep.tasks}) == 6
    again = expand(small_base(), [{"seed": 10}], 3, "s")  # another grid, same scenarios
    assert [t.id for t in again.tasks] == [t.id for t in sweep.tasks[3:]]
    assert sweep.tasks[0].id.startswith("max_num_seqs-1.r0.")


def test_a_bad_sweep_file_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("base: plan.yaml\ngrid: {scheduler.max_num_seqs: [1, -2]}\n")
    (tmp_path / "plan.yaml").write_text((EXAMPLES / "plan-constant.yaml").read_text())
    with pytest.raises(ScenarioError) as e:
        load_sweep(f)
    assert str(e.value) == (
        f"{f}: override scheduler.max_num_seqs=-2: field scheduler.max_num_seqs: got -2: "
        "input should be greater than or equal to 1"
    )
    f.write_text("base: plan.yaml\ngrids: {}\n")
    with pytest.raises(ScenarioError, match="grids"):
        load_sweep(f)


def test_ci95_is_students_t() -> None:
    values = np.array([1.0, 2.0, 4.0, np.nan])
    mean, low, high = ci95(values)
    v = values[:3]
    half = stats.t.ppf(0.975, 2) * v.std(ddof=1) / np.sqrt(3)
    assert (mean, low, high) == pytest.approx((v.mean(), v.mean() - half, v.mean() + half))
    assert np.isnan(ci95(np.array([3.0]))[1])


def test_a_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A run that raises (here: the trace file is gone when it runs) leaves
    OUT/failed/ID.txt and a failed row; the others finish; a rerun retries it only."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,10\n0.5,10,10\n")
    base = small_base()
    ok_sweep = expand(base, [{}], 2, "s")
    bad = base | {"workload": {"trace": str(trace)}}
    bad_sweep = expand(bad, [{}], 1, "s")
    trace.unlink()
    sweep = type(ok_sweep)("s", [], [*ok_sweep.tasks, replace(bad_sweep.tasks[0], point=1)])
    result = run_sweep(sweep, tmp_path / "out", workers=1)
    assert [o.error is None for o in result.outcomes] == [True, True, False]
    assert (tmp_path / "out" / "failed" / f"{bad_sweep.tasks[0].id}.txt").is_file()
    assert list(result.summary["failed_runs"]) == [0, 1]
    with Executor(tmp_path / "out", workers=1) as ex:
        again = ex.run(sweep.tasks)
    assert [o.skipped for o in again] == [True, True, False]


def test_summary_columns() -> None:
    assert {"output_tokens_per_s", "failure_rate", "cost_usd", "ttft_p99_s"} <= set(METRICS)
