"""A disaggregated fleet end to end from the command line: ``fragsim run`` writes the
per-request hand-off columns, the summary's ``fleet.disagg`` and a report that draws
the two roles apart; ``fragsim compare`` sets it against the colocated fleet; ``fragsim
plan`` varies the prefill:decode split like any field; the run's table shows the
transfers and each role's memory; ``fragsim alerts`` (show, the exported rules and their
promtool tests) and ``fragsim export openmetrics`` label each series and alert with its
pool; a bad P/D block is one line naming the field."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from support.prometheus import PROMTOOL, promtool
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


def test_run_prints_the_transfers_and_each_roles_memory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(_scenario(tmp_path, "2p2d")), "-o", str(out), "--no-report"]
    table = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "P/D: KV transfers started" in table.stdout and "P/D decode: replicas" in table.stdout
    csv = CliRunner().invoke(app, [*args[:3], str(tmp_path / "csv"), "--no-report", "-f", "csv"])
    assert csv.exit_code == 0, csv.output
    rows = dict(line.split(",", 1) for line in csv.stdout.splitlines()[1:] if "," in line)
    disagg = json.loads((out / "summary.json").read_text())["fleet"]["disagg"]
    assert int(rows["P/D: KV transfers started"]) == disagg["transfers"]["started"]
    assert int(rows["P/D / landed"]) == disagg["transfers"]["landed"]
    for role in ("prefill", "decode"):
        failures = int(rows[f"P/D {role} / allocation failures"])
        assert failures == disagg[role]["allocation_failures"]
    assert disagg["decode"]["allocation_failures"] > 0 == disagg["prefill"]["allocation_failures"]


def test_alerts_name_the_pool_they_fire_in_from_show_to_promtool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    scenario = str(_scenario(tmp_path, "2p2d"))
    assert CliRunner().invoke(app, ["run", scenario, "-o", str(out), "--no-report"]).exit_code == 0
    shown = CliRunner().invoke(app, ["alerts", "show", str(out), "-f", "csv"])
    assert shown.exit_code == 0, shown.output
    table = pd.read_csv(io.StringIO(shown.stdout))
    failure = table.set_index("alert").loc["fragmentation_driven_allocation_failure"]
    assert failure["firings"] > 0 and str(failure["replicas_by_pool"]).startswith("decode ")
    log = tmp_path / "log.csv"
    assert CliRunner().invoke(app, ["alerts", "show", str(out), "-o", str(log)]).exit_code == 0
    transitions = pd.read_csv(log)
    assert set(transitions["pool"]) == {"decode"}
    assert (transitions["replica"] >= 2).all()  # replicas 2 and 3 decode
    rules, tests = tmp_path / "rules.yml", tmp_path / "tests.yml"
    args = ["alerts", "export", "-o", str(rules), "--tests", str(tests), "--run", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert "sum by (replica, pool)" in rules.read_text()
    expected = [
        alert["exp_labels"]
        for test in yaml.safe_load(tests.read_text())["tests"]
        for check in test["alert_rule_test"]
        for alert in check["exp_alerts"]
    ]
    assert expected and all(labels["pool"] == "decode" for labels in expected)
    if PROMTOOL is not None:
        checked = promtool("test", "rules", str(tests))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    series = tmp_path / "series.txt"
    assert (
        CliRunner().invoke(app, ["export", "openmetrics", str(out), "-o", str(series)]).exit_code
        == 0
    )
    alerts = [line for line in series.read_text().splitlines() if line.startswith("ALERTS{")]
    assert alerts and all('pool="decode"' in line for line in alerts)
