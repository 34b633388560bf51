"""The fleet from the command line: `fragsim run` on a fleet scenario writes the fleet's
tables and a report and can write again to the same folder; `fragsim compare` prints one
table over a fleet and a single replica and writes it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml
from support.fleet import fleet_data
from typer.testing import CliRunner

from sim.cli import app

SYNTH = {
    "preset": "bimodal",
    "synth": {"duration_s": 600.0, "arrival": {"kind": "poisson", "rate_per_s": 0.5}},
}


def _fleet_file(tmp_path: Path) -> Path:
    data = fleet_data(count=2, router="least_outstanding", autoscaler={"kind": "naive"})
    data["workload"] = SYNTH
    data["hardware"] = {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768}
    data["allocator"] = {"kind": "best_fit"}
    data["latency"] = {"kind": "roofline"}
    data["name"] = "cli-fleet"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_run_writes_the_fleet_tables_and_a_report_and_writes_again(tmp_path: Path) -> None:
    scenario = _fleet_file(tmp_path)
    out = tmp_path / "out"
    for _ in range(2):  # a fleet run's folder is an earlier run: replaced whole
        result = CliRunner().invoke(app, ["run", str(scenario), "-o", str(out)])
        assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "alerts.parquet",
            "events.parquet",
            "fleet.parquet",
            "report.html",
            "requests.parquet",
            "summary.json",
            "timeseries.parquet",
        ]
    )
    assert "fleet.parquet" in result.output and "replica-hours" in result.output
    requests = pd.read_parquet(out / "requests.parquet")
    assert {"first_replica", "route", "diagnosis"} <= set(requests.columns)
    assert set(requests["replica"]) <= {0, 1, 2, 3, 4, 5, 6, 7, -1}


def test_compare_prints_and_writes_one_table(tmp_path: Path) -> None:
    scenario = _fleet_file(tmp_path)
    single = yaml.safe_load(scenario.read_text())
    del single["fleet"]
    single["name"] = "cli-single"
    single_path = tmp_path / "single.yaml"
    single_path.write_text(yaml.safe_dump(single))
    out = tmp_path / "cmp"
    result = CliRunner().invoke(
        app, ["compare", str(scenario), str(single_path), "-o", str(out), "--no-report"]
    )
    assert result.exit_code == 0, result.output
    assert "avoidable" in result.output and "replica-h" in result.output
    assert "cli-single adds" in result.output or "cli-single avoids" in result.output
    table = pd.read_csv(out / "compare.csv")
    assert list(table["scenario"]) == ["cli-fleet", "cli-single"]
    assert table.loc[1, "replicas_peak"] == 1 and pd.isna(table.loc[1, "cost_usd"])
    assert table.loc[0, "replica_hours"] > 0 and table.loc[0, "cost_usd"] > 0
    assert (out / "cli-fleet" / "fleet.parquet").is_file()
