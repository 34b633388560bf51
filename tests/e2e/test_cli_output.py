"""What the ``fragsim`` command prints, and how fast it gets there.

Contracts checked: ``import sim.cli``, ``--help``, usage errors and the light commands
import no pandas, numpy, pyarrow, scipy, plotly, torch nor the engine (commands load on
demand; their listing is their own help's first paragraph); every table command takes
``--format`` and prints csv/json that parse, and tables that fit 80 columns without a
cell cut short; stdout carries the answer and stderr the progress and the output path,
which is printed even with ``--quiet --no-report``; progress lines come on stderr when
it is not a terminal.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from sim.cli import COMMANDS, app, load_command

runner = CliRunner()

HEAVY = ("pandas", "numpy", "pyarrow", "scipy", "plotly", "torch", "sim.runner", "sim.fleet")

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 60}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
}


def fragsim(*args: str, env: dict[str, str] | None = None) -> Result:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", **(env or {})})
    assert result.exit_code == 0, result.output
    return result


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_cli_imports_nothing_heavy() -> None:
    out = python(f"import sys, sim.cli\nprint([m for m in {HEAVY!r} if m in sys.modules])")
    assert out.strip() == "[]"


def test_help_errors_and_light_commands_import_nothing_heavy(tmp_path: Path) -> None:
    """One process runs them in turn and names the first that pulled a heavy module:
    every command's front is light (its body loads only when it runs)."""
    commands = [
        ["--help"],
        *([name, "--help"] for name in COMMANDS),
        ["trace", "describe", "--help"],
        ["alerts", "show", "--help"],
        ["export", "openmetrics", "--help"],
        ["scenarios"],
        ["hardware"],
        ["allocators", "-f", "csv"],
        ["run", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "out")],
        ["run", "x.yaml", "-o", str(tmp_path / "out"), "--mode", "slow"],
        ["compare", "x.yaml", "-o", str(tmp_path / "out")],
        ["nope"],
    ]
    code = (
        "import sys\n"
        "from sim.cli import app\n"
        f"for args in {commands!r}:\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"    heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "    if heavy:\n"
        "        print('HEAVY', args, heavy)\n"
        "        break\n"
    )
    out = python(code)
    assert "HEAVY" not in out, out.splitlines()[-1]
    assert "seed-postmortem" in out and "a100-80gb" in out  # the commands did print


def test_option_defaults_copied_for_a_light_start_are_the_engines() -> None:
    from sim.cli import alert_times as alerts
    from sim.telemetry import alerts as engine

    assert alerts.DEFAULT_SCRAPE_INTERVAL_S == engine.DEFAULT_SCRAPE_INTERVAL_S
    assert alerts.DEFAULT_TREND_WINDOW_S == engine.DEFAULT_TREND_WINDOW_S
    from sim.scenario.fleet import MIN_SCRAPE_INTERVAL_S

    assert alerts.MIN_SCRAPE_INTERVAL_S == MIN_SCRAPE_INTERVAL_S


def test_every_command_is_listed_by_its_own_summary() -> None:
    for name, lazy in COMMANDS.items():
        command = load_command(name)
        assert command.name == name
        first = (command.help or "").split("\n\n")[0]
        assert " ".join(first.split()) == lazy.summary, name
    listing = fragsim("--help").stdout
    for name in (*COMMANDS, "version"):
        assert f" {name} " in listing, name


def test_a_missing_scenario_file_fails_as_the_loader_says(tmp_path: Path) -> None:
    from sim.scenario.schema import ScenarioError, load_scenario

    for name in (str(tmp_path / "nope.yaml"), "no-such-builtin"):
        result = runner.invoke(app, ["run", name, "-o", str(tmp_path / "out")])
        assert result.exit_code == 2
        with pytest.raises(ScenarioError) as caught:
            load_scenario(name)
        assert result.stderr.strip() == f"error: {caught.value}"


