"""reports: the figures carry the traces their data calls for, downsampling keeps its
bounds (and the spikes), text from a scenario is escaped, the latency definitions are the
summary's, and ``fragsim report`` writes one file or says why not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs
from support.fleet import synthetic_fleet_data
from support.scenarios import request_frame, scenario_data
from typer.testing import CliRunner

import reports
from reports.downsample import (
    MAX_MARKERS,
    bucket_means,
    cdf_points,
    minmax_indices,
    stride_indices,
)
from reports.memory import latency_samples
from sim.cli import app
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

HOSTILE = "<script>alert(1)</script>"


def single_run(name: str = "single") -> RunResult:
    """One best-fit replica of 6,000 slots under mixed lengths: failures at high free."""
    rng = np.random.default_rng(3)
    n = 300
    arrivals = np.sort(rng.uniform(0, 120, n))
    data = scenario_data(
        "best_fit", 6000, name=name, sample_interval_s=2.0, scheduler={"preemption": "fail"}
    )
    df = request_frame(arrivals, rng.integers(50, 1500, n), rng.integers(5, 300, n))
    return run(parse_scenario(data), df)


def fleet_run(name: str = "fleet") -> RunResult:
    """Three replicas with crashes, scheduled restarts and a queue autoscaler."""
    data = synthetic_fleet_data(
        duration_s=600.0,
        router={"kind": "fragmentation_aware"},
        faults={"mtbf_s": 600.0, "mttr": {"mean_s": 60.0, "sd_s": 10.0}},
        restart={"kind": "scheduled", "every_s": 200.0, "drain": "redirect"},
        autoscaler={"kind": "queue", "queue_threshold": 2},
    )
    data["name"] = name
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


@pytest.fixture(scope="module")
def single() -> RunResult:
    return single_run(HOSTILE)


@pytest.fixture(scope="module")
def fleet() -> RunResult:
    return fleet_run(HOSTILE)


def test_minmax_keeps_the_bound_and_the_spikes() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=100_000)
    y[12_345], y[77_777] = 50.0, -50.0
    y[500:600] = np.nan
    keep = minmax_indices(y, 1000)
    assert len(keep) <= 1000 and np.all(np.diff(keep) > 0)
    assert {12_345, 77_777} <= set(keep.tolist())
    assert len(minmax_indices(y[:800], 1000)) == 800


def test_bucket_means_add_up_and_cdf_and_stride_are_bounded() -> None:
    rng = np.random.default_rng(1)
    shares = rng.dirichlet(np.ones(4), size=50_000)
    means = bucket_means(shares, 700)
    assert means.shape == (700, 4) and np.allclose(means.sum(axis=1), 1.0)
    x, p = cdf_points(rng.exponential(size=1_000_000), 1000)
    assert len(x) == len(p) == 1000 and np.all(np.diff(x) >= 0) and p[-1] == 1.0
    assert len(stride_indices(123_456, MAX_MARKERS)) <= MAX_MARKERS


def test_latency_samples_match_the_summary(single: RunResult) -> None:
    samples = latency_samples(single.requests)
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("end to end", "e2e")):
        values = samples[name][~np.isnan(samples[name])]
        for q in (50, 90, 99):
            assert np.percentile(values, q) == pytest.approx(
                single.summary["latency_s"][key][f"p{q}"]
            )


def test_single_replica_figures(single: RunResult) -> None:
    memory = reports.replica_memory(single)
    names = [t.name for t in memory.data]
    assert names[:3] == ["replica 0: free", "replica 0: largest extent", "replica 0: ratio"]
    fails = single.events["kind"].isin(["admission_failure", "growth_failure"]).sum()
    assert fails > 0 and names[3] == f"allocation failures ({fails:,})"
    levels = sorted(shape.y0 for shape in memory.layout.shapes)
    assert levels == [0.5, 0.6]
    waste = reports.waste_breakdown(single)
    assert len(waste.data) == 4 and {t.stackgroup for t in waste.data} == {"waste"}
    assert len(reports.uptime_scatter(single).data) == 1
    assert [len(t.x) > 0 for t in reports.latency_cdfs(single).data] == [True] * 3
    assert reports.replicas_over_time(single) is None and reports.cost_over_time(single) is None
    assert len(reports.alert_timeline(single).data) == len(single.summary["alerts"])


def test_thresholds_come_from_the_summary_when_present(single: RunResult) -> None:
    summary = {**single.summary, "thresholds": {"ratio_severe": 0.3, "ratio_alert": 0.45}}
    fig = reports.replica_memory(RunResult(**{**single.__dict__, "summary": summary}))
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [0.3, 0.45]


def test_fleet_figures(fleet: RunResult) -> None:
    assert fleet.fleet is not None and fleet.alerts is not None
    states = reports.replicas_over_time(fleet)
    assert states is not None
    names = [t.name for t in states.data]
    assert "active" in names
    kinds = set(fleet.events["kind"]) & {"restart", "crash", "scale-up", "scale-down"}
    assert kinds and all(any(n.startswith(k + " (") for n in names) for k in kinds)
    cost = reports.cost_over_time(fleet)
    assert cost is not None and [t.name for t in cost.data] == ["cost (USD)", "replica-hours"]
    timeline = reports.alert_timeline(fleet)
    assert len(timeline.data) == fleet.alerts["severity"].nunique()
    memory = reports.replica_memory(fleet)
    assert sum(str(t.name).endswith(": free") for t in memory.data) == 3


def test_comparison_and_heatmap(single: RunResult, fleet: RunResult) -> None:
    bars = reports.comparison_bars([single.summary, fleet.summary], ["a", HOSTILE])
    assert len(bars.data) == 8 and all(len(t.x) == 2 for t in bars.data)  # DELTA_METRICS
    assert all(HOSTILE not in str(t.y) for t in bars.data)
    sweep = pd.DataFrame(
        {
            "replicas": [2, 2, 4, 4, 2],
            "allocator": ["paged", "best_fit", "paged", "best_fit", "paged"],
            "cost_usd": [1.0, 2.0, 3.0, 4.0, 3.0],
        }
    )
    heat = reports.sweep_heatmap(sweep, "replicas", "allocator", "cost_usd")
    assert np.asarray(heat.data[0].z).tolist() == [[2.0, 4.0], [2.0, 3.0]]
    with pytest.raises(KeyError):
        reports.sweep_heatmap(sweep, "replicas", "nope", "cost_usd")


def test_report_escapes_scenario_text(single: RunResult, fleet: RunResult) -> None:
    html = reports.build_report([("one", single), (HOSTILE, fleet)])
    assert HOSTILE not in html and "alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count("Plotly.newPlot(") == 1 + len(reports.run_figures(single)) + len(
        reports.run_figures(fleet)
    )
    assert html.count(get_plotlyjs()) == 1  # plotly.js, once, in the head


def test_report_is_bounded_for_a_large_run(single: RunResult) -> None:
    """200,000 timeseries rows and 50,000 failures draw at most the budgets' points."""
    n = 200_000
    ts = pd.concat([single.timeseries] * (n // len(single.timeseries) + 1), ignore_index=True)
    ts = ts.iloc[:n].copy()
    ts["time_s"] = np.arange(n, dtype=float)
    ts["trigger"] = "periodic"
    ev = single.events[single.events["kind"] == "growth_failure"]
    ev = pd.concat([ev] * (50_000 // len(ev) + 1), ignore_index=True).iloc[:50_000]
    big = RunResult(single.requests, ts, ev, single.summary)
    memory = reports.replica_memory(big)
    assert all(len(t.x) <= 2000 for t in memory.data[:3])
    assert len(memory.data[3].x) <= MAX_MARKERS and "of 50,000 shown" in memory.data[3].name
    assert len(reports.waste_breakdown(big).data[0].x) <= 2000
    assert sum(len(t.x) for t in reports.uptime_scatter(big).data) <= 5000
    assert len(reports.build_report([("big", big)])) < 8_000_000


def test_report_command(tmp_path: Path, single: RunResult) -> None:
    single.write(tmp_path / "run")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>") and str(out) in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "run"]


@pytest.mark.parametrize("what", ["missing", "file", "empty"])
def test_report_command_refuses_what_is_not_a_run(tmp_path: Path, what: str) -> None:
    target = tmp_path / "target"
    if what == "file":
        target.write_text("x")
    elif what == "empty":
        target.mkdir()
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(target), "-o", str(out)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "target" in lines[0]
    assert not out.exists()
