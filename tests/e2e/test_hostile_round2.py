"""Hostile inputs, second round (issue 19): the fleet, sweeps, plans, reports and traces.

Every refusal is one ``error:`` line naming the file (or option) and what was wrong,
exit status 2, and nothing half-written: no output folder (or the previous one intact)
and no temporaries beside it. Runs are tiny (a dozen requests) and in-process, but for
the one run that must be killed.
"""

from __future__ import annotations

import copy
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support.hostile import refused, strict_json
from typer.testing import CliRunner, Result

from sim.cli import app
from sim.results.io import FILES

FLEET: dict[str, Any] = {
    "name": "round2",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 12}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}
SINGLE: dict[str, Any] = {k: v for k, v in FLEET.items() if k != "fleet"}


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def write(folder: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def with_fleet(**fields: Any) -> dict[str, Any]:
    data = copy.deepcopy(FLEET)
    data["fleet"].update(fields)
    return data


def no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


def strict_json_file(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = strict_json(path.read_text(), path)
    return data


# -- class 1: timing fields that would make a run unbounded ------------------------------


@pytest.mark.parametrize(
    ("field", "block"),
    [
        ("fleet.autoscaler.interval_s", {"autoscaler": {"kind": "naive", "interval_s": 1e-7}}),
        ("fleet.restart.interval_s", {"restart": {"kind": "scheduled", "interval_s": 1e-8}}),
        ("fleet.faults.mtbf_s", {"faults": {"mtbf_s": 1e-7}}),
        ("fleet.alerts.scrape_interval_s", {"alerts": {"scrape_interval_s": 1e-7}}),
    ],
)
def test_a_fleet_interval_that_would_not_end_is_refused(
    tmp_path: Path, field: str, block: dict[str, Any]
) -> None:
    scenario = write(tmp_path, with_fleet(**block))
    out = tmp_path / "out"
    refused(invoke("run", scenario, "-o", out, "-q"), f"{scenario}: field {field}: ")
    assert not out.exists()
    no_temporaries(tmp_path)


# -- class 2: undefined statistics are null, every summary strict JSON --------------------

DEGENERATE: dict[str, dict[str, Any]] = {
    "nothing arrives": {"duration_s": 1e-8},
    "one request": {"workload": {"preset": "chat", "synth": {"num_requests": 1}}},
    "every request refused": {
        "hardware": {"kv_capacity_tokens": 64, "max_seq_tokens": 64},
        "scheduler": {"on_admission_failure": "reject"},
    },
}


@pytest.mark.parametrize("fleet", [True, False], ids=["fleet", "single"])
@pytest.mark.parametrize("case", list(DEGENERATE))
def test_every_summary_of_a_degenerate_run_is_strict_json(
    tmp_path: Path, case: str, fleet: bool
) -> None:
    data = copy.deepcopy(FLEET if fleet else SINGLE) | copy.deepcopy(DEGENERATE[case])
    out = tmp_path / "out"
    result = invoke("run", write(tmp_path, data), "-o", out, "-q", "--no-report")
    assert result.exit_code == 0, (result.output, result.exception)
    summary = strict_json_file(out / "summary.json")
    if case == "nothing arrives":
        assert summary["latency_s"]["ttft"]["p99"] is None
        if fleet:
            assert summary["fleet"]["cost_per_million_output_tokens_usd"] is None


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
def test_an_undefined_statistic_is_a_placeholder_in_the_terminal(tmp_path: Path, fmt: str) -> None:
    """No tokens: $ per 1M output tokens is undefined -- a dash in the terminal's tables,
    empty in csv, null in json; never ``nan``."""
    data = copy.deepcopy(FLEET) | copy.deepcopy(DEGENERATE["nothing arrives"])
    out = tmp_path / "out"
    result = invoke("run", write(tmp_path, data), "-o", out, "--no-report", "-f", fmt)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "nan" not in result.stdout.lower(), result.stdout
    (row,) = [line for line in result.stdout.splitlines() if "per 1M output tokens" in line]
    if fmt == "json":
        rows = strict_json(result.stdout, "stdout")
        assert {"metric": "fleet / $ per 1M output tokens", "value": None} in rows
    elif fmt == "csv":
        assert row.endswith("tokens,"), row
    else:
        assert row.replace("|", " ").replace("│", " ").split()[-1] == "—", row


def test_a_sweep_of_runs_with_undefined_statistics_resumes(tmp_path: Path) -> None:
    """A resumed sweep reads its runs' summaries back: their nulls are NaN in its tables."""
    write(tmp_path, FLEET | {"duration_s": 1e-8}, "base.yaml")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", "replications": 2}))
    out = tmp_path / "out"
    for _ in range(2):
        result = invoke("sweep", path, "-o", out, "--workers", "1", "-q")
        assert result.exit_code == 0, (result.output, result.exception)
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs["cost_per_million_output_tokens_usd"].isna().all()


# -- class 3: sweeps that set the seed -----------------------------------------------------


def test_a_sweep_over_seeds_with_a_duplicate_point_writes_and_resumes(tmp_path: Path) -> None:
    write(tmp_path, SINGLE, "base.yaml")
    sweep = {
        "base": "base.yaml",
        "list": [{"seed": 3}, {"seed": 3}, {"seed": 4}],
        "replications": 2,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    first = invoke("sweep", path, "-o", out, "--workers", "1", "-q")
    assert first.exit_code == 0, (first.output, first.exception)
    runs = pd.read_parquet(out / "runs.parquet")
    assert list(runs.columns).count("seed") == 1
    assert runs["seed"].tolist() == [3, 4, 3, 4, 4, 5]  # the point's seed + replication
    assert runs["point"].tolist() == [0, 0, 1, 1, 2, 2]
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary["seed"].tolist() == [3, 3, 4]
    before = (out / "runs.parquet").read_bytes()
    again = invoke("sweep", path, "-o", out, "--workers", "1")
    assert again.exit_code == 0, (again.output, again.exception)
    assert "6 runs: 6 from an earlier sweep" in again.output
    assert (out / "runs.parquet").read_bytes() == before


def test_an_alias_bomb_sweep_is_one_line(tmp_path: Path) -> None:
    lines = ["base: base.yaml", "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    lines.append("grid: {seed: *a6}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    line = refused(invoke("sweep", path, "-o", out), f"{path}: not valid YAML: aliases expand")
    assert line.endswith(")") and "(line " in line
    assert not out.exists()


def test_an_interrupted_sweep_says_what_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sim.sweep import execute

    write(tmp_path, SINGLE, "base.yaml")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"seed": [1, 2, 3]}}))
    record = execute._record

    def record_then_interrupt(*args: Any) -> None:
        record(*args)
        raise KeyboardInterrupt  # Ctrl-C once the first run is kept

    monkeypatch.setattr(execute, "_record", record_then_interrupt)
    out = tmp_path / "out"
    result = invoke("sweep", path, "-o", out, "--workers", "1", "-q")
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted; results written to {out}/runs/ (1 finished run kept; rerun the same "
        "command to resume)"
    )
    monkeypatch.setattr(execute, "_record", record)
    again = invoke("sweep", path, "-o", out, "--workers", "1")
    assert again.exit_code == 0 and "3 runs: 1 from an earlier sweep" in again.output