@pytest.mark.parametrize(
    "args",
    [["scenarios"], ["hardware"], ["allocators"], ["trace", "presets"]],
)
def test_table_commands_print_every_format(args: list[str]) -> None:
    table = fragsim(*args).stdout
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= 80
    data = json.loads(fragsim(*args, "--format", "json").stdout)
    assert data
    text = fragsim(*args, "-f", "csv").stdout
    first = text.splitlines()[1] if text.startswith("# ") else text.splitlines()[0]
    assert len(next(csv.reader([first]))) >= 2
    markdown = fragsim(*args, "-f", "markdown").stdout
    assert "|---" in markdown


def test_a_bad_format_is_one_error_line() -> None:
    result = runner.invoke(app, ["scenarios", "-f", "xml"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: fragsim scenarios: ")
    assert "'xml'" in lines[0] and "markdown" in lines[0]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("output") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY, sort_keys=False))
    return path


def test_quiet_run_still_says_where_it_wrote(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = fragsim("run", str(scenario), "-o", str(out), "-q", "--no-report")
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"wrote {out}/ (requests.parquet, timeseries.parquet, events.parquet, summary.json)"
    ]


def test_run_prints_its_summary_in_each_format(scenario: Path, tmp_path: Path) -> None:
    result = fragsim("run", str(scenario), "-o", str(tmp_path / "a"), "--no-report")
    assert "tiny — allocator best_fit" in result.stdout and "ttft p99 (s)" in result.stdout
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert f"wrote {tmp_path / 'a'}/" in result.stderr and "wrote" not in result.stdout
    args = ("run", str(scenario), "--no-report", "-f")
    rows = list(csv.reader(io.StringIO(fragsim(*args, "csv", "-o", str(tmp_path / "b")).stdout)))
    assert rows[0] == ["metric", "value"]
    values = dict(rows[1:])
    assert values["requests"] == "60" and float(values["ttft p99 (s)"]) > 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert float(values["ttft p99 (s)"]) == summary["latency_s"]["ttft"]["p99"]
    records = json.loads(fragsim(*args, "json", "-o", str(tmp_path / "c")).stdout)
    assert {"metric": "requests", "value": 60} in records


def test_progress_lines_on_stderr_when_it_is_not_a_terminal(scenario: Path, tmp_path: Path) -> None:
    env = {"FRAGSIM_PROGRESS_INTERVAL_S": "0.001"}
    result = fragsim("run", str(scenario), "-o", str(tmp_path / "o"), "--no-report", env=env)
    lines = [x for x in result.stderr.splitlines() if x.startswith("run tiny: ")]
    assert lines and "% of simulated time (" in lines[0]
    assert "done in" in lines[-1] and lines[-1].startswith("run tiny: 100 % ")
    assert "run tiny:" not in result.stdout


@pytest.fixture(scope="module")
def run_dir(scenario: Path) -> Path:
    out = scenario.parent / "run"
    fragsim("run", str(scenario), "-o", str(out), "-q", "--no-report")
    return out


def test_alerts_show_summarises_by_default_and_lists_with_limit(run_dir: Path) -> None:
    from sim.results.seed_alerts import ALERTS

    base = ("alerts", "show", str(run_dir), "--scrape-interval", "5")
    summary = json.loads(fragsim(*base, "-f", "json").stdout)
    assert [row["alert"] for row in summary] == [a.name for a in ALERTS]
    fired = [row for row in summary if row["firings"]]
    assert fired, summary
    assert all(row["first_firing"].startswith("0d 00:") for row in fired)
    assert all(row["first_firing_s"] <= row["last_firing_s"] for row in fired)
    table = fragsim(*base).stdout
    assert fired[0]["alert"] in table and "transitions: --all or --limit N" in table
    every = list(csv.reader(io.StringIO(fragsim(*base, "--all", "-f", "csv").stdout)))
    rows = list(csv.reader(io.StringIO(fragsim(*base, "--limit", "2", "-f", "csv").stdout)))
    assert rows[0][:3] == ["time_s", "time", "replica"] and rows == every[: len(rows)]
    assert len(rows) == 1 + min(2, len(every) - 1)
