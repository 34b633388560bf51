"""`fragsim alerts export` / `fragsim alerts show` end to end through the real CLI, over a
real small run: the rules file is valid YAML with the scenario's thresholds; ``show``
lists the alert log that ``evaluate_alerts`` computes from the written frames and writes
it as CSV; every bad input is one ``error:`` line, exit status 2 and no file written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from support.runfolder import seal, stub_fleet, write_stub_tables
from typer.testing import CliRunner, Result

from sim.cli import app
from sim.cli.output import clock_text
from sim.results.runfolder import read_result
from sim.results.seed_alerts import (
    ALERTS,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    AlertThresholds,
)
from sim.telemetry.alerts import ALERT_COLUMNS, evaluate_alerts
from sim.telemetry.diagnosis import diagnose_failures

runner = CliRunner()

# 200 chat requests on a 20,000-token pool, refused at once and failed on growth: both
# failure causes, fragmentation alerts and failed requests within ~40 s of arrivals.
SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 200}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
    "scheduler": {"on_admission_failure": "reject", "preemption": "fail"},
    "metrics": {"sample_interval_s": 5, "ratio_alert": 0.7, "high_free_share": 0.2},
}


def fragsim(*args: str) -> Result:
    return runner.invoke(app, list(args))


def assert_one_error(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    message = " ".join(result.stderr.split())
    assert message.startswith("error: ") and len([x for x in lines if "error:" in x]) == 1
    for word in words:
        assert word in message


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("alerts")
    scenario = folder / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL, sort_keys=False))
    out = folder / "run"
    result = fragsim("run", str(scenario), "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    return out


def test_show_lists_and_writes_the_alert_log_of_the_run(run_dir: Path, tmp_path: Path) -> None:
    scenario = run_dir.parent / "small.yaml"
    csv = tmp_path / "alerts.csv"
    args = ("alerts", "show", str(run_dir), "-s", str(scenario), "--scrape-interval", "5")
    result = fragsim(*args, "-o", str(csv), "--all")
    assert result.exit_code == 0, result.output
    run = read_result(run_dir)
    thresholds = AlertThresholds(high_free_share=0.2, ratio_alert=0.7)
    expected = evaluate_alerts(
        run.timeseries, run.events, scrape_interval_s=5.0, thresholds=thresholds
    )
    assert {FRAGMENTATION_FAILURE.name, SEVERE_FRAGMENTATION.name} <= set(expected["alert"])
    written = pd.read_csv(csv)
    assert tuple(written.columns.drop("time")) == ALERT_COLUMNS
    assert written["time"].iloc[0] == clock_text(written["time_s"].iloc[0])  # 0d 00:00:05
    pd.testing.assert_frame_equal(written.drop(columns="time"), expected, check_dtype=False)
    assert FRAGMENTATION_FAILURE.name in result.stdout
    assert "resolved" in result.stdout
    # one name per alert: the summary, the log and the table use the seed's names only
    names = {spec.name for spec in ALERTS}
    assert {a.alert for a in run.summary.alerts} <= names
    assert "Fragmentation" not in result.stdout  # no CamelCase spelling left
    diagnosis = diagnose_failures(run.requests, run.events, thresholds)
    assert len(diagnosis) and "fragmentation on a capable node" in set(diagnosis["diagnosis"])
    high = int(diagnosis["at_high_free_memory"].sum())
    shown = " ".join(result.stdout.split())
    assert f"failed requests: {len(diagnosis):,} (by diagnosis: " in shown
    assert f"overlapping that split, {high:,} of them failed at > 20% free memory" in shown


def test_export_writes_prometheus_rules_with_the_scenarios_thresholds(
    run_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rules.yaml"
    result = fragsim("alerts", "export", "-o", str(out), "-s", str(run_dir.parent / "small.yaml"))
    assert result.exit_code == 0, result.output
    rules = yaml.safe_load(out.read_text())["groups"][0]["rules"]
    exprs = {r["alert"]: r["expr"] for r in rules}
    assert list(exprs) == [spec.name for spec in ALERTS]
    assert exprs[HIGH_FRAGMENTATION.name].endswith("< 0.7")
    failure = rules[0]["annotations"]["description"]  # the exporter applies the share
    assert "more than 20% of KV memory was free" in failure
    default = tmp_path / "default.yaml"
    assert fragsim("alerts", "export", "-o", str(default)).exit_code == 0
    assert "< 0.6" in default.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default.yaml", "rules.yaml"]


def test_bad_inputs_are_one_error_line_and_write_nothing(run_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "alerts.csv"
    assert_one_error(fragsim("alerts", "show", str(tmp_path / "nope"), "-o", str(csv)), "nope")
    assert_one_error(
        fragsim("alerts", "show", str(run_dir), "--scrape-interval", "0"), "--scrape-interval"
    )
    for below_a_second in ("0.5", "0.001"):  # what a fleet's alerts.scrape_interval_s refuses
        assert_one_error(
            fragsim("alerts", "show", str(run_dir), "--scrape-interval", below_a_second),
            "--scrape-interval",
            "at least 1 s",
        )
    assert_one_error(
        fragsim("alerts", "export", "-o", str(tmp_path / "r.yaml"), "--trend-window", "1"),
        "--trend-window",
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(SMALL | {"metrics": {"ratio_alert": 2}}))
    assert_one_error(
        fragsim("alerts", "export", "-o", str(tmp_path / "r.yaml"), "-s", str(bad)),
        "bad.yaml",
        "ratio_alert",
    )
    missing = tmp_path / "no" / "such" / "rules.yaml"
    assert_one_error(fragsim("alerts", "export", "-o", str(missing)), "rules.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


POOLS = [{"name": "a", "count": 1}]


def as_fleet(folder: Path) -> None:
    """A single replica's run folder whose summary was given a fleet section, made one a
    fleet run could have written: a fleet and an alerts table, the digests recorded."""
    write_stub_tables(folder, fleet=True)
    seal(folder)


def test_show_evaluates_at_the_scrape_interval_the_run_recorded(
    run_dir: Path, tmp_path: Path
) -> None:
    """A fleet run records what its alerts.parquet was evaluated with
    (summary.json ``fleet.alerts``); ``show`` uses it unless a flag overrides it, and an
    older fleet folder gets the defaults with one note naming the flags."""
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary_path = copy / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["fleet"] = stub_fleet(POOLS, alerts={"scrape_interval_s": 5.0, "trend_window_s": 600.0})
    summary_path.write_text(json.dumps(summary))
    as_fleet(copy)
    run = read_result(copy)
    thresholds = AlertThresholds(high_free_share=0.2, ratio_alert=0.7)

    def shown(*flags: str) -> pd.DataFrame:
        csv = tmp_path / "alerts.csv"
        result = fragsim(
            "alerts",
            "show",
            str(copy),
            "-s",
            str(run_dir.parent / "small.yaml"),
            "-o",
            str(csv),
            *flags,
        )
        assert result.exit_code == 0, result.output
        return pd.read_csv(csv).drop(columns="time")

    def expected(scrape_s: float, window_s: float) -> pd.DataFrame:
        return evaluate_alerts(
            run.timeseries,
            run.events,
            scrape_interval_s=scrape_s,
            thresholds=thresholds,
            trend_window_s=window_s,
        )

    pd.testing.assert_frame_equal(shown(), expected(5.0, 600.0), check_dtype=False)
    overridden = shown("--scrape-interval", "10", "--trend-window", "1200")
    pd.testing.assert_frame_equal(overridden, expected(10.0, 1200.0), check_dtype=False)
    assert not shown().equals(overridden)  # the recorded interval did change the evaluation

    summary["fleet"] = stub_fleet(POOLS)  # a fleet folder written before fragsim recorded them
    summary_path.write_text(json.dumps(summary))
    as_fleet(copy)
    result = fragsim("alerts", "show", str(copy))
    assert result.exit_code == 0, result.output
    assert "note: " in result.stderr and "--scrape-interval / --trend-window" in result.stderr


def test_a_run_scraped_less_often_than_the_defaults_needs_no_flags(
    run_dir: Path, tmp_path: Path
) -> None:
    """A fleet scraped every 2 h (its trend window then one scrape, the failure window
    two scrapes; the shipped for: stays, shorter than a scrape: fires at the next
    evaluation) is shown and exported without a flag."""
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["fleet"] = stub_fleet(
        POOLS, alerts={"scrape_interval_s": 7200.0, "trend_window_s": 7200.0}
    )
    (copy / "summary.json").write_text(json.dumps(summary))
    as_fleet(copy)
    assert fragsim("alerts", "show", str(copy)).exit_code == 0
    rules, tests = tmp_path / "rules.yaml", tmp_path / "t.yaml"
    result = fragsim(
        "alerts", "export", "-o", str(rules), "--tests", str(tests), "--run", str(copy)
    )
    assert result.exit_code == 0, result.output
    text = rules.read_text()
    assert text.count("for: 30s") == 2 and "[4h]" in text
    # a scrape interval given alone widens the default window to one scrape
    assert fragsim("alerts", "show", str(run_dir), "--scrape-interval", "7200").exit_code == 0


def test_show_and_the_exports_take_the_thresholds_the_run_recorded(
    run_dir: Path, tmp_path: Path
) -> None:
    """A fleet run records its thresholds (summary.json ``fleet.alerts.thresholds``):
    ``show`` without ``-s`` evaluates with them, ``alerts export --run`` writes them
    into the rules, ``export openmetrics`` counts failures at its high-free share;
    ``-s`` / ``--high-free-share`` override; a bad recorded value is one error line."""
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    recorded = {"high_free_share": 0.2, "ratio_alert": 0.7, "ratio_severe": 0.5}
    summary["fleet"] = stub_fleet(POOLS, alerts={"scrape_interval_s": 5.0, "thresholds": recorded})
    (copy / "summary.json").write_text(json.dumps(summary))
    as_fleet(copy)
    run = read_result(copy)
    csv = tmp_path / "alerts.csv"
    assert fragsim("alerts", "show", str(copy), "-o", str(csv)).exit_code == 0
    expected = evaluate_alerts(
        run.timeseries,
        run.events,
        scrape_interval_s=5.0,
        thresholds=AlertThresholds(high_free_share=0.2, ratio_alert=0.7),
    )
    written = pd.read_csv(csv).drop(columns="time")
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)
    seed = evaluate_alerts(run.timeseries, run.events, scrape_interval_s=5.0)
    assert len(seed) != len(expected)  # the recorded thresholds did change the evaluation

    rules = tmp_path / "rules.yaml"
    args = ("alerts", "export", "-o", str(rules), "--tests", str(tmp_path / "t.yaml"))
    assert fragsim(*args, "--run", str(copy)).exit_code == 0
    assert "< 0.7" in rules.read_text() and "< 0.6" not in rules.read_text()

    def failures_counted(*flags: str) -> float:
        om = tmp_path / "run.om"
        assert fragsim("export", "openmetrics", str(copy), "-o", str(om), *flags).exit_code == 0
        name = "fragsim_allocation_failures_at_high_free_memory_total{"
        return sum(
            float(x.split(" ")[1]) for x in om.read_text().splitlines() if x.startswith(name)
        )

    at_recorded = failures_counted()
    assert at_recorded == failures_counted("--high-free-share", "0.2")
    assert at_recorded != failures_counted(
        "--high-free-share", str(AlertThresholds().high_free_share)
    )

    recorded["ratio_alert"] = "high"
    (copy / "summary.json").write_text(json.dumps(summary))
    assert_one_error(fragsim("alerts", "show", str(copy)), "fleet.alerts.thresholds.ratio_alert")


def test_show_and_the_exports_take_the_for_the_run_recorded(run_dir: Path, tmp_path: Path) -> None:
    """A fleet run records each rule's for: (summary.json ``fleet.alerts.for_s``): show,
    the rules and the ALERTS export take it; ``--for`` overrides it; a bad recorded value
    is one error line naming the field, and ``--no-alerts`` leaves ALERTS out."""
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    path = copy / "summary.json"
    summary = json.loads(path.read_text())
    held = "high_fragmentation_approaching_threshold"
    times = {"scrape_interval_s": 30.0, "trend_window_s": 3600.0}  # a one-replica run: as a fleet's
    summary["fleet"] = stub_fleet(POOLS, alerts=times | {"for_s": {held: 3600.0}})
    path.write_text(json.dumps(summary))
    as_fleet(copy)
    summary = json.loads(path.read_text())  # with the fleet tables' digests
    rules = tmp_path / "rules.yaml"
    args = ("alerts", "export", "-o", str(rules), "--tests", str(tmp_path / "t.yaml"))
    assert fragsim(*args, "--run", str(copy)).exit_code == 0
    assert "for: 1h" in rules.read_text() and "for: 30s" in rules.read_text()
    shown = fragsim("alerts", "show", str(copy), "-f", "csv")
    row = next(r for r in shown.stdout.splitlines() if r.startswith(held))
    assert row.split(",")[2] == "3600.0"
    overridden = fragsim("alerts", "show", str(copy), "-f", "csv", "--for", "0")
    row = next(r for r in overridden.stdout.splitlines() if r.startswith(held))
    assert row.split(",")[2] == "0.0"
    metrics = tmp_path / "run.om"
    assert fragsim("export", "openmetrics", str(copy), "-o", str(metrics)).exit_code == 0
    assert "# TYPE ALERTS gauge" in metrics.read_text()
    assert "# TYPE ALERTS_FOR_STATE gauge" in metrics.read_text()
    done = fragsim("export", "openmetrics", str(copy), "-o", str(metrics), "--no-alerts")
    assert done.exit_code == 0 and "ALERTS" not in metrics.read_text()
    summary["fleet"]["alerts"]["for_s"] = {held: "soon"}
    path.write_text(json.dumps(summary))
    assert_one_error(fragsim("alerts", "show", str(copy)), f"fleet.alerts.for_s.{held}")
    summary["fleet"]["alerts"]["for_s"] = {"nope": 1.0}
    path.write_text(json.dumps(summary))
    assert_one_error(fragsim("alerts", "show", str(copy)), "fleet.alerts.for_s", "nope")
