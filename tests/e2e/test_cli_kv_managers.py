"""A hybrid model (Gemma-3-27B, the built-in ``hybrid-kv-managers``, shortened) through
``fragsim run``, ``compare``, ``report``, ``plan`` and ``postmortem`` under each KV
manager: the commands work on them unchanged, and the waste by cause reaches the
summary and the timeseries."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.allocators import kv_manager_kinds
from typer.testing import CliRunner

from sim.cli import app
from sim.scenario.builtin import builtin_data

runner = CliRunner()
KINDS = kv_manager_kinds()
EXAMPLE_LOG = Path(__file__).parents[2] / "examples" / "postmortem"


def _scenario(tmp_path: Path, kind: str) -> Path:
    data = builtin_data("hybrid-kv-managers")
    data["name"] = f"hk-{kind}"
    data["allocator"] = {"kind": kind}
    data["workload"] = {**data["workload"], "synth": {"duration_s": 300}}  # type: ignore[dict-item]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
def test_a_hybrid_model_runs_compares_and_reports_under_every_manager(tmp_path: Path) -> None:
    runs = []
    for kind in KINDS:
        out = tmp_path / f"run-{kind}"
        printed = _ok(["run", str(_scenario(tmp_path, kind)), "-o", str(out)])
        assert "KV manager: padding" in printed
        summary = json.loads((out / "summary.json").read_text())
        assert summary["allocator"] == kind
        assert summary["fleet"]["pools"][0]["kv_layout"]  # how it laid the memory out
        waste = summary["memory"]["kv_manager_waste"]
        assert set(waste) == {
            "padding",
            "window_reserve",
            "reserved_ahead",
            "partial_blocks",
            "stranded_pool",
        }
        ts = pd.read_parquet(out / "timeseries.parquet")
        periodic = ts[ts["trigger"] == "periodic"]
        assert periodic["share_padding"].notna().all()
        assert (periodic["share_stranded_pool"] > 0).any() == (kind != "hybrid_kv")
        runs.append(str(out))
    # Gemma-3-27B's 52 sliding layers in groups of 10: vLLM pads 8 layers
    hybrid = json.loads((tmp_path / "run-hybrid_kv" / "summary.json").read_text())
    assert hybrid["memory"]["kv_manager_waste"]["padding"] > 0
    assert hybrid["memory"]["largest_contiguous_free_block_ratio"]["min"] == 1.0
    _ok(["compare", *runs, "-o", str(tmp_path / "cmp")])
    assert (tmp_path / "cmp" / "compare.csv").exists()
    _ok(["report", *runs, "-o", str(tmp_path / "report.html")])
    assert (tmp_path / "report.html").stat().st_size > 0


@pytest.mark.slow
def test_plan_and_postmortem_take_a_hybrid_model(tmp_path: Path) -> None:
    base = _scenario(tmp_path, "hybrid_kv")
    _ok(
        [
            "plan",
            str(base),
            "--slo",
            "failure_rate<=0.5",
            "--replicas",
            "1..2",
            "--vary",
            "allocator.kind=hybrid_kv,split_pools",
            "--workers",
            "1",
            "-q",
            "-o",
            str(tmp_path / "plan"),
        ]
    )
    assert any((tmp_path / "plan").iterdir())
    _ok(
        [
            "postmortem",
            str(EXAMPLE_LOG),
            "--scenario",
            str(base),
            "--counterfactual",
            str(_scenario(tmp_path, "window_pools")),
            "--no-report",
            "-q",
            "-o",
            str(tmp_path / "pm"),
        ]
    )
    post = json.loads((tmp_path / "pm" / "postmortem.json").read_text())
    assert post
