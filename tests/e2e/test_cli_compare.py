"""`fragsim compare` answers "which fix pays": scenarios and finished run folders (read,
never re-run) against a baseline (the first, or --baseline), deltas in compare.csv, a
table whose rows are the runs and that fits 80 columns, one verdict per alternative,
every output format, progress and the output path on stderr; bad arguments are one
error line and exit 2."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.fleet import fleet_data
from typer.testing import CliRunner

from sim.cli import app
from sim.results.compare import DELTA_METRICS

SYNTH = {
    "preset": "bimodal",
    "synth": {"duration_s": 300.0, "arrival": {"kind": "poisson", "rate_per_s": 0.5}},
}
LONG = "best-fit-with-a-rather-long-scenario-name"


def scenario(tmp_path: Path, name: str, allocator: str, *, fleet: bool = True) -> Path:
    data = fleet_data(count=2, router="least_outstanding", autoscaler={"kind": "naive"})
    data["workload"] = SYNTH
    data["hardware"] = {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768}
    data["allocator"] = {"kind": allocator}
    data["latency"] = {"kind": "roofline"}
    data["scheduler"] = {"preemption": "fail", "on_admission_failure": "reject"}
    data["name"] = name
    if not fleet:
        del data["fleet"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fragsim(*args: str) -> tuple[str, str]:
    """(stdout, stderr) of a command that must succeed, at 80 columns."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def fails(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT of one compare over three fleet scenarios (best fit first, then paged)."""
    tmp = tmp_path_factory.mktemp("compare")
    files = [scenario(tmp, LONG, "best_fit"), scenario(tmp, "paged", "paged")]
    files.append(scenario(tmp, "first-fit", "first_fit"))
    out = tmp / "out"
    stdout, stderr = fragsim("compare", *map(str, files), "-o", str(out), "--no-report")
    assert "compare: run 2 of 3: paged" in stderr and f"wrote {out}/" in stderr
    assert all(len(line) <= 80 for line in stdout.splitlines()), stdout
    assert stdout.count(LONG) >= 2  # the run column repeats, never cut
    assert "ranked by $ saved" in stdout and "1. paged saves $" in stdout
    return out


def test_compare_csv_has_the_deltas_the_rank_and_a_verdict(runs: Path) -> None:
    table = pd.read_csv(runs / "compare.csv")
    assert table["run"].iloc[0] == LONG and set(table["run"]) == {LONG, "paged", "first-fit"}
    for metric in DELTA_METRICS:
        assert (table[f"{metric}_delta"].iloc[0], table[f"{metric}_delta_pct"].iloc[0]) == (0, 0)
    assert sorted(table["rank"]) == [1, 2, 3] and set(table["baseline"]) == {LONG}
    paged = table.set_index("run").loc["paged"]
    assert paged["cost_saved_usd"] == pytest.approx(-paged["cost_usd_delta"])
    assert paged["verdict"].startswith("paged ") and paged["verdict"].endswith(f" vs {LONG}")
    assert (
        pd.read_parquet(runs / "compare.parquet")["verdict"].tolist() == table["verdict"].tolist()
    )


def test_run_folders_are_tabulated_without_running_them_again(runs: Path, tmp_path: Path) -> None:
    folders = [runs / "paged", runs / LONG]
    before = {p: (p / "summary.json").stat().st_mtime_ns for p in folders}
    out = tmp_path / "again"
    _, stderr = fragsim(
        "compare", *map(str, folders), "-o", str(out), "--baseline", LONG, "--no-report"
    )
    assert "compare: run" not in stderr and f"wrote {out}/ (compare.csv" in stderr
    assert {p: (p / "summary.json").stat().st_mtime_ns for p in folders} == before
    again = pd.read_csv(out / "compare.csv")
    first = pd.read_csv(runs / "compare.csv").set_index("run")
    assert again["run"].tolist()[0] == LONG  # the named baseline first
    assert again.set_index("run").loc["paged", "cost_usd_delta"] == pytest.approx(
        first.loc["paged", "cost_usd_delta"]
    )