# -- class 4: one reader of a run folder ----------------------------------------------------


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    out = folder / "run"
    result = invoke("run", write(folder, FLEET), "-o", out, "-q", "--no-report")
    assert result.exit_code == 0, result.output
    return out


def _set_time(path: Path, value: float) -> None:
    frame = pd.read_parquet(path)
    frame.loc[0, "time_s"] = value
    frame.to_parquet(path)


DAMAGE: dict[str, tuple[str, Any, str]] = {
    "invalid summary": ("summary.json", lambda p: p.write_text('{"a": '), "not valid JSON"),
    "summary not an object": (
        "summary.json",
        lambda p: p.write_text("[1, 2]\n"),
        "expected a JSON object, got an array",
    ),
    "summary with NaN": ("summary.json", lambda p: p.write_text('{"a": NaN}'), "not valid JSON"),
    "truncated table": (
        "requests.parquet",
        lambda p: p.write_bytes(p.read_bytes()[:300]),
        "not a readable Parquet file",
    ),
    "garbage table": ("events.parquet", lambda p: p.write_text("garbage\n"), "not a readable"),
    "table copied over another": (
        "timeseries.parquet",
        lambda p: shutil.copyfile(p.with_name("events.parquet"), p),
        "not the timeseries table: no column trigger",
    ),
    "NaN time": ("timeseries.parquet", lambda p: _set_time(p, float("nan")), "row 0 holds NaN"),
    "negative time": ("fleet.parquet", lambda p: _set_time(p, -5.0), "row 0 holds -5"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_run_folder_is_named_by_every_reader(
    tmp_path: Path, good_run: Path, case: str
) -> None:
    name, damage, says = DAMAGE[case]
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    damage(run / name)
    html = tmp_path / "report.html"
    line = refused(invoke("report", run, "-o", html), f"{run / name}: ")
    assert says in line, line
    assert not html.exists()
    no_temporaries(tmp_path)
    shown = refused(invoke("alerts", "show", run), f"{run}: ")
    assert f"{run / name}: " in shown and says in shown


# -- class 5: errors that say what was wrong -----------------------------------------------


def test_a_pools_unknown_gpu_names_the_field_and_the_presets(tmp_path: Path) -> None:
    data = with_fleet(pools=[{"name": "a", "count": 2, "hardware": {"gpu": "nope"}}])
    scenario = write(tmp_path, data)
    line = refused(invoke("run", scenario, "-o", tmp_path / "out"), f"{scenario}: ")
    assert "field fleet.pools[0].hardware.gpu: got 'nope': unknown gpu preset" in line
    assert "allowed: a100-40gb" in line


def _parquet_trace(path: Path, **columns: pa.Array) -> Path:
    table = {
        "arrival_s": pa.array([0.0, 1.0, 2.0]),
        "prompt_tokens": pa.array([10, 20, 30], pa.int64()),
        "output_tokens": pa.array([5, 5, 5], pa.int64()),
    }
    pq.write_table(pa.table(table | columns), path)
    return path


def test_a_parquet_trace_with_arrivals_as_text_is_refused(tmp_path: Path) -> None:
    trace = _parquet_trace(tmp_path / "t.parquet", arrival_s=pa.array(["0", "1", "2"]))
    line = refused(invoke("trace", "describe", trace), f"{trace}: field 'arrival_s': ")
    assert "holds text" in line


def test_a_uint64_beyond_int64_is_quoted_as_the_file_holds_it(tmp_path: Path) -> None:
    big = pa.array([10, 2**64 - 1, 30], pa.uint64())
    trace = _parquet_trace(tmp_path / "t.parquet", prompt_tokens=big)
    line = refused(invoke("trace", "describe", trace), f"{trace}: row 1: field 'prompt_tokens'")
    assert line.endswith("got 18446744073709551615"), line


# -- class 6: outputs after a refusal or a kill ---------------------------------------------


@pytest.mark.parametrize(
    ("vary", "says"),
    [("nope.path=1,2", "field nope"), ("allocator.kind=paged,nope", "allocator")],
)
def test_plan_with_a_bad_variant_leaves_no_folder(tmp_path: Path, vary: str, says: str) -> None:
    scenario = write(tmp_path, FLEET)
    out = tmp_path / "out"
    result = invoke(
        "plan", scenario, "--slo", "ttft_p99<=2s", "--replicas", "1..2", "--vary", vary, "-o", out
    )
    assert says in refused(result, f"{scenario}: ")
    assert not out.exists()


def test_plan_says_when_no_count_meets_the_slos(tmp_path: Path) -> None:
    scenario = write(tmp_path, FLEET)
    out = tmp_path / "out"
    result = invoke(
        "plan", scenario, "--slo", "ttft_p99<=1ms", "--replicas", "1..2", "-o", out, "-q",
        "--workers", "1",
    )  # fmt: skip
    assert result.exit_code == 1, (result.output, result.exception)
    said = result.stderr.split("\nno replica count ")[-1]  # wrapped to the terminal
    assert " ".join(said.split()).startswith("up to 2 meets ttft_p99<=1ms for the scenario")
    assert max(len(line) for line in f"no replica count {said}".splitlines()) <= 80
    plan = pd.read_csv(out / "plan.csv")
    assert plan["meets_slos"].tolist() == [False] and plan["replicas"].isna().all()


def test_a_failure_rate_above_one_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("plan", write(tmp_path, FLEET), "--slo", "failure_rate<=5", "-o", out)
    assert result.exit_code == 2
    assert "failure_rate is a share of requests, 0..1; got 5" in result.stderr
    assert not out.exists()


def test_the_report_is_written_with_the_run(tmp_path: Path) -> None:
    """``run`` writes OUT/report.html inside the run's atomic replace; it is the report
    ``fragsim report OUT`` writes (the run named by OUT, not by the temporary folder)."""
    scenario = write(tmp_path, SINGLE)
    out = tmp_path / "out"
    assert invoke("run", scenario, "-o", out, "-q").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "report.html"])
    again = tmp_path / "again.html"
    assert invoke("report", out, "-o", again).exit_code == 0
    assert again.read_bytes() == (out / "report.html").read_bytes()
    no_temporaries(tmp_path)


