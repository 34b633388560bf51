"""`fragsim postmortem LOG_DIR -o OUT/` end to end on the example log: the outputs, the
printed match summary, and refusals (exit 2, one ``error:`` line, nothing written)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.postmortem.log import LogError, load_postmortem_log
from sim.postmortem.matching import TABLE_COLUMNS
from sim.results.compare import COLUMNS

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem"
CF = "seed-postmortem-paged"


NAMES = {"node-a", "node-b", "node-c"}
PRECISION_AT_LEAST = RECALL_AT_LEAST = 0.9
"""The example (a simulated fleet of the same stack with 2.5 % slower GPUs) reproduces
29 of its 30 failures; these bounds leave room for engine changes, not for a replay
that stopped working."""


def test_the_example_is_reproduced_reported_and_named(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--counterfactual", CF]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "baseline",
        "compare.csv",
        "counterfactuals",
        "match.csv",
        "postmortem.json",
        "replay",
        "replicas.csv",
        "report.html",
    ]
    record = json.loads((out / "postmortem.json").read_text())
    assert record["recorded_failures"] == 30 and record["rule"] == "by_request"
    assert record["precision"] >= PRECISION_AT_LEAST and record["recall"] >= RECALL_AT_LEAST
    n_sim, matched = record["simulated_failures"], record["matched"]
    assert record["precision"] == matched / n_sim and record["recall"] == matched / 30
    assert record["router_fallbacks"] == record["router"]["fallbacks"] == 0
    assert (record["log"], record["scenario"]) == ("postmortem", "seed-postmortem")
    match = pd.read_csv(out / "match.csv")
    assert list(match.columns) == list(TABLE_COLUMNS)
    assert int(match["matched"].sum()) == matched
    compare = pd.read_csv(out / "compare.csv")
    extra = ["role", "change", "rank", "verdict"]
    assert list(compare.columns) == [c for c, _ in COLUMNS] + extra
    assert compare["scenario"].tolist() == ["replay", "baseline", CF]
    assert compare["role"].tolist() == ["replay", "baseline", "counterfactual"]
    assert compare["requests"].tolist() == [1800, 1800, 1800]
    assert compare["change"].fillna("").tolist() == ["", "", "allocator best_fit → paged"]
    assert compare["verdict"].iloc[2].startswith("allocator best_fit → paged: saves $")
    assert pd.isna(compare["rank"].iloc[0]) and sorted(compare["rank"].iloc[1:]) == [1, 2]
    # The modelled baseline's agreement with the log and the replay is stated.
    measures = {row["measure"]: row for row in record["agreement"]}
    assert measures["failed requests"]["log"] == 30
    assert measures["failed requests"]["replay"] == n_sim
    assert measures["recall"]["baseline"] == record["baseline"]["recall"]
    assert record["changes"] == {CF: ["allocator best_fit → paged"]}
    # The log's names wherever a user reads a node; the engine's ids kept beside them.
    assert set(match["replica"]) | set(match["simulated_replica"].dropna()) <= NAMES
    replicas = pd.read_csv(out / "replicas.csv")
    assert replicas[["fleet_id", "replica"]].values.tolist() == [
        [0, "node-a"],
        [1, "node-b"],
        [2, "node-c"],
    ]
    for run in (out / "replay", out / "counterfactuals" / CF):
        requests = pd.read_parquet(run / "requests.parquet")
        assert set(requests["replica_name"]) <= NAMES and "replica" in requests.columns
    text = (out / "report.html").read_text()
    assert all(name in text for name in NAMES) and "replica 0" not in text
    assert "precision" in text and "recall" in text and CF in text
    # The terminal: every table line fits 80 columns, nodes by name, the verdict.
    stdout = result.stdout
    assert "failures per node" in stdout and "which fix pays" in stdout
    assert all(name in stdout for name in NAMES)
    assert all(len(line) <= 80 for line in stdout.splitlines() if not line.startswith("wrote"))
    assert "wrote" not in stdout and result.stderr.splitlines()[-1].startswith(f"wrote {out}/")
    # One rank per run, the same in the terminal, compare.csv and the report.
    ranks = dict(zip(compare["scenario"], compare["rank"], strict=True))
    rows = [line.split("│") for line in stdout.splitlines() if line.startswith("│")]
    printed = {c[2].strip(): c[1].strip() for c in rows if len(c) > 3 and c[2].strip() in ranks}
    assert printed == {k: "—" if pd.isna(v) else str(int(v)) for k, v in ranks.items()}
    for name, rank in ranks.items():
        shown = "—" if pd.isna(rank) else str(int(rank))
        assert f"<tr><td>{name}</td><td>{shown}</td>" in text
    # fragsim report reads the folder: the same bytes, to -o or to the folder.
    again = tmp_path / "again.html"
    assert runner.invoke(app, ["report", str(out), "-o", str(again)]).exit_code == 0
    assert again.read_bytes() == (out / "report.html").read_bytes()
    (out / "report.html").unlink()
    reread = runner.invoke(app, ["report", str(out)])
    assert reread.exit_code == 0, reread.output
    assert (out / "report.html").read_bytes() == again.read_bytes()


def test_by_window_as_json(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--no-counterfactuals"]
    args += ["--rule", "by_window", "--tolerance-s", "5", "--format", "json", "--no-report"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["match", "failures per node"]
    measures = {row["measure"]: row["value"] for row in doc["match"]}
    assert measures["rule"] == "by_window (±5 s)" and measures["recorded failures"] == 30
    assert {row["node"] for row in doc["failures per node"]} == NAMES
    assert result.stderr.strip() == f"wrote {out}/ (replay/, match.csv, compare.csv, " + (
        "replicas.csv, postmortem.json)"
    )
    record = json.loads((out / "postmortem.json").read_text())
    assert (record["rule"], record["tolerance_s"]) == ("by_window", 5.0)
    assert record["counterfactuals"] == [] and not (out / "report.html").exists()


def test_quiet_prints_only_where_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--no-counterfactuals", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"wrote {out}/ (replay/, match.csv, compare.csv, replicas.csv, postmortem.json, "
        "report.html)"
    ]


def test_a_postmortem_folder_is_reported_alone(tmp_path: Path) -> None:
    (tmp_path / "pm").mkdir()
    (tmp_path / "pm" / "postmortem.json").write_text("{}")
    result = runner.invoke(app, ["report", str(tmp_path / "pm"), str(tmp_path / "pm")])
    assert result.exit_code == 2 and "reported alone" in result.stderr
    result = runner.invoke(app, ["report", str(tmp_path / "pm")])
    assert result.exit_code == 2
    assert "not a postmortem folder (no match.csv, compare.csv)" in " ".join(result.stderr.split())
    assert not (tmp_path / "pm" / "report.html").exists()


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
    assert lines[5].endswith(",ok\n")
    lines[5] = lines[5].replace(",ok\n", ",sideways\n")
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


def test_the_report_of_the_replay_names_nodes_as_the_log_does(tmp_path: Path) -> None:
    """``fragsim report OUT/replay``: failures, restarts and the worst nodes by the log's
    names (the frames' ``replica_name``), never by the engine's ids."""
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--no-counterfactuals", "-q"]
    assert runner.invoke(app, [*args, "--no-report"]).exit_code == 0
    html = tmp_path / "replay.html"
    result = runner.invoke(app, ["report", str(out / "replay"), "-o", str(html)])
    assert result.exit_code == 0, result.output
    text = html.read_text()
    assert not re.search(r"replica \d", text), re.findall(r".{40}replica \d.{40}", text)[:3]
    assert all(f"replica {name}" in text for name in NAMES)


def test_a_counterfactual_that_changes_two_things_is_flagged(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[2] / "sim" / "scenario" / "data"
    text = (data / f"{CF}.yaml").read_text().replace("name: " + CF, "name: paged-and-runbook")
    assert "autoscaler: {kind: naive}" in text
    cf = tmp_path / "two.yaml"
    cf.write_text(text.replace("autoscaler: {kind: naive}", "autoscaler: {kind: runbook}"))
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--counterfactual", str(cf)]
    result = runner.invoke(app, [*args, "--no-report", "--format", "csv"])
    assert result.exit_code == 0, result.output
    change = "allocator best_fit → paged; autoscaler naive → runbook"
    assert (
        f"note: counterfactual paged-and-runbook changes 2 things against the modelled "
        f"baseline ({change}): its saving is not one policy's"
    ) in result.stderr
    compare = pd.read_csv(out / "compare.csv")
    assert compare["verdict"].iloc[2].startswith(f"2 changes at once ({change}): ")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_postmortem_is_written_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26.3: OUT is committed as one folder. A failure at its last output (the
    report, after every run folder and table is written) leaves an earlier postmortem
    there exactly as it was and no temporary beside it; a folder holding anything else
    is refused before simulating; a rerun replaces the earlier postmortem whole."""
    out = tmp_path / "pm"
    args = ["postmortem", str(EXAMPLE), "-o", str(out), "--no-counterfactuals"]
    assert runner.invoke(app, args).exit_code == 0
    before = _tree(out)
    assert "postmortem.json" in before and "replay/summary.json" in before

    import reports.postmortem
    from traces.errors import TraceError

    def full_disk(pm_dir: Path, report: Path) -> Path:
        raise TraceError(report, "cannot write file (No space left on device)")

    monkeypatch.setattr(reports.postmortem, "write_postmortem_report", full_disk)
    cf_args = [*args[:-1], "--counterfactual", CF]
    failed = runner.invoke(app, cf_args)
    assert failed.exit_code == 2 and "No space left on device" in failed.stderr
    assert str(out / "report.html") in failed.stderr  # OUT named, not the hidden folder
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pm"]
    monkeypatch.undo()

    again = runner.invoke(app, cf_args)
    assert again.exit_code == 0, again.output
    assert (out / "counterfactuals" / CF / "summary.json").is_file()

    for stray in ("notes.txt", "replay/mine.csv"):
        other = tmp_path / "other"
        shutil.copytree(out, other)
        (other / stray).write_text("mine\n")
        refused = runner.invoke(app, ["postmortem", str(EXAMPLE), "-o", str(other)])
        assert refused.exit_code == 2 and "holds other files" in refused.stderr, stray
        assert (other / stray).read_text() == "mine\n"
        shutil.rmtree(other)