def test_folders_and_scenarios_mix_and_a_single_replica_has_no_price(
    runs: Path, tmp_path: Path
) -> None:
    single = scenario(tmp_path, "single", "paged", fleet=False)
    out = tmp_path / "mixed"
    stdout, _ = fragsim("compare", str(runs / "paged"), str(single), "-o", str(out))
    table = pd.read_csv(out / "compare.csv").set_index("run")
    assert pd.isna(table.loc["single", "cost_usd"]) and pd.isna(
        table.loc["single", "cost_usd_delta"]
    )
    assert "—" in stdout  # missing values shown as a dash
    assert (out / "single" / "summary.json").is_file() and not (out / "paged").exists()
    assert (out / "report.html").read_text().count("rank 2: ") == 1


@pytest.mark.parametrize("fmt", ["csv", "json", "markdown"])
def test_formats(runs: Path, tmp_path: Path, fmt: str) -> None:
    folders = [str(runs / LONG), str(runs / "paged")]
    stdout, stderr = fragsim("compare", *folders, "-o", str(tmp_path), "--no-report", "-f", fmt)
    assert "wrote" in stderr and "wrote" not in stdout
    if fmt == "csv":
        assert stdout.splitlines()[0].startswith("run,scenario,requests,")
    elif fmt == "json":
        rows = json.loads(stdout)
        assert rows[0]["run"] == LONG and "verdict" in rows[1]
    else:
        assert f"### against {LONG}" in stdout and "| paged |" in stdout


def test_bad_arguments_are_one_error_line(runs: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    paged, o = str(runs / "paged"), str(tmp_path / "o")
    assert "a folder but not a run" in fails("compare", paged, str(empty), "-o", o)
    line = fails("compare", paged, paged, "-o", o, "--baseline", "x")
    assert "--baseline x: no run of that name (runs: paged, paged-2)" in line
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "summary.json").write_text((runs / "paged" / "summary.json").read_text())
    assert "--no-report" in fails("compare", paged, str(partial), "-o", o)
    (partial / "summary.json").write_text('{"scenario": "x"}')
    line = fails("compare", paged, str(partial), "-o", o, "--no-report")
    assert "not a fragsim summary" in line
    line = fails("compare", paged, "-o", o)
    assert line.startswith(f"error: compare: got one run ({paged}); give two or more")
    assert not (tmp_path / "o").exists()  # nothing written


def test_runs_of_different_spans_are_compared_with_a_warning(runs: Path, tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.mkdir()
    summary = json.loads((runs / "paged" / "summary.json").read_text())
    summary["span_s"] = summary["span_s"] / 2
    (short / "summary.json").write_text(json.dumps(summary))
    _, stderr = fragsim(
        "compare", str(runs / "paged"), str(short), "-o", str(tmp_path / "o"), "--no-report"
    )
    assert "warning: the runs cover different spans (paged " in stderr
    _, stderr = fragsim(
        "compare", str(runs / "paged"), str(runs / LONG), "-o", str(tmp_path / "o"), "--no-report"
    )
    assert "warning" not in stderr


def test_runs_in_folders_of_one_name_have_sections_of_their_own(runs: Path, tmp_path: Path) -> None:
    """Two runs of one scenario in folders of one name (``a/run``, ``b/run``): the
    report's sections are named as the table's rows, each once."""
    for parent in ("a", "b"):
        shutil.copytree(runs / "paged", tmp_path / parent / "run")
    out = tmp_path / "out"
    fragsim("compare", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"), "-o", str(out))
    assert pd.read_csv(out / "compare.csv")["run"].tolist() == ["run", "run-2"]
    html = (out / "report.html").read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", html)
    sections = [re.sub(r' <span class="run-folder">.*?</span>', "", h) for h in headings]
    assert sections == ["comparison", "run", "run-2"], sections
    assert headings[1:] == [  # each headed by its rank, the table's
        f'{name} <span class="run-folder">rank {rank} of 2</span>'
        for name, rank in zip(
            ["run", "run-2"], pd.read_csv(out / "compare.csv")["rank"], strict=True
        )
    ]
    assert re.findall(r"<h3>(.*?): alerts</h3>", html) == ["run", "run-2"]


def test_a_report_names_runs_in_folders_of_one_name_by_their_parents(tmp_path: Path) -> None:
    from reports.html import run_names

    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert run_names([a, b, tmp_path / "c"]) == ["a/run", "b/run", "c"]
    assert run_names([a, a]) == ["run", "run (2)"]
