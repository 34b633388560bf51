"""A run report stays bounded and reproducible at fleet scale: a synthesized six-day run
of 637 replica ids (4 up throughout, the rest bought and retired within hours, as the
seed's postmortem), 50,000 requests and 10,000 allocation failures gives figures of at
most ``MAX_FIGURE_VALUES`` values each, a report well under 10 MB with plotly.js once,
and the same bytes twice."""

from __future__ import annotations

import pytest
from plotly.offline import get_plotlyjs
from support.fleet import synthetic_fleet_data
from support.report_runs import synthesize

import reports
from reports.html import MAX_FIGURE_VALUES, figure_values
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

REPORT_BOUND_BYTES = 10_000_000


@pytest.fixture(scope="module")
def churned() -> RunResult:
    scenario = parse_scenario(synthetic_fleet_data(duration_s=300.0))
    template = run(scenario, load_workload(scenario))
    return synthesize(50_000, replicas=637, churn=True, template=template)


def test_a_637_replica_six_day_report_is_bounded_and_reproducible(churned: RunResult) -> None:
    assert churned.timeseries["replica"].nunique() == 637
    figures = reports.run_figures(churned)
    for fig in figures:
        assert figure_values(fig) <= MAX_FIGURE_VALUES, fig.layout.title.text
    memory = figures[0]
    assert len(memory.data) < 40  # bands, not a line per replica
    html = reports.build_report([("churned", churned)])
    assert len(html.encode()) < REPORT_BOUND_BYTES
    assert html.count(get_plotlyjs()) == 1
    assert reports.build_report([("churned", churned)]) == html
