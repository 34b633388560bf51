"""A disaggregated fleet end to end from the command line: ``fragsim run`` writes the
per-request hand-off columns, the summary's ``fleet.disagg`` and a report that draws
the two roles apart; ``fragsim compare`` sets it against the colocated fleet; ``fragsim
plan`` varies the prefill:decode split like any field; ``fragsim export openmetrics``
labels each series with its pool; a bad P/D block is one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.scenario.builtin import builtin_data, builtin_names

SHORT_S = 900.0


def _scenario(tmp_path: Path, name: str, **fleet: Any) -> Path:
    data = builtin_data(f"seed-bimodal-disagg-{name}")
    data["workload"]["synth"]["duration_s"] = SHORT_S  # type: ignore[index]
    data["fleet"] = {**data["fleet"], **fleet}  # type: ignore[dict-item]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_disagg_scenarios_are_built_in() -> None:
    assert {
        "seed-bimodal-disagg-colocated",
        "seed-bimodal-disagg-1p3d",
        "seed-bimodal-disagg-2p2d",
    } <= set(builtin_names())
    result = CliRunner().invoke(app, ["scenarios"])
    assert result.exit_code == 0 and "seed-bimodal-disagg-1p3d" in result.output


def test_run_writes_hand_offs_and_a_report_of_both_roles(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(_scenario(tmp_path, "1p3d")), "-o", str(out)])
    assert result.exit_code == 0, result.output
    req = pd.read_parquet(out / "requests.parquet")
    ok = req[req["status"] == "ok"]
    assert len(ok) and set(ok["prefill_replica"]) == {0} and set(ok["replica"]) <= {1, 2, 3}
    assert (ok["decode_replica"] == ok["replica"]).all() and (ok["transfer_s"] > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    disagg = summary["fleet"]["disagg"]
    assert disagg["transfers"]["started"] >= len(ok)
    assert disagg["prefill"]["replicas"] == [0] and disagg["decode"]["replicas"] == [1, 2, 3]
    assert [p["role"] for p in summary["fleet"]["pools"]] == ["prefill", "decode"]
    html = (out / "report.html").read_text()
    assert "prefill vs decode replicas" in html and "KV transfers started / landed" in html


def test_compare_sets_the_split_fleets_against_the_colocated_one(tmp_path: Path) -> None:
    runs = [str(_scenario(tmp_path, n)) for n in ("colocated", "1p3d", "2p2d")]
    out = tmp_path / "cmp"
    result = CliRunner().invoke(app, ["compare", *runs, "-o", str(out), "--no-report", "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "compare.csv")
    runs_named = set(table.iloc[:, 0].astype(str))
    assert {f"seed-bimodal-disagg-{n}" for n in ("colocated", "1p3d", "2p2d")} <= runs_named


def test_plan_varies_the_decode_pool_like_any_field(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "1p3d")
    out = tmp_path / "plan"
    args = ["plan", str(scenario), "-o", str(out), "--slo", "failure_rate<=0.5"]
    args += ["--replicas", "1..2", "--vary", "fleet.pools.1.count=1,2", "--workers", "1", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def test_export_labels_each_series_with_its_pool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    scenario = str(_scenario(tmp_path, "2p2d"))
    assert CliRunner().invoke(app, ["run", scenario, "-o", str(out), "--no-report"]).exit_code == 0
    text_path = tmp_path / "series.txt"
    result = CliRunner().invoke(app, ["export", "openmetrics", str(out), "-o", str(text_path)])
    assert result.exit_code == 0, result.output
    text = text_path.read_text()
    assert 'replica="0",pool="prefill"' in text and 'replica="3",pool="decode"' in text


def test_a_bad_kv_link_is_one_line_naming_the_field(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "1p3d", kv_transfer={"bandwidth_gbps": -5})
    result = CliRunner().invoke(app, ["run", str(scenario), "-o", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert "fleet.kv_transfer.bandwidth_gbps" in result.output
    assert not (tmp_path / "o").exists()
