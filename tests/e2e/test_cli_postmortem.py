"""`fragsim postmortem LOG_DIR -o OUT/` end to end on the example log: the outputs, the
printed match summary, and refusals (exit 2, one ``error:`` line, nothing written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.fleet.compare import COLUMNS
from sim.fleet.matching import TABLE_COLUMNS
from sim.fleet.postmortem_log import LogError, load_postmortem_log

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem"
CF = "seed-postmortem-paged"


def test_postmortem_writes_the_replay_the_match_and_the_comparison(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    result = runner.invoke(
        app, ["postmortem", str(EXAMPLE), "-o", str(out), "--counterfactual", CF]
    )
    assert result.exit_code == 0, result.output
    assert "recorded failures reproduced" in result.output and "precision" in result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.csv",
        "counterfactuals",
        "match.csv",
        "postmortem.json",
        "replay",
    ]
    assert (out / "replay" / "summary.json").is_file()
    assert (out / "counterfactuals" / CF / "summary.json").is_file()
    record = json.loads((out / "postmortem.json").read_text())
    assert record["recorded_failures"] == 10 and record["rule"] == "by_request"
    n_sim, matched = record["simulated_failures"], record["matched"]
    assert record["precision"] == (matched / n_sim if n_sim else None)
    assert record["recall"] == matched / 10
    assert record["router_fallbacks"] == record["router"]["fallbacks"]
    match = pd.read_csv(out / "match.csv")
    assert list(match.columns) == list(TABLE_COLUMNS)
    assert int(match["matched"].sum()) == matched
    compare = pd.read_csv(out / "compare.csv")
    assert list(compare.columns) == [c for c, _ in COLUMNS]
    assert compare["scenario"].tolist() == ["replay", CF]
    assert compare["requests"].tolist() == [2000, 2000]


def test_by_window_and_quiet(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--counterfactual", CF]
    result = runner.invoke(app, [*args, "--rule", "by_window", "--tolerance-s", "5", "-q"])
    assert result.exit_code == 0, result.output
    assert result.output == ""
    record = json.loads((out / "postmortem.json").read_text())
    assert (record["rule"], record["tolerance_s"]) == ("by_window", 5.0)


def test_a_missing_log_dir_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    result = runner.invoke(app, ["postmortem", str(tmp_path / "nope"), "-o", str(out)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a directory" in lines[0]
    assert not out.exists()


def test_a_bad_log_line_is_the_loaders_message(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    shutil.copytree(EXAMPLE, log_dir)
    lines = (log_dir / "requests.csv").read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(",ok,", ",sideways,")
    (log_dir / "requests.csv").write_text("".join(lines))
    with pytest.raises(LogError) as info:
        load_postmortem_log(log_dir)
    expected = str(info.value)
    assert "line 6" in expected
    out = tmp_path / "pm"
    result = runner.invoke(app, ["postmortem", str(log_dir), "-o", str(out)])
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == " ".join(f"error: {expected}".split())
    assert not out.exists()


def test_an_unknown_counterfactual_is_refused_before_simulating(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    result = runner.invoke(
        app, ["postmortem", str(EXAMPLE), "-o", str(out), "--counterfactual", "no-such-scenario"]
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "no-such-scenario" in result.output
    assert not out.exists()