def test_a_write_killed_in_its_report_keeps_the_previous_run(
    tmp_path: Path, good_run: Path
) -> None:
    """A writer SIGKILLed while it writes the report leaves the previous run whole, its
    report included; the next write removes the dead writer's temporaries."""
    out = tmp_path / "out"
    shutil.copytree(good_run, out)
    (out / "report.html").write_text("the previous report\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code = (
        "import os, signal, sys\n"
        "from sim.results.runfolder import read_result\n"
        "def report(folder):\n"
        "    (folder / 'report.html').write_text('half a rep')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "read_result(sys.argv[1]).write(sys.argv[2], extras=report)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code, str(good_run), str(out)], capture_output=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    from sim.results.runfolder import read_result

    read_result(good_run).write(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in good_run.iterdir())
    no_temporaries(tmp_path)


# -- class 7: smaller ones --------------------------------------------------------------------


def test_the_retention_warning_is_one_warning_line(tmp_path: Path) -> None:
    data = copy.deepcopy(SINGLE) | {"retention": {"kind": "session_ttl", "ttl_s": 5.0}}
    scenario = write(tmp_path, data)
    result = invoke("run", scenario, "-o", tmp_path / "out", "-q", "--no-report")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        f"warning: {scenario}: retention: session_ttl has no effect: the workload has no "
        "session_id (every request frees its KV when it finishes)"
    ]


@pytest.mark.parametrize("command", ["run", "compare", "synth"])
def test_a_23_digit_seed_is_refused(tmp_path: Path, command: str) -> None:
    seed = "12345678901234567890123"
    out = tmp_path / "out"
    if command == "synth":
        result = invoke("trace", "synth", "chat", "-o", out, "--seed", seed)
    else:
        result = invoke(command, write(tmp_path, SINGLE), "-o", out, "--seed", seed)
    assert result.exit_code == 2
    assert "9223372036854775807" in result.stderr
    assert not out.exists()
