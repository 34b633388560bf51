"""Report panels that would be blank or mislead: a panel with nothing to show is one
line of text, axes fit their data, worst replicas say why they are worst, a single
replica's alerts are drawn where they fired, and the report's first paragraph names the
fix that pays (or the command that finds it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.fleet import synthetic_fleet_data
from support.runfolder import edited
from test_reports import fleet_run, single_run

import reports
from reports.answer import alert_rows, find_out_sentence, fix_sentence
from reports.common import empty_reason, value_axis
from reports.html import compare_beside
from reports.memory import worst_label
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload
from sim.telemetry.alerts import evaluate_alerts


def quiet_fleet_run() -> RunResult:
    """Three paged replicas, no autoscaler, no restarts or faults: a fleet that never
    scales, never fails an allocation and never fragments (ratio 1 throughout)."""
    data = synthetic_fleet_data(duration_s=600.0)
    data["allocator"] = {"kind": "paged"}
    data["hardware"]["kv_capacity_tokens"] = 400_000  # the bimodal mix's 30k prompts fit
    data["name"] = "quiet"
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


@pytest.fixture(scope="module")
def quiet() -> RunResult:
    return quiet_fleet_run()


@pytest.fixture(scope="module")
def single() -> RunResult:
    return single_run()


@pytest.fixture(scope="module")
def fleet() -> RunResult:
    return fleet_run()


def test_a_fleet_that_never_scales_has_no_blank_panels(quiet: RunResult) -> None:
    assert quiet.fleet is not None and quiet.alerts is not None
    assert not quiet.events["kind"].isin(["scale-up", "scale-down", "restart", "crash"]).any()
    states = reports.replicas_over_time(quiet)
    assert states is not None and empty_reason(states) is None
    # one panel, the replicas; its own x axis carries the time (no blank panel below)
    assert [a.text for a in states.layout.annotations] == ["replicas by lifecycle state"]
    assert states.layout.xaxis.title.text == "time (s)"
    assert "no scale events, restarts or crashes" in states.layout.title.text
    assert [t.name for t in states.data] == ["active"]  # states never held are left out
    for make, words in (
        (reports.failures_over_time, "no allocation failures"),
        (reports.alert_timeline, "no alert fired"),
        (reports.ratio_vs_uptime, "the ratio is 1.00 in all"),
    ):
        fig = make(quiet)
        reason = empty_reason(fig)
        assert reason is not None and reason.startswith(words), (make.__name__, reason)
        assert not fig.data
    memory = reports.replica_memory(quiet)
    assert not [t.name for t in memory.data if "worst #" in str(t.name)]  # nothing to look at


def test_an_empty_panel_is_one_line_in_the_report(quiet: RunResult) -> None:
    html = reports.build_report([("quiet", quiet)])
    panels = reports.run_panels(quiet)
    empty = [f for f in panels if empty_reason(f) is not None]
    assert len(empty) == 3
    assert html.count('<p class="empty-panel"') == len(empty)
    assert html.count("Plotly.newPlot(") == len(reports.run_figures(quiet)) == len(panels) - 3
    assert "no alert fired (alerts.parquet)</p>" in html


def test_a_single_replicas_alerts_are_drawn_where_they_fired(single: RunResult) -> None:
    log = evaluate_alerts(single.timeseries, single.events)
    firing = log[log["state"] == "firing"]
    assert len(firing) and float(firing["time_s"].min()) > 0.0  # not all at t = 0
    fig = reports.alert_timeline(single)
    assert empty_reason(fig) is None and len(fig.data) == 1
    heat = fig.data[0]
    assert len(heat.y) == firing["alert"].nunique()
    assert int(np.nansum(np.asarray(heat.customdata, dtype=float))) == len(firing)
    # every window in which a firing started is coloured, at that window's time
    x = np.asarray(heat.x, dtype=float)
    z = np.asarray(heat.z, dtype=float)
    width = float(x[1] - x[0])
    for name, t in zip(firing["alert"], firing["time_s"], strict=True):
        row = next(i for i, label in enumerate(heat.y) if str(label).startswith(name))
        column = min(int(t // width), len(x) - 1)
        assert z[row, column] >= 1
    assert "evaluated as fragsim alerts show" in fig.layout.title.text


def test_worst_replicas_say_why_they_are_worst(fleet: RunResult) -> None:
    memory = reports.replica_memory(fleet)
    worst = [str(t.name) for t in memory.data if "(worst #" in str(t.name)]
    assert worst and not [n for n in worst if " 0 failures" in n]
    assert (
        worst_label("replica 3", 0, 5, 4, 0.4) == "replica 3 (worst #1: 5 failures, 4 at high free)"
    )
    assert (
        worst_label("replica 1", 1, 1, 0, 0.4) == "replica 1 (worst #2: 1 failure, 0 at high free)"
    )
    assert worst_label("replica 2", 2, 0, 0, 0.523) == (
        "replica 2 (worst #3: no failures, ratio down to 0.52)"
    )


def test_value_axis_fits_the_data() -> None:
    assert value_axis(np.array([])) == {} and value_axis(np.array([2.0, 2.0])) == {}
    narrow = value_axis(np.array([0.010, 0.012, 0.018, 0.035]))
    assert narrow["type"] == "linear"
    low, high = narrow["range"]
    assert 0.009 < low < 0.010 and 0.035 < high < 0.037  # not from 0, not past the data
    wide = value_axis(np.array([0.008, 0.01, 0.012, 0.015, 0.019, 0.16]))
    assert wide["type"] == "log"
    low, high = wide["range"]
    assert np.log10(0.008) - 0.1 < low < np.log10(0.008)
    assert np.log10(0.16) < high < np.log10(0.16) + 0.1


def test_latency_axes_fit_the_data(single: RunResult) -> None:
    """TPOT of 8-19 ms with a tail to 160 ms: a log axis from the fastest to the slowest,
    not a linear one from 0 to 0.16 s with every request in its first eighth."""
    n = 400
    arrival = np.arange(n, dtype=float)
    tpot = np.where(np.arange(n) % 100 == 0, 0.16, np.linspace(0.008, 0.019, n))
    generated = np.full(n, 101)
    requests = single.requests.iloc[:0].reindex(range(n))
    requests = requests.assign(
        status="ok",
        arrival_s=arrival,
        first_token_s=arrival + 0.05,
        finish_s=arrival + 0.05 + tpot * (generated - 1),
        generated_tokens=generated,
    )
    fig = reports.latency_cdfs(RunResult(**{**single.__dict__, "requests": requests}))
    assert fig.layout.xaxis2.type == "log"
    low, high = fig.layout.xaxis2.range
    assert 10**low <= 0.008 + 1e-9 and 10**high >= 0.16 - 1e-9 and 10**high < 0.2
    assert fig.layout.xaxis.type != "log"  # TTFT: 50 ms for every request
    nothing = single.requests.iloc[:3].assign(status="rejected-capacity")
    empty = reports.latency_cdfs(RunResult(**{**single.__dict__, "requests": nothing}))
    assert empty_reason(empty) == "no request finished ok: no latency to draw"


def test_first_paragraph_names_the_fix_that_pays(single: RunResult, quiet: RunResult) -> None:
    other = RunResult(**{**quiet.__dict__, "summary": edited(quiet.summary, {"scenario": "other"})})
    html = reports.build_report([("quiet", quiet), ("other", other)])
    first = html.index('<p class="verdict fix">')
    assert first < html.index('<table class="comparison">')
    assert "No fix pays: quiet, the baseline, ranks first, ahead of the alternative." in html
    alone = reports.build_report([("bf", single)])
    paragraph = alone[alone.index('<p class="verdict">') :].split("</p>")[0]
    assert "Which fix pays is not in this run: <code>fragsim compare bf CHANGED.yaml" in paragraph
    seed = RunResult(
        **{**single.__dict__, "summary": edited(single.summary, {"scenario": "seed-postmortem"})}
    )
    sentence = find_out_sentence(seed, "pm")
    assert sentence.startswith("Which fix pays is not in this run: `fragsim compare pm ")
    assert "seed-postmortem-paged" in sentence and "seed-postmortem-runbook" in sentence
    frame = pd.DataFrame(
        {
            "run": ["a", "b", "c"],
            "rank": [3, 1, 2],
            "verdict": ["baseline", "b saves $5.00 (50.0 %) vs a", "c saves $1.00 vs a"],
            "baseline": ["a", "a", "a"],
        }
    )
    assert fix_sentence(frame) == "The fix that pays: b saves $5.00 (50.0 %) vs a (rank 1 of 3)."
    assert fix_sentence(frame.drop(columns="rank")) is None


def test_a_run_in_a_comparison_names_its_fix(tmp_path: Path, quiet: RunResult) -> None:
    folder = tmp_path / "cmp" / "quiet"
    quiet.write(folder)
    pd.DataFrame(
        {
            "run": ["quiet", "paged"],
            "rank": [2, 1],
            "verdict": ["baseline", "paged saves $3.00 (10.0 %) vs quiet"],
            "baseline": ["quiet", "quiet"],
        }
    ).to_csv(tmp_path / "cmp" / "compare.csv", index=False)
    assert compare_beside(folder) is not None
    assert compare_beside(tmp_path / "elsewhere") is None
    out = reports.write_report([folder], tmp_path / "r.html")
    text = out.read_text()
    assert (
        "The fix that pays: paged saves $3.00 (10.0 %) vs quiet (rank 1 of 2), in the "
        "compare.csv beside this run." in text
    )


def test_a_metric_the_same_for_every_run_has_no_bar_panel(quiet: RunResult) -> None:
    same = reports.comparison_bars([quiet.summary, quiet.summary], ["a", "b"])
    assert empty_reason(same) == "no compared metric differs between the runs"
    fewer = edited(quiet.summary, {"latency_s.ttft.p99": 0.5})
    fig = reports.comparison_bars([quiet.summary, fewer], ["a", "b"])
    assert [a.text for a in fig.layout.annotations if a.text and "(s)" in a.text] == [
        "TTFT p99 (s)"
    ]
    assert "the same for every run: " in fig.layout.title.text
    assert "replica-hours" in fig.layout.title.text.split("the same for every run: ")[1]


def test_a_single_replicas_alert_table_counts_what_its_panel_draws(single: RunResult) -> None:
    log = evaluate_alerts(single.timeseries, single.events)
    firing = log[log["state"] == "firing"]
    rows = {r["alert"]: r for r in alert_rows(single)}
    for name, count in firing["alert"].value_counts().items():
        assert rows[str(name)]["firings"] == f"{count:,}"
        assert rows[str(name)]["replicas"].startswith("fired on 1")


def test_bar_panels_leave_room_for_their_tick_labels(quiet: RunResult) -> None:
    worse = edited(
        quiet.summary,
        {
            "latency_s.ttft.p99": 9.0,
            "latency_s.e2e.p99": 99.0,
            "fleet.cost_usd": 1.0,
            "fleet.replica_hours": 1.0,
        },
    )
    fig = reports.comparison_bars([quiet.summary, worse], ["a", "b"])
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    gap = fig.layout.yaxis.domain[0] - fig.layout.yaxis3.domain[1]  # row 1 over row 2
    assert gap * plot_px >= 60


def test_an_alert_the_summary_does_not_list_gets_its_condition(single: RunResult) -> None:
    from sim.results.seed_alerts import BY_NAME, AlertThresholds, condition

    listed = single.summary.alerts
    dropped = listed[0].alert
    summary = edited(single.summary, {"alerts": [a.to_json_dict() for a in listed[1:]]})
    rows = {r["alert"]: r for r in alert_rows(RunResult(**{**single.__dict__, "summary": summary}))}
    assert rows[dropped]["condition"] == condition(BY_NAME[dropped], AlertThresholds())


def test_each_run_of_a_comparison_is_headed_by_its_rank(single: RunResult) -> None:
    changes = {"scenario": "worse", "failures.allocation_failures": 10**6}
    worse = RunResult(**{**single.__dict__, "summary": edited(single.summary, changes)})
    html = reports.build_report([("base", single), ("worse", worse)])
    assert "(baseline, rank 1)" in html and "worse (rank 2)" in html  # the table's ranks
    assert html.count('<span class="run-folder">rank 1 of 2</span>') == 1
    assert html.index("rank 1 of 2</span>") < html.index("rank 2 of 2</span>")


def test_the_uptime_trend_is_given_per_a_unit_the_run_spans(single: RunResult) -> None:
    from reports.uptime import trend_unit

    assert trend_unit(3600.0) == (3600.0, "hour") and trend_unit(6 * 86400.0) == (86400.0, "day")
    fig = reports.ratio_vs_uptime(single)  # two minutes of uptime: per hour, not per day
    assert any("per hour of uptime" in str(t.name) for t in fig.data)
