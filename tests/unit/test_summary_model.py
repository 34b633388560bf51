"""The typed summary is the one schema of ``summary.json``: a run's summary read back is
the same object and writes the same bytes; a key the run did not write stays unwritten;
a later version's key is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.runfolder import stub_fleet, stub_summary

from sim.results.summary_model import Fleet, Summary
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

FLEET: dict[str, Any] = {
    "name": "typed",
    "seed": 3,
    "workload": {"preset": "chat", "synth": {"num_requests": 30}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}, {"name": "b", "count": 1}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}


def _text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


@pytest.mark.parametrize("fleet", [False, True])
def test_a_run_summary_reads_back_as_the_same_object_and_bytes(tmp_path: Path, fleet: bool) -> None:
    data = FLEET if fleet else {k: v for k, v in FLEET.items() if k != "fleet"}
    scenario = parse_scenario(data, source="typed")
    result = run(scenario, load_workload(scenario))
    result.write(tmp_path / "run")
    text = (tmp_path / "run" / "summary.json").read_text()
    back = Summary.from_json_dict(json.loads(text))
    assert _text(back.to_json_dict()) == text
    assert back.digests is not None and result.summary.digests is None
    assert back.model_copy(update={"digests": None}) == result.summary
    assert (back.fleet is not None) == fleet
    assert "fleet" not in json.loads(text) or fleet


def test_unset_keys_stay_unwritten_and_later_keys_are_kept() -> None:
    data = stub_summary(fleet=stub_fleet([{"name": "a", "count": 1}]), later={"x": 1})
    summary = Summary.from_json_dict(data)
    assert summary.to_json_dict() == data  # no pool field, no fleet.alerts, no digests added
    assert summary.requests.beyond_duration is None
    assert isinstance(summary.fleet, Fleet) and summary.fleet.alerts is None


def test_an_integer_stays_an_integer_where_a_run_summed_nothing() -> None:
    fleet = stub_fleet([{"name": "a", "count": 1}], avoidable_cost_usd=0, cost_usd=1.5)
    written = Summary.from_json_dict(stub_summary(fleet=fleet)).to_json_dict()["fleet"]
    assert (written["avoidable_cost_usd"], written["cost_usd"]) == (0, 1.5)
    assert isinstance(written["avoidable_cost_usd"], int)


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        ({"throughput": {"requests_per_s": 0.0}}, "throughput.output_tokens_per_s"),
        ({"span_s": "1"}, "span_s"),
        ({"seed": 1.5}, "seed"),
        ({"alerts": [{"alert": "a", "severity": "high"}]}, "alerts.0.condition"),
    ],
)
def test_a_field_a_run_writes_is_required_and_typed(edit: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Summary.from_json_dict(stub_summary(**edit))
    loc = ".".join(str(p) for p in caught.value.errors()[0]["loc"])
    assert loc == where


def test_the_summary_is_frozen() -> None:
    summary = Summary.from_json_dict(stub_summary())
    with pytest.raises(ValidationError):
        summary.scenario = "other"  # type: ignore[misc]
