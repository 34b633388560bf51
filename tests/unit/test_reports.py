"""reports: the figures carry the traces their data calls for, downsampling keeps its
bounds (and the spikes), text from a scenario is escaped, the latency definitions are the
summary's, the answer panel's numbers are the run's, and ``fragsim report`` writes one
file or says why not. (Aggregation: ``test_report_aggregate.py``; size bounds and
determinism at fleet scale: ``test_report_bounds.py``.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs
from support.fleet import synthetic_fleet_data
from support.runfolder import edited
from support.scenarios import request_frame, scenario_data
from typer.testing import CliRunner

import reports
from reports.aggregate import up_samples, uptime_trend
from reports.answer import alert_rows, verdict_rows
from reports.common import ReportOptions
from reports.downsample import (
    MAX_MARKERS,
    bucket_means,
    cdf_points,
    minmax_indices,
    stride_indices,
)
from reports.html import MAX_FIGURE_VALUES, figure_values
from reports.usage import latency_samples
from sim.cli import app
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload
from sim.telemetry.alerts import evaluate_alerts

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
            want = getattr(getattr(single.summary.latency_s, key), f"p{q}")
            assert np.percentile(values, q) == pytest.approx(want)


def _levels(fig: object) -> list[float]:
    return sorted(float(shape.y0) for shape in fig.layout.shapes)  # type: ignore[attr-defined]


def test_single_replica_figures(single: RunResult) -> None:
    memory = reports.replica_memory(single)
    names = [t.name for t in memory.data]
    assert names[:3] == ["free memory", "largest free extent", "largest / free"]
    fails = single.events[single.events["kind"].isin(["admission_failure", "growth_failure"])]
    by_cause = fails["cause"].value_counts()
    assert len(fails) > 0
    for cause, n in by_cause.items():
        assert f"{cause} failures ({n:,})" in names
    assert _levels(memory) == [0.5, 0.6, 25.0]  # the ratio thresholds, 25 % free
    waste = reports.waste_breakdown(single)
    assert len(waste.data) == 5 and {t.stackgroup for t in waste.data} == {"waste"}
    stacked = np.sum([np.asarray(t.y, dtype=float) for t in waste.data], axis=0)
    assert np.allclose(stacked, 100.0)
    corr = single.summary.memory.node_uptime_vs_fragmentation_correlation
    trend = uptime_trend(up_samples(single.timeseries))
    assert corr.spearman_rho is not None and trend.samples == corr.samples
    assert trend.rho == pytest.approx(corr.spearman_rho)  # one statistic, the summary's
    uptime = reports.ratio_vs_uptime(single)
    assert "Spearman ρ" in uptime.layout.title.text or "no correlation" in uptime.layout.title.text
    assert [len(t.x) > 0 for t in reports.latency_cdfs(single).data] == [True] * 3
    over_time = reports.failures_over_time(single)
    assert over_time is not None
    bars = [t for t in over_time.data if t.type == "bar"]
    assert sum(int(np.sum(t.y)) for t in bars) == len(fails)
    assert reports.replicas_over_time(single) is None and reports.cost_over_time(single) is None
    log = evaluate_alerts(single.timeseries, single.events)  # as fragsim alerts show
    fired = log.loc[log["state"] == "firing", "alert"].nunique()
    assert fired and len(reports.alert_timeline(single).data[0].y) == fired


def test_thresholds_come_from_the_summary_when_present(fleet: RunResult) -> None:
    """A fleet run records its thresholds (``fleet.alerts.thresholds``); the seed's
    otherwise."""
    assert _levels(reports.replica_memory(fleet)) == [0.5, 0.6, 25.0]
    thresholds = {"ratio_severe": 0.3, "ratio_alert": 0.45, "high_free_share": 0.4}
    summary = edited(fleet.summary, {"fleet.alerts.thresholds": thresholds})
    fig = reports.replica_memory(RunResult(**{**fleet.__dict__, "summary": summary}))
    assert _levels(fig) == [0.3, 0.45, 40.0]


def test_fleet_figures(fleet: RunResult) -> None:
    assert fleet.fleet is not None and fleet.alerts is not None
    states = reports.replicas_over_time(fleet)
    assert states is not None
    names = [str(t.name) for t in states.data]
    assert "active" in names
    kinds = set(fleet.events["kind"]) & {"restart", "crash", "scale-up", "scale-down"}
    assert kinds and all(any(n.startswith(k) for n in names) for k in kinds)
    bars = {
        n: int(np.abs(t.y).sum())
        for n, t in zip(names, states.data, strict=True)
        if t.type == "bar"
    }
    ups = int((fleet.events["kind"] == "scale-up").sum())
    assert sum(v for n, v in bars.items() if n.startswith("scale-up")) == ups
    cost = reports.cost_over_time(fleet)
    assert cost is not None
    assert [t.name.split(" ")[0] for t in cost.data] == ["total", "avoidable", "total", "avoidable"]
    assert cost.data[1].y[-1] == pytest.approx(fleet.summary.fleet.avoidable_cost_usd)
    timeline = reports.alert_timeline(fleet)
    assert len(timeline.data) == 1 and len(timeline.data[0].y) == fleet.alerts["alert"].nunique()
    restarts = int((fleet.events["kind"] == "restart").sum())
    memory = reports.replica_memory(fleet)
    assert restarts and any(str(t.name).startswith("restarts (") for t in memory.data)
    assert "p10-p90" in " ".join(str(t.name) for t in memory.data)


@pytest.mark.parametrize("top_k", [0, 1, 2])
def test_top_k_worst_replicas_are_drawn(fleet: RunResult, top_k: int) -> None:
    memory = reports.replica_memory(fleet, ReportOptions(top_k=top_k))
    worst = {t.name for t in memory.data if "(worst #" in str(t.name)}
    assert len(worst) == top_k
    with pytest.raises(ValueError, match="top_k"):
        ReportOptions(top_k=-1)


def test_answer_numbers_are_the_runs(fleet: RunResult, single: RunResult) -> None:
    for result in (single, fleet):
        rows = {r.label.strip(): r.value for r in verdict_rows(result)}
        statuses = result.requests["status"].astype(str)
        failed = int(statuses.str.startswith(("rejected-", "failed-")).sum())
        assert rows["failed requests"].startswith(f"{failed:,} of {len(statuses):,}")
        fails = result.summary.failures
        assert rows["allocation failures"].startswith(f"{fails.allocation_failures:,} (")
        names = [a["alert"] for a in alert_rows(result)]
        assert names[: len(result.summary.alerts)] == [a.alert for a in result.summary.alerts]
    f = fleet.summary.fleet
    rows = {r.label.strip(): r.value for r in verdict_rows(fleet)}
    assert rows["avoidable cost"].startswith(f"${f.avoidable_cost_usd:,.2f} of ${f.cost_usd:,.2f}")
    assert fleet.alerts is not None
    firing = fleet.alerts[fleet.alerts["state"] == "firing"]
    for row in alert_rows(fleet):
        mine = firing[firing["alert"] == row["alert"]]
        assert row["firings"] == f"{len(mine):,}"
        assert row["replicas"].startswith(f"fired on {mine['replica'].nunique():,}")


def test_report_title_is_the_scenario(single: RunResult) -> None:
    html = reports.build_report([("folder-name", single)])
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in html
    assert '<p class="verdict">' in html and '<table class="answer">' in html


def test_comparison_and_heatmap(single: RunResult, fleet: RunResult) -> None:
    bars = reports.comparison_bars([single.summary, fleet.summary], ["a", HOSTILE])
    names = {t.name for t in bars.data}  # DELTA_METRICS less those zero or missing in both
    assert "avoidable replica-hours" not in names and "allocation failures" in names
    assert len(bars.data) == 7 and all(len(t.x) == 2 for t in bars.data)
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
    figures = len(reports.run_figures(single)) + len(reports.run_figures(fleet))
    assert html.count("Plotly.newPlot(") == 1 + figures
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
    assert all(len(t.x) <= 2000 for t in memory.data if t.mode == "lines")
    markers = [t for t in memory.data if "failures (" in str(t.name)]
    assert sum(len(t.x) for t in markers) <= MAX_MARKERS
    assert any("shown)" in str(t.name) for t in markers)
    assert len(reports.waste_breakdown(big).data[0].x) <= 2000
    for fig in reports.run_figures(big):
        assert figure_values(fig) <= MAX_FIGURE_VALUES, fig.layout.title.text
    assert len(reports.build_report([("big", big)])) < 8_000_000


def test_report_command(tmp_path: Path, single: RunResult) -> None:
    single.write(tmp_path / "run")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>") and str(out) in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "run"]
    again = CliRunner().invoke(
        app, ["report", str(tmp_path / "run"), "-o", str(out), "--top-k", "0"]
    )
    assert again.exit_code == 0, again.output
    refused = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--top-k", "51"])
    assert refused.exit_code == 2 and "--top-k" in refused.output


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
