"""Hostile run folders, third round (issue 26.1 and 26.5's scrape interval): every
command that reads a run folder (``export openmetrics``, ``alerts show``, ``alerts
export --run``, ``report``, ``compare``) refuses a folder no run could have written --
damaged summary fields, damaged table values and types, missing tables, truncated
Parquet, tables edited after the run -- with one ``error:`` line naming the file and
the field or column, exit status 2, and nothing written.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support.hostile import refusal_lines, refused
from typer.testing import CliRunner, Result

from sim.cli import app

SCENARIO: dict[str, Any] = {
    "name": "round3",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 30}},
    "hardware": {"kv_capacity_tokens": 3000},  # small: failures and preemptions
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def _run(folder: Path, data: dict[str, Any]) -> Path:
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = folder / "run"
    result = invoke("run", path, "-o", out, "-q", "--no-report")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("fleet"), SCENARIO)


@pytest.fixture(scope="module")
def single_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = {k: v for k, v in SCENARIO.items() if k != "fleet"}
    return _run(tmp_path_factory.mktemp("single"), data)


def commands(run: Path, out: Path) -> dict[str, tuple[list[object], list[Path]]]:
    """Each reading command over ``run``, with what it would write under ``out``."""
    return {
        "export openmetrics": (["export", "openmetrics", run, "-o", out / "x.om"], [out / "x.om"]),
        "alerts show": (["alerts", "show", run, "-o", out / "t.csv"], [out / "t.csv"]),
        "alerts export --run": (
            ["alerts", "export", "-o", out / "r.yaml", "--run", run, "--tests", out / "t.yaml"],
            [out / "r.yaml", out / "t.yaml"],
        ),
        "report": (["report", run, "-o", out / "r.html"], [out / "r.html"]),
        "compare": (["compare", run, run, "-o", out / "cmp"], [out / "cmp"]),  # two runs
    }


def refused_by_all(run: Path, out: Path, file: str, says: str) -> None:
    """Every reading command refuses ``run`` with one line naming ``file`` and ``says``,
    exit 2, writing nothing."""
    out.mkdir(exist_ok=True)
    for name, (args, outputs) in commands(run, out).items():
        line = refused(invoke(*args), "")
        assert str(run / file) in line and says in line, (name, line)
        assert not [p for p in outputs if p.exists()], name
        assert not [p.name for p in out.iterdir()], (name, list(out.iterdir()))


def _copy(source: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(source, run)
    return run


def _edit_summary(run: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = run / "summary.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]

    def edit(data: dict[str, Any]) -> None:
        node: Any = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


# -- the summary: each field's type and range --------------------------------------------

SUMMARY_DAMAGE: list[tuple[str, Any, str]] = [
    ("fleet.pools", "a100", "field fleet.pools: expected an array, got a string"),
    ("fleet.pools", 5, "field fleet.pools: expected an array"),
    ("fleet.pools", None, "field fleet.pools: expected an array, got null"),
    ("fleet.pools", [], "field fleet.pools: list should have at least 1 item"),
    ("fleet.pools.0", "a", "field fleet.pools.0: expected an object, got a string"),
    ("fleet.pools.0", [1, 2], "field fleet.pools.0: expected an object, got an array"),
    ("fleet.pools.0", None, "field fleet.pools.0: expected an object, got null"),
    ("fleet", None, "field fleet: expected an object, got null"),
    ("fleet", [1], "field fleet: expected an object, got an array"),
    ("fleet", "x", "field fleet: expected an object, got a string"),
    ("fleet.alerts.thresholds", [1, 2], "field fleet.alerts.thresholds: expected an object"),
    ("fleet.alerts.thresholds", "x", "field fleet.alerts.thresholds: expected an object"),
    ("fleet.alerts.thresholds.ratio_alert", 2, "field fleet.alerts.thresholds.ratio_alert"),
    ("fleet.alerts.thresholds.high_free_share", -0.1, "thresholds.high_free_share"),
    ("fleet.alerts.thresholds.ratio_severe", "0.5", "thresholds.ratio_severe"),
    ("fleet.alerts.trend_window_s", 10, "shorter than scrape_interval_s 30"),
    ("fleet.alerts.trend_window_s", 1e300, "spans more than 100,000 scrapes"),
    ("fleet.alerts.trend_window_s", -5, "field fleet.alerts.trend_window_s"),
    ("fleet.alerts.scrape_interval_s", 0.001, "field fleet.alerts.scrape_interval_s"),
    ("fleet.alerts.scrape_interval_s", "30", "field fleet.alerts.scrape_interval_s"),
    ("fleet.alerts.scrape_interval_s", True, "field fleet.alerts.scrape_interval_s"),
    ("fleet.alerts.scrape_interval_s", 1e30, "field fleet.alerts.scrape_interval_s"),
    ("kv_bytes_per_token", 1e30, "field kv_bytes_per_token: expected an integer, got 1e+30"),
    ("kv_bytes_per_token", 10**30, "field kv_bytes_per_token"),
    ("kv_bytes_per_token", 0, "field kv_bytes_per_token"),
    ("kv_bytes_per_token", "524288", "field kv_bytes_per_token"),
    ("fleet.pools.0.kv_bytes_per_token", 2**41, "fleet.pools.0.kv_bytes_per_token"),
    (
        "fleet.pools.0",
        {"name": "a", "count": 2, "kv_capacity_tokens": 2**30, "kv_bytes_per_token": 2**40},
        "field fleet.pools.0: kv_capacity_tokens 1,073,741,824 x kv_bytes_per_token",
    ),
    ("fleet.pools.0.kv_bytes_per_token", -1, "field fleet.pools.0.kv_bytes_per_token"),
    ("fleet.pools.0.replicas", "0,1", "field fleet.pools.0.replicas"),
    ("engine.end_s", -1, "field engine.end_s"),
    ("engine.end_s", "soon", "field engine.end_s"),
    ("requests.total", -1, "field requests.total"),
    ("requests.total", None, "field requests.total"),
    ("latency_s.ttft.p99", "x", "field latency_s.ttft.p99"),
    ("fleet.cost_usd", -3.0, "field fleet.cost_usd"),
    ("digests", None, "field digests: expected an object, got null"),
    ("digests.events.parquet", "abc", "field digests.events.parquet"),
]


@pytest.mark.parametrize(("field", "value", "says"), SUMMARY_DAMAGE)
def test_a_summary_no_run_writes_is_refused_by_every_reader_naming_the_field(
    tmp_path: Path, fleet_run: Path, field: str, value: Any, says: str
) -> None:
    run = _copy(fleet_run, tmp_path)
    if field == "digests.events.parquet":
        _edit_summary(run, lambda d: d["digests"].__setitem__("events.parquet", value))
    else:
        _edit_summary(run, _put(field, value))
    refused_by_all(run, tmp_path / "out", "summary.json", says)


# -- the tables: columns, types, values --------------------------------------------------


def _set(table: str, column: str, value: Any, row: int = 0) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / f"{table}.parquet"
        frame = pq.read_table(path).to_pandas()
        if isinstance(value, str):
            frame[column] = frame[column].astype(str)
        elif isinstance(value, float):
            frame[column] = frame[column].astype(float)
        frame.loc[row, column] = value
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)

    return damage


def _drop(table: str, column: str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / f"{table}.parquet"
        pq.write_table(pq.read_table(path).drop_columns([column]), path)

    return damage


def _truncate(table: str, keep: int) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / f"{table}.parquet"
        path.write_bytes(path.read_bytes()[:keep])

    return damage


NAN, INF = float("nan"), float("inf")
TABLE_DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "timeseries NaN time": (_set("timeseries", "time_s", NAN), "timeseries", "row 0 holds NaN"),
    "timeseries inf time": (_set("timeseries", "time_s", INF), "timeseries", "row 0 holds inf"),
    "timeseries negative time": (_set("timeseries", "time_s", -5.0, 3), "timeseries", "row 3"),
    "timeseries huge time": (_set("timeseries", "time_s", 1e300), "timeseries", "1e+300"),
    "timeseries text time": (_set("timeseries", "time_s", "soon"), "timeseries", "column time_s"),
    "ratio above one": (
        _set("timeseries", "largest_contiguous_free_block_ratio", 1.5),
        "timeseries",
        "a ratio in [0, 1]",
    ),
    "ratio negative": (
        _set("timeseries", "largest_contiguous_free_block_ratio", -0.1, 2),
        "timeseries",
        "row 2 holds -0.1",
    ),
    "negative free tokens": (_set("timeseries", "free_tokens", -1), "timeseries", "free_tokens"),
    "free beyond capacity": (
        _set("timeseries", "free_tokens", 10**9),
        "timeseries",
        "more than the row's capacity_tokens",
    ),
    "capacity beyond the summary's": (
        _set("timeseries", "capacity_tokens", 2**45),
        "timeseries",
        "column capacity_tokens",
    ),
    "fractional count": (
        _set("timeseries", "waiting_requests", 1.5),
        "timeseries",
        "column waiting_requests",
    ),
    "up as text": (_set("timeseries", "up", "yes"), "timeseries", "column up"),
    "no uptime column": (_drop("timeseries", "uptime_s"), "timeseries", "no column uptime_s"),
    "event NaN time": (_set("events", "time_s", NAN), "events", "row 0 holds NaN"),
    "event negative time": (_set("events", "time_s", -1.0, 4), "events", "row 4 holds -1"),
    "event share above one": (_set("events", "free_share", 7.0), "events", "column free_share"),
    "event kind missing": (_drop("events", "kind"), "events", "no column kind"),
    "fleet NaN time": (_set("fleet", "time_s", NAN), "fleet", "row 0 holds NaN"),
    "fleet negative time": (_set("fleet", "time_s", -5.0), "fleet", "row 0 holds -5"),
    "fleet negative cost": (_set("fleet", "cost_usd", -1.0, 1), "fleet", "column cost_usd"),
    "fleet NaN cost": (_set("fleet", "cost_usd", NAN), "fleet", "column cost_usd"),
    "fleet negative replicas": (_set("fleet", "replicas", -2), "fleet", "column replicas"),
    "request NaN arrival": (_set("requests", "arrival_s", NAN), "requests", "column arrival_s"),
    "request negative tokens": (
        _set("requests", "prompt_tokens", -7),
        "requests",
        "column prompt_tokens",
    ),
    "request negative finish": (_set("requests", "finish_s", -1.0), "requests", "finish_s"),
    "truncated timeseries": (_truncate("timeseries", 200), "timeseries", "not a readable Parquet"),
    "truncated events": (_truncate("events", 40), "events", "not a readable Parquet"),
    "truncated fleet": (_truncate("fleet", 0), "fleet", "not a readable Parquet"),
    "truncated alerts": (_truncate("alerts", 100), "alerts", "not a readable Parquet"),
    "fleet table copied over the alerts": (
        lambda run: shutil.copyfile(run / "fleet.parquet", run / "alerts.parquet"),
        "alerts",
        "not the alerts table",
    ),
    "a value edited in range": (
        _set("timeseries", "free_tokens", 0),
        "timeseries",
        "SHA-256 is not the one",
    ),
}


@pytest.mark.parametrize("case", list(TABLE_DAMAGE))
def test_a_table_no_run_writes_is_refused_by_every_reader_naming_the_column(
    tmp_path: Path, fleet_run: Path, case: str
) -> None:
    damage, table, says = TABLE_DAMAGE[case]
    run = _copy(fleet_run, tmp_path)
    damage(run)
    refused_by_all(run, tmp_path / "out", f"{table}.parquet", says)


@pytest.mark.parametrize("table", ["fleet", "alerts"])
def test_a_fleet_run_without_a_fleet_table_is_refused_by_name(
    tmp_path: Path, fleet_run: Path, table: str
) -> None:
    run = _copy(fleet_run, tmp_path)
    (run / f"{table}.parquet").unlink()
    out = tmp_path / "out"
    out.mkdir()
    for name, (args, outputs) in commands(run, out).items():
        line = refused(invoke(*args), "")
        assert f"no {table}.parquet" in line, (name, line)
        assert not [p for p in outputs if p.exists()]


def test_a_single_replica_run_with_a_fleet_table_is_refused(
    tmp_path: Path, single_run: Path, fleet_run: Path
) -> None:
    run = _copy(single_run, tmp_path)
    shutil.copyfile(fleet_run / "fleet.parquet", run / "fleet.parquet")
    refused_by_all(run, tmp_path / "out", "fleet.parquet", "has no fleet section")


def test_a_folder_written_before_digests_is_read_with_one_note(
    tmp_path: Path, fleet_run: Path
) -> None:
    run = _copy(fleet_run, tmp_path)
    _edit_summary(run, lambda d: d.pop("digests"))
    out = tmp_path / "x.om"
    done = invoke("export", "openmetrics", run, "-o", out)
    assert done.exit_code == 0, done.output
    notes = [line for line in done.stderr.splitlines() if "records no table digests" in line]
    assert len(notes) == 1 and notes[0].startswith("note: "), done.stderr
    assert out.read_text().endswith("# EOF\n")
    shown = invoke("alerts", "show", run)
    assert shown.exit_code == 0 and "note: " in shown.stderr


def test_the_good_folder_is_read_by_every_command_without_a_note(
    tmp_path: Path, fleet_run: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name, (args, outputs) in commands(fleet_run, out).items():
        done = invoke(*args)
        assert done.exit_code == 0, (name, done.output)
        assert "records no table digests" not in done.stderr
        assert all(p.exists() for p in outputs), name


@pytest.mark.parametrize(
    "own", ["summary.json", "timeseries.parquet", "alerts.parquet", "fleet.parquet"]
)
def test_no_command_writes_over_a_file_of_the_run_it_reads(
    tmp_path: Path, fleet_run: Path, own: str
) -> None:
    """26.3: an output naming one of the input run's own files (directly or through
    ``..``) is refused before anything is read or written; the run stays as it was."""
    run = _copy(fleet_run, tmp_path)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    target = run / own
    sideways = run / ".." / run.name / own
    for args, flag in (
        (["export", "openmetrics", run, "-o", target], "-o"),
        (["export", "grafana", "--run", run, "-o", sideways], "-o"),
        (["alerts", "show", run, "-o", target], "-o"),
        (["alerts", "export", "-o", target, "--run", run, "--tests", tmp_path / "t.y"], "-o"),
        (["alerts", "export", "-o", tmp_path / "r.y", "--run", run, "--tests", target], "--tests"),
    ):
        line = refused(invoke(*args), "")
        assert f"{flag} names the file {own} of the run folder" in line, (args, line)
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before, args
        assert not list(tmp_path.glob("*.y")), args


# -- 26.5: an error names where the bad value came from ----------------------------------


def test_too_many_scrapes_from_the_summary_names_its_field_not_the_flag(
    tmp_path: Path, fleet_run: Path
) -> None:
    """A scrape interval within its range, recorded by a run whose tables (edited, the
    digests dropped) span more scrapes than the export evaluates: the summary's field
    is blamed, not --scrape-interval, which was not given."""
    run = _copy(fleet_run, tmp_path)
    _set("timeseries", "time_s", 9e6, 5)(run)
    _edit_summary(run, lambda d: d.pop("digests"))
    _edit_summary(run, _put("fleet.alerts.scrape_interval_s", 1.0))
    for args in (["export", "openmetrics", run, "-o", tmp_path / "x.om"], ["alerts", "show", run]):
        (line,) = refusal_lines(invoke(*args), "", aside=("note: ",))
        assert f"{run / 'summary.json'}: field fleet.alerts.scrape_interval_s" in line, line
        assert "--scrape-interval" not in line, line
    (flagged,) = refusal_lines(
        invoke("export", "openmetrics", run, "-o", tmp_path / "x.om", "--scrape-interval", "1"),
        "",
        aside=("note: ",),
    )
    assert "--scrape-interval" in flagged and "summary.json" not in flagged
    assert not (tmp_path / "x.om").exists()


def test_a_bad_recorded_scrape_interval_names_the_summary_not_the_flag(
    tmp_path: Path, fleet_run: Path
) -> None:
    run = _copy(fleet_run, tmp_path)
    _edit_summary(run, _put("fleet.alerts.scrape_interval_s", 0.25))
    for args in (
        ["export", "openmetrics", run, "-o", tmp_path / "x.om"],
        ["alerts", "show", run],
        ["alerts", "export", "-o", tmp_path / "r.yaml", "--run", run, "--tests", tmp_path / "t"],
    ):
        line = refused(invoke(*args), "")
        assert "summary.json: field fleet.alerts.scrape_interval_s" in line, line
        assert "invalid value for --scrape-interval" not in line


def test_kv_bytes_per_token_that_would_overflow_the_export_is_refused(
    tmp_path: Path, fleet_run: Path
) -> None:
    out = tmp_path / "x.om"
    line = refused(
        invoke("export", "openmetrics", fleet_run, "-o", out, "--kv-bytes-per-token", 2**62),
        "",
    )
    assert "--kv-bytes-per-token" in line and "overflows 64-bit bytes" in line
    assert not out.exists()


def test_the_summary_model_bounds_are_the_commands(fleet_run: Path) -> None:
    from sim.cli import alert_times
    from sim.results import summary_check, summary_model

    for name in ("MIN_SCRAPE_INTERVAL_S", "MAX_INTERVAL_S", "MAX_WINDOW_SCRAPES"):
        assert getattr(summary_model, name) == getattr(alert_times, name)
    data = json.loads((fleet_run / "summary.json").read_text())
    summary_check.parse_summary(copy.deepcopy(data), "s")  # a run's own summary passes
    assert pd.read_parquet(fleet_run / "events.parquet").shape[0] > 5  # the cases have rows
