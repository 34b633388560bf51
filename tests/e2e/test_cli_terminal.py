"""What a user reads in a terminal (``COLUMNS=80 fragsim ... | cat``): help that
never breaks inside a word or a number, prose wrapped to the width like the tables,
``alerts show --all`` with each transition's cells in one table, Markdown that is
valid, csv/json that keep a nested row's parent, and ``fragsim version`` without the
heavy modules."""

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
from sim.cli.output import wrap_prose
from sim.cli.table_layout import wrap_cell

runner = CliRunner()

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 60}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
}


def fragsim(*args: str, columns: int = 80) -> Result:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result


def _command_paths() -> list[list[str]]:
    """Every command and subcommand, as the words that name it."""
    paths: list[list[str]] = [[], ["version"]]
    for name in COMMANDS:
        paths.append([name])
        sub = getattr(load_command(name), "commands", {})
        paths += [[name, s] for s in sub]
    return paths


HELP_CODE = """
import contextlib, io, json, os, sys
from sim.cli import app
out = {}
for path in json.loads(sys.argv[1]):
    for columns in (1000, 80, 60):
        os.environ["COLUMNS"] = str(columns)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                app([*path, "--help"])
            except SystemExit:
                pass
        out[" ".join(path) + f"@{columns}"] = buf.getvalue()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """Every command's ``--help`` at 1000, 80 and 60 columns (click's test runner
    forces 80, so one process of its own prints them)."""
    paths = json.dumps(_command_paths())
    done = subprocess.run(
        [sys.executable, "-c", HELP_CODE, paths], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_help_keeps_every_word_whole_at_80_and_60_columns(helps: dict[str, str]) -> None:
    for path in _command_paths():
        name = " ".join(path)
        wide = helps[f"{name}@1000"].split()
        assert wide, name
        for columns in (80, 60):
            text = helps[f"{name}@{columns}"]
            assert "…" not in text, name
            assert text.split() == wide, (name, columns)  # wrapped at spaces only
            longest = max(len(line) for line in text.splitlines())
            assert longest <= columns, (name, columns, text)


def test_the_command_listing_gives_each_summary_whole() -> None:
    commands = fragsim("--help").stdout.split("Commands:")[1]
    listing = " ".join(commands.split())
    for lazy in COMMANDS.values():
        assert lazy.summary in listing
    assert "..." not in listing.replace("RUN_DIR...", "")  # none cut short


def test_prose_wraps_at_spaces_and_keeps_its_indentation() -> None:
    text = "failed requests: 109 (by diagnosis: fragmentation on a capable node: 109)"
    lines = wrap_prose(text, 30)
    assert max(len(line) for line in lines) <= 30
    assert " ".join(" ".join(lines).split()) == text
    assert all(line.startswith("  ") for line in lines[1:])
    assert wrap_prose("  1. a b c d e f", 10, indent="   ") == ["  1. a b c", "     d e f"]


def test_a_cell_wraps_after_an_identifiers_underscores() -> None:
    assert wrap_cell("fragmentation_driven_allocation_failure", 22).splitlines() == [
        "fragmentation_driven_",
        "allocation_failure",
    ]
    assert wrap_cell("a b_c", 3) == "a\nb_c"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("terminal")
    scenario = folder / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY, sort_keys=False))
    fragsim("run", str(scenario), "-o", str(folder / "run"), "-q", "--no-report")
    return folder / "run"


@pytest.mark.parametrize("columns", [80, 60])
def test_alerts_show_fits_the_terminal_prose_too(run_dir: Path, columns: int) -> None:
    for extra in ([], ["--all"]):
        out = fragsim("alerts", "show", str(run_dir), "--scrape-interval", "5", *extra,
                      columns=columns).stdout  # fmt: skip
        assert max(len(line) for line in out.splitlines()) <= columns, out
        assert "failed requests" in out


def test_alerts_show_all_keeps_each_transitions_cells_in_one_table(run_dir: Path) -> None:
    base = ("alerts", "show", str(run_dir), "--scrape-interval", "5", "--all")
    rows = list(csv.DictReader(io.StringIO(fragsim(*base, "-f", "csv").stdout)))
    assert rows
    out = fragsim(*base).stdout
    assert "(columns" not in out  # one table, not one per group of columns
    lines = [line for line in out.splitlines() if line.startswith("│ 0d")]
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows, strict=True):
        assert row["time"] in line and row["state"] in line and row["severity"] in line


def _markdown_tables(text: str) -> list[tuple[int, int]]:
    """(rows parsed, pipe lines written) for each table of ``text``, by markdown-it."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables = []
    for i, token in enumerate(tokens):
        if token.type == "table_open":
            assert token.map is not None
            start, end = token.map
            body = [t for t in tokens[i:] if t.type in ("tr_open", "table_close")]
            rows = next(k for k, t in enumerate(body) if t.type == "table_close")
            written = sum(1 for line in text.splitlines()[start:end] if line.startswith("|"))
            tables.append((rows, written - 1))  # the delimiter row is not a row
    return tables


