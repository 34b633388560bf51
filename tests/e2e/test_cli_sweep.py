"""`fragsim sweep` and `fragsim plan` end to end: the same sweep on every executor (in
process, a local pool, a Dask cluster on loopback) gives the same bytes; a sweep killed
part-way resumes and runs every scenario exactly once; errors are one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sweeps"
runner = CliRunner()


def sweep_file(tmp_path: Path, duration_s: int = 30, rates: str = "[3.5, 5.0]") -> Path:
    """2 rates x 2 replications of the hand-checkable fleet (4 quick runs)."""
    f = tmp_path / "sweep.yaml"
    f.write_text(
        f"base: {EXAMPLES / 'plan-constant.yaml'}\n"
        "grid:\n"
        f"  workload.synth.arrival.rate_per_s: {rates}\n"
        "  fleet.pools: [[{count: 4}]]\n"
        f"  workload.synth.duration_s: [{duration_s}]\n"
        "replications: 2\n"
    )
    return f


def tree(out: Path) -> dict[str, bytes]:
    """Every file under OUT/runs/ by relative path."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted((out / "runs").rglob("*"))
        if p.is_file()
    }


def fragsim(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_every_executor_gives_the_same_results(tmp_path: Path) -> None:
    from dask.distributed import LocalCluster

    f = sweep_file(tmp_path)
    fragsim("sweep", str(f), "-o", str(tmp_path / "serial"), "--workers", "1", "-q")
    fragsim("sweep", str(f), "-o", str(tmp_path / "pool"), "--workers", "2", "-q")
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        fragsim("sweep", str(f), "-o", str(tmp_path / "dask"), "--scheduler", address, "-q")
    serial = tree(tmp_path / "serial")
    assert len([n for n in serial if n.endswith("sweep_key.json")]) == 4
    for other in ("pool", "dask"):
        assert tree(tmp_path / other) == serial
        for table in ("summary.parquet", "runs.parquet"):
            pd.testing.assert_frame_equal(
                pd.read_parquet(tmp_path / other / table),
                pd.read_parquet(tmp_path / "serial" / table),
            )
    summary = pd.read_csv(tmp_path / "serial" / "summary.csv")
    assert list(summary["workload.synth.arrival.rate_per_s"]) == [3.5, 5.0]
    assert list(summary["replications"]) == [2, 2]
    # 4 replicas serve 4 req/s: 5 req/s overloads them
    assert summary["ttft_p99_s_mean"].iloc[1] > 5 * summary["ttft_p99_s_mean"].iloc[0]
    assert (summary["ttft_p99_s_ci95_low"] <= summary["ttft_p99_s_mean"]).all()


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_runs_each_scenario_once(tmp_path: Path) -> None:
    f = sweep_file(tmp_path, duration_s=600, rates="[3.0, 3.5, 4.5, 5.0]")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sim", "sweep", str(f), "-o", str(out), "-q"]
    proc = subprocess.Popen([*command, "--workers", "1"], env=os.environ | {"COLUMNS": "80"})
    deadline = time.monotonic() + 60
    while not list((out / "runs").glob("*.sweep_key.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {p.name for p in (out / "runs").glob("*.sweep_key.json")}
    assert 1 <= len(done_before) < 8
    subprocess.run([*command, "--workers", "2"], check=True)
    fragsim("sweep", str(f), "-o", str(tmp_path / "whole"), "--workers", "1", "-q")
    assert tree(out) == tree(tmp_path / "whole")  # each run once, no leftovers
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 8 and runs["id"].is_unique
    pd.testing.assert_frame_equal(runs, pd.read_parquet(tmp_path / "whole" / "runs.parquet"))
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_bad_override_is_one_error_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        f"base: {EXAMPLES / 'plan-constant.yaml'}\ngrid: {{allocator.kind: [paged, nope]}}\n"
    )
    result = runner.invoke(app, ["sweep", str(f), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {f}: override allocator.kind=nope: field allocator")
    assert not (tmp_path / "out").exists()


def test_plan_prints_the_fewest_replicas(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    text = fragsim(
        "plan", str(EXAMPLES / "plan-constant.yaml"), "--slo", "ttft_p99<=2s",
        "--slo", "failure_rate<=0.001", "--replicas", "1..16", "-o", str(out), "--workers", "1",
    )  # fmt: skip
    assert re.search(r"│ the scenario +│ +4 │", text), text
    plan = pd.read_csv(out / "plan.csv")
    assert list(plan["replicas"]) == [4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft<=2s"], "unknown metric 'ttft'"),
        (["--slo", "ttft_p99<=2s", "--replicas", "8..2"], "expected 1 <= LO <= HI"),
        (["--slo", "ttft_p99<=2s", "--vary", "allocator"], "expected PATH=V1,V2"),
    ],
)
def test_plan_option_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(
        app, ["plan", str(EXAMPLES / "plan-constant.yaml"), "-o", str(tmp_path / "o"), *args]
    )
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert message in result.output
