"""The modelled baseline and one-change counterfactuals: every built-in counterfactual
changes exactly one thing against ``seed-postmortem``, a counterfactual identical to the
baseline saves exactly 0, and one that changes two things is flagged."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.cli.postmortem import DEFAULT_BASE, DEFAULT_COUNTERFACTUALS
from sim.postmortem.baseline import change_text, ranked
from sim.postmortem.log import PostmortemLog, load_postmortem_log
from sim.postmortem.replay import changes_against, run_counterfactual
from sim.results.compare import compare_frame

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "postmortem"


@pytest.fixture(scope="module")
def example() -> PostmortemLog:
    return load_postmortem_log(EXAMPLE)


def test_every_built_in_counterfactual_changes_exactly_one_thing(example: PostmortemLog) -> None:
    data = ROOT / "sim" / "scenario" / "data"
    built_in = sorted(p.stem for p in data.glob(f"{DEFAULT_BASE}-*.yaml"))
    assert built_in == sorted(DEFAULT_COUNTERFACTUALS)
    base = sim.load_scenario(DEFAULT_BASE)
    texts = {}
    for name in built_in:
        changes = changes_against(base, sim.load_scenario(name), example)
        assert len(changes) == 1, (name, changes)
        texts[name] = changes[0].text
    assert texts == {
        "seed-postmortem-frag-restart": "restart policy none → fragmentation",
        "seed-postmortem-frag-routing": "router least_outstanding → fragmentation_aware",
        "seed-postmortem-length-routing": "router least_outstanding → length_pools",
        "seed-postmortem-paged": "allocator best_fit → paged",
        "seed-postmortem-runbook": "autoscaler naive → runbook",
    }


def test_a_parameter_change_names_the_parameter(example: PostmortemLog) -> None:
    cf = sim.load_scenario("seed-postmortem-frag-restart")
    restart = cf.fleet.restart.model_copy(update={"threshold": 0.6})
    tuned = cf.model_copy(update={"fleet": cf.fleet.model_copy(update={"restart": restart})})
    changes = changes_against(cf, tuned, example)
    assert [c.text for c in changes] == ["restart policy threshold 0.5 → 0.6"]


def test_two_changes_at_once_are_flagged(example: PostmortemLog) -> None:
    base = sim.load_scenario(DEFAULT_BASE)
    paged = sim.load_scenario("seed-postmortem-paged")
    runbook = sim.load_scenario("seed-postmortem-runbook")
    both = paged.model_copy(update={"fleet": runbook.fleet})
    changes = changes_against(base, both, example)
    assert [c.field for c in changes] == ["allocator", "fleet.autoscaler"]
    assert change_text(changes) == (
        "2 changes at once (allocator best_fit → paged; autoscaler naive → runbook)"
    )
    assert change_text([]) == "no change"


def test_a_counterfactual_identical_to_the_baseline_saves_exactly_zero(
    example: PostmortemLog,
) -> None:
    base = sim.load_scenario(DEFAULT_BASE)
    same = base.model_copy(update={"name": "same-as-baseline"})
    assert changes_against(base, same, example) == []
    paged = sim.load_scenario("seed-postmortem-paged")
    runs = [run_counterfactual(s, example) for s in (base, same, paged)]
    frame = compare_frame([r.summary for r in runs])
    frame["scenario"] = ["baseline", "same-as-baseline", "paged"]
    frame["role"] = ["baseline", "counterfactual", "counterfactual"]
    frame["change"] = ["", "no change", "allocator best_fit → paged"]
    table = ranked(frame).set_index("run")
    row = table.loc["same-as-baseline"]
    for column in ("cost_saved_usd", "allocation_failures_delta", "replica_hours_delta"):
        assert row[column] == 0.0, column
    for column in ("failed_requests_delta", "ttft_p99_s_delta", "e2e_p99_s_delta"):
        assert row[column] == 0.0, column
    assert row["verdict"] == (
        "no change: costs the same with as many allocation failures vs the baseline"
    )
    pd.testing.assert_frame_equal(runs[0].requests, runs[1].requests)
    # the real change does move something, so the zero above is not a blind spot
    assert table.loc["paged", "allocation_failures_delta"] != 0
    # ranks: the baseline and the counterfactuals, 1..3, each once
    assert sorted(table["rank"]) == [1, 2, 3]