def test_markdown_output_is_valid_markdown(run_dir: Path, tmp_path: Path) -> None:
    scenario = run_dir.parent / "tiny.yaml"
    outputs = [
        fragsim(
            "run", str(scenario), "-o", str(tmp_path / "r"), "--no-report", "-f", "markdown"
        ).stdout,
        fragsim("alerts", "show", str(run_dir), "--scrape-interval", "5", "-f", "markdown").stdout,
        fragsim("hardware", "-f", "markdown").stdout,
    ]
    for text in outputs:
        tables = _markdown_tables(text)
        assert tables
        for parsed, written in tables:
            assert parsed == written  # no line after a table is read as a row of it
    assert "&nbsp;&nbsp;ok" in outputs[0]  # a nested row keeps its indentation


def test_run_csv_and_json_name_a_nested_rows_parent(run_dir: Path, tmp_path: Path) -> None:
    scenario = run_dir.parent / "tiny.yaml"
    args = ("run", str(scenario), "--no-report", "-f")
    rows = list(csv.reader(io.StringIO(fragsim(*args, "csv", "-o", str(tmp_path / "a")).stdout)))
    metrics = [r[0] for r in rows[1:]]
    assert "requests / ok" in metrics and "ok" not in metrics
    assert "allocation failures" in metrics
    table = fragsim("run", str(scenario), "-o", str(tmp_path / "b"), "--no-report").stdout
    indented = [line.split("│")[1].strip() for line in table.splitlines()
                if line.startswith("│   ")]  # fmt: skip
    assert indented and all(any(m.endswith(f" / {c}") for m in metrics) for c in indented)
    records = json.loads(fragsim(*args, "json", "-o", str(tmp_path / "c")).stdout)
    assert {"metric": "requests / ok", "value": rows[1 + metrics.index("requests / ok")][1]} != {}
    assert any(r["metric"] == "requests / ok" for r in records)


def test_version_imports_nothing_heavy() -> None:
    # pydantic is not listed: typer itself imports it, for --help too
    heavy = ("pandas", "numpy", "pyarrow", "scipy", "plotly", "simpy", "torch",
             "sim.runner", "sim.fleet", "yaml")  # fmt: skip
    code = (
        "import sys\nfrom sim.cli import app\n"
        "try:\n    app(['version'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=os.environ)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fragsim ")
    assert done.stdout.splitlines()[-1] == "[]"


def test_piped_progress_keeps_one_total(run_dir: Path, tmp_path: Path) -> None:
    import re

    scenario = run_dir.parent / "tiny.yaml"
    result = runner.invoke(
        app,
        ["run", str(scenario), "-o", str(tmp_path / "o"), "--no-report", "-q"][:-1],
        env={"COLUMNS": "80", "FRAGSIM_PROGRESS_INTERVAL_S": "0.0001"},
    )
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stderr.splitlines() if x.startswith("run tiny: ")]
    totals = {re.search(r" of ([\d.,]+ \w+)\)", x).group(1) for x in lines}  # type: ignore[union-attr]
    assert len(lines) >= 2 and len(totals) == 1, lines
    assert lines[-1].startswith("run tiny: 100 % ") and "done in" in lines[-1]
