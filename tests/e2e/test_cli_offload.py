"""KV offload tiers end to end through the command line, on the built-in
``seed-docs-offload-host`` shortened to ten minutes: ``run`` (the table's tier rows,
the summary's section, the timeseries' columns), ``compare`` against the GPU-only
baseline, ``plan`` varying the tier's capacity, ``report`` (the tier figure, and no
such figure for a run without tiers), ``alerts show`` and ``export openmetrics`` (the
tier families, backfilled by promtool where it is installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.prometheus import PROMTOOL, promtool
from typer.testing import CliRunner

from sim.cli import app
from sim.scenario.builtin import builtin_data

runner = CliRunner()


def _scenario(tmp_path: Path, name: str) -> Path:
    data = builtin_data(name)
    data["workload"] = {
        **data["workload"],  # type: ignore[dict-item]
        "synth": {**data["workload"]["synth"], "duration_s": 600},  # type: ignore[index]
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
def test_a_host_tier_runs_compares_plans_reports_and_exports(tmp_path: Path) -> None:
    host = _scenario(tmp_path, "seed-docs-offload-host")
    gpu = _scenario(tmp_path, "seed-docs-offload-gpu-only")
    out = tmp_path / "host"
    printed = _ok(["run", str(host), "-o", str(out)])
    assert "offload host (best_fit): hits" in printed
    summary = json.loads((out / "summary.json").read_text())
    (tier,) = summary["offload"]["tiers"]
    assert tier["kind"] == "host" and tier["hits"] > 0 and tier["bytes_up"] > 0
    ts = pd.read_parquet(out / "timeseries.parquet")
    assert ts["offload_host_hits_total"].max() > 0
    assert ts["offload_host_largest_contiguous_free_block_ratio"].notna().any()

    base = tmp_path / "gpu"
    _ok(["run", str(gpu), "-o", str(base), "-q"])
    assert "offload" not in json.loads((base / "summary.json").read_text())
    table = _ok(["compare", str(base), str(out), "-o", str(tmp_path / "cmp"), "-f", "csv"])
    assert "seed-docs-offload-host" in table

    report = tmp_path / "report.html"
    _ok(["report", str(out), "-o", str(report)])
    assert "KV offload tiers" in report.read_text()
    plain = tmp_path / "plain.html"
    _ok(["report", str(base), "-o", str(plain)])
    assert "KV offload tiers" not in plain.read_text()

    _ok(["alerts", "show", str(out)])
    metrics = tmp_path / "run.om"
    _ok(["export", "openmetrics", str(out), "-o", str(metrics)])
    text = metrics.read_text()
    assert "# TYPE fragsim_offload_host_used_bytes gauge" in text
    assert "fragsim_offload_host_hits_total{" in text
    if PROMTOOL is not None:
        made = promtool(
            "tsdb", "create-blocks-from", "openmetrics", str(metrics), str(tmp_path / "tsdb")
        )
        assert made.returncode == 0, made.stdout + made.stderr


@pytest.mark.slow
def test_plan_varies_a_tier_capacity(tmp_path: Path) -> None:
    host = _scenario(tmp_path, "seed-docs-offload-host")
    _ok(
        [
            "plan",
            str(host),
            "--slo",
            "failure_rate<=0.5",
            "--replicas",
            "1..2",
            "--vary",
            "kv_offload.tiers.0.capacity_gib=32,256",
            "--workers",
            "1",
            "-q",
            "-f",
            "csv",
            "-o",
            str(tmp_path / "plan"),
        ]
    )
    plan = pd.read_csv(tmp_path / "plan" / "plan.csv")
    assert len(plan) == 2, plan
