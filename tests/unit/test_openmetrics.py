"""`sim.telemetry.openmetrics` over a run folder written by hand: every family's header,
samples with labels and timestamps from the origin, the failure counter, replicas by
state, one sample per series per millisecond, the file's end, the uptime-correlation
gauge as the alerts evaluate it, bytes at the summary's KV bytes per token, pools from
the summary's replica lists (a two-pool fleet that scales into its second pool); and
`fragsim export openmetrics`'s errors (one line, status 2, nothing written), its note
for a run that records no bytes per token, and determinism."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from support.runfolder import seal, stub_fleet, stub_summary, write_stub_tables
from typer.testing import CliRunner

from sim.cli import app
from sim.results.summary_model import Summary
from sim.telemetry import openmetrics as om

SUMMARY = stub_summary(fleet=stub_fleet([{"name": "a", "count": 1}, {"name": 'b"1', "count": 1}]))


def _timeseries() -> pd.DataFrame:
    rows = []
    for time_s in (0.0, 10.0, 10.0004, 20.5):  # 10.0004 s: the same millisecond as 10 s
        for replica in (0, 1, 2):
            rows.append(
                {
                    "time_s": time_s,
                    "replica": replica,
                    "trigger": "periodic",
                    "up": True,
                    "uptime_s": time_s,
                    "capacity_tokens": 1000,
                    "used_tokens": 100 * replica,
                    "free_tokens": 1000 - 100 * replica,
                    "largest_free_extent_tokens": 500,
                    "free_extent_count": 2,
                    "largest_contiguous_free_block_ratio": 500 / (1000 - 100 * replica),
                    "running_requests": replica,
                    "waiting_requests": 2,
                    "preemptions_total": int(time_s > 15),
                }
            )
    return pd.DataFrame(rows)


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    _timeseries().to_parquet(run / "timeseries.parquet")
    events = pd.DataFrame(
        {
            "time_s": [5.0, 10.0, 12.0, 12.0, 19.0],
            "replica": [0, 0, 0, 1, 0],
            "kind": [
                "growth_failure",
                "admission_failure",
                "growth_failure",
                "alert",
                "growth_failure",
            ],
            "request_id": [1, 2, 3, -1, 4],
            "free_share": [0.5, 0.3, 0.1, float("nan"), 0.25],  # 0.1 and 0.25: not above
            "cause": ["fragmentation"] * 5,
            "uptime_s": [5.0, 10.0, 12.0, 12.0, 19.0],
        }
    )
    events.to_parquet(run / "events.parquet")
    fleet = {"time_s": [0.0, 20.0], "trigger": ["periodic"] * 2, "replicas": [2, 3]}
    fleet |= {s: [0, 0] for s in om.LIFECYCLE_STATES} | {"active": [2, 2], "loading": [0, 1]}
    pd.DataFrame(fleet | {"replica_hours": [0.0, 0.01], "cost_usd": [0.0, 0.1]}).to_parquet(
        run / "fleet.parquet"
    )
    (run / "summary.json").write_text(json.dumps(SUMMARY))
    write_stub_tables(run, fleet=True)
    seal(run)
    return run


def _export(run: Path, **kwargs: object) -> str:
    """The export with counters scraped every 5 s (unless given)."""
    out = io.StringIO()
    kwargs = {"scrape_interval_s": 5.0} | kwargs
    om.write_openmetrics(out, run, Summary.from_json_dict(SUMMARY), origin_s=1000, **kwargs)
    return out.getvalue()


def test_each_family_is_whole_with_its_header_and_the_file_ends_with_eof(tmp_path: Path) -> None:
    text = _export(_run_dir(tmp_path))
    assert text.endswith("\n# EOF\n")
    names = [f.name for f in om.REPLICA_METRICS]
    names += [om.FAILURES.name, om.UPTIME_CORRELATION.name, om.REPLICAS_BY_STATE.name]
    helps = [line.split(" ")[2] for line in text.splitlines() if line.startswith("# HELP")]
    assert helps == names
    lines = text.splitlines()
    for family in (*om.REPLICA_METRICS, om.FAILURES):
        at = lines.index(f"# HELP {family.name} {family.help}")
        assert lines[at + 1] == f"# TYPE {family.name} {family.kind}"
        unit = [f"# UNIT {family.name} {family.unit}"] if family.unit else []
        body = lines[at + 1 + len(unit) + 1 : at + 1 + len(unit) + 1 + 9]
        assert lines[at + 2 : at + 2 + len(unit)] == unit
        suffix = "_total" if family.kind == "counter" else ""
        assert all(line.startswith(family.name + suffix + "{") for line in body), family.name


def test_gauge_samples_carry_replica_pool_and_time_from_the_origin(tmp_path: Path) -> None:
    text = _export(_run_dir(tmp_path))
    free = [line for line in text.splitlines() if line.startswith("fragsim_kv_free_tokens{")]
    assert free[:3] == [
        'fragsim_kv_free_tokens{replica="0",pool="a"} 1000 1000.000',
        'fragsim_kv_free_tokens{replica="1",pool="b\\"1"} 900 1000.000',
        'fragsim_kv_free_tokens{replica="2",pool="a"} 800 1000.000',  # scaled up: first pool
    ]
    # 10.0004 s rounds to the millisecond of 10 s: one sample per series there
    assert [line.rsplit(" ", 1)[1] for line in free[::3]] == ["1000.000", "1010.000", "1020.500"]
    ratio = [line for line in text.splitlines() if line.startswith("fragsim_largest_contiguous")]
    assert ratio[1].split(" ")[1] == repr(500 / 900)


def test_the_failure_counter_counts_failures_above_the_share_up_to_each_scrape(
    tmp_path: Path,
) -> None:
    run = _run_dir(tmp_path)
    text = _export(run)
    counter = [line for line in text.splitlines() if line.startswith(om.FAILURES.name + "_total")]
    replica0 = [line.split(" ")[1] for line in counter if 'replica="0"' in line]
    # scrapes at 0, 5, ..., 20 s; failures above 25 % free at 5 s and 10 s, none later
    assert replica0 == ["0", "1", "2", "2", "2"]
    assert {line.split(" ")[1] for line in counter if 'replica="0"' not in line} == {"0"}
    stricter = _export(run, high_free_share=0.4)
    counted = [line for line in stricter.splitlines() if line.startswith(om.FAILURES.name + "_t")]
    assert [line.split(" ")[1] for line in counted if 'replica="0"' in line] == ["0", "1"] + [
        "1"
    ] * 3


def test_replicas_by_state_from_the_fleet_table_and_bytes_when_given(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    text = _export(run, kv_bytes_per_token=4)
    assert 'fragsim_fleet_replicas{state="loading"} 1 1020.000' in text.splitlines()
    assert 'fragsim_fleet_replicas{state="active"} 2 1000.000' in text.splitlines()
    assert 'fragsim_kv_free_bytes{replica="1",pool="b\\"1"} 3600 1000.000' in text.splitlines()
    assert "# UNIT fragsim_kv_free_bytes bytes" in text.splitlines()
    assert "fragsim_kv_free_bytes" not in _export(run)


def test_every_metric_the_rules_read_is_exported(tmp_path: Path) -> None:
    from sim.telemetry.prometheus import METRIC, METRICS

    text = _export(_run_dir(tmp_path))
    samples = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    assert {name for _, name, _, _ in METRICS} <= samples
    assert METRIC["node_uptime_vs_fragmentation_correlation"] == om.UPTIME_CORRELATION.name


def test_number_and_stamp() -> None:
    assert [om.number(v) for v in (3.0, 0.5, float("nan"), float("inf"), -float("inf"))] == [
        "3",
        "0.5",
        "NaN",
        "+Inf",
        "-Inf",
    ]
    assert om.stamp(1_704_067_200_005) == "1704067200.005"


def test_defaults_held_equal() -> None:
    import inspect

    from sim.cli.alert_times import MAX_SCRAPES
    from sim.cli.export import DEFAULT_ORIGIN, parse_origin
    from sim.telemetry import openmetrics_counters
    from sim.telemetry.alerts import DEFAULT_SCRAPE_INTERVAL_S, DEFAULT_TREND_WINDOW_S

    assert parse_origin(DEFAULT_ORIGIN) == om.DEFAULT_ORIGIN_S
    assert openmetrics_counters.MAX_SCRAPES == MAX_SCRAPES
    defaults = inspect.signature(om.write_openmetrics).parameters
    assert defaults["scrape_interval_s"].default == DEFAULT_SCRAPE_INTERVAL_S
    assert defaults["trend_window_s"].default == DEFAULT_TREND_WINDOW_S


runner = CliRunner()


def test_the_command_writes_the_same_bytes_twice(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    outs = [tmp_path / "a.om", tmp_path / "b.om"]
    for out in outs:
        result = runner.invoke(app, ["export", "openmetrics", str(run), "-o", str(out)])
        assert result.exit_code == 0, result.output
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert "1704067200.000" in outs[0].read_text()


@pytest.mark.parametrize(
    ("damage", "args", "expected"),
    [
        ("none", ["--origin", "2024-01-01T00:00:00"], "no time zone"),
        ("none", ["--origin", "yesterday"], "expected an ISO 8601 instant"),
        ("summary", [], "summary.json"),
        ("columns", [], "timeseries.parquet: not the timeseries table: no column waiting_requests"),
        ("missing", [], "not a run folder: no events.parquet"),
    ],
)
def test_bad_input_is_one_error_line_and_nothing_written(
    tmp_path: Path, damage: str, args: list[str], expected: str
) -> None:
    run = _run_dir(tmp_path)
    if damage == "summary":
        (run / "summary.json").write_text("[1]")
    elif damage == "columns":
        _timeseries().drop(columns="waiting_requests").to_parquet(run / "timeseries.parquet")
    elif damage == "missing":
        (run / "events.parquet").unlink()
    out = tmp_path / "x.om"
    result = runner.invoke(app, ["export", "openmetrics", str(run), "-o", str(out), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--metrics", "tgi"], "--metrics"),
        (["--instance-label", "node"], "--instance-label"),
        (["--for", "-1"], "--for"),
        (["--failure-window", "45"], "--failure-window"),
    ],
)
def test_alerts_export_refuses_bad_rule_options(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    out = tmp_path / "rules.yaml"
    result = runner.invoke(app, ["alerts", "export", "-o", str(out), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not out.exists()


def test_rule_durations_are_written_in_their_largest_units() -> None:
    from sim.telemetry.prometheus import duration

    assert [duration(s) for s in (30, 300, 3600, 5400, 1.5, 86400)] == [
        "30s",
        "5m",
        "1h",
        "1h30m",
        "1s500ms",
        "1d",
    ]
