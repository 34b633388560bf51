"""Terminal tables (``sim.cli.output``) and progress lines (``sim.cli.progress``).

Contracts: a table at 80 columns never cuts a cell with "…" and never exceeds the width
(columns split into groups that repeat the key column); csv/json carry values, not
texts, and no title; markdown is a pipe table; plain progress lines come per interval
and at the end, and not at all for quick work or with ``quiet``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time

import pytest

from sim.cli.output import Cell, TableData, print_table, print_tables
from sim.cli.progress import elapsed_text, progress, sim_time_amounts
from sim.cli.table_layout import column_groups, wrap_cell

RUNS = [f"seed-postmortem-variant-{i}" for i in range(5)]
ROWS = [
    ["ttft p99 (s)", *(1.25 * i for i in range(5))],
    ["replica-hours", *(Cell(12_345.678 * i, f"{12_345.678 * i:,.1f}") for i in range(5))],
    ["failures", 3, None, math.nan, 7, 0],
]


def printed(capsys: pytest.CaptureFixture[str], *args: object, **kw: object) -> str:
    print_table(*args, **kw)  # type: ignore[arg-type]
    return capsys.readouterr().out


def test_wide_table_splits_into_groups_repeating_the_key_column(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = printed(capsys, "compare", ["metric", *RUNS], ROWS, width=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out
    for name in RUNS:  # every run's full name is shown
        assert name in out
    assert out.count("replica-hours") == 3  # key column in each of the 3 groups
    assert "compare (columns 2-3 of 6)" in out and "compare (columns 6-6 of 6)" in out
    assert "49,382.7" in out and "—" in out  # Cell text; None and NaN as a placeholder


def test_narrow_width_never_cuts_cells(capsys: pytest.CaptureFixture[str]) -> None:
    prose = "a long description that wraps at spaces rather than being cut short " * 3
    out = printed(capsys, None, ["kind", "what"], [["best_fit", prose]], width=40)
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 40
    words = " ".join(line.strip("│ ") for line in out.splitlines())
    assert "rather than being cut short" in " ".join(words.split())


def test_fitting_table_is_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "t", ["a", "b"], [["x", 1], ["y", 2_000]], width=80)
    assert "columns" not in out and "2,000" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_prose_with_links_wraps_inside_the_width_and_is_not_rewrapped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A long key column beside prose holding a path, a link and a ``--vary`` list: the
    prose wraps after ``/``, ``#``, ``,`` and ``=`` to fit 80 columns, and each printed
    line is one of the lines it was laid out in (rich does not fold them again)."""
    key = "seed-bimodal-offload-documents-host"
    prose = (
        "Compare the managers with --vary allocator.kind=paged,hybrid_kv,split_pools,"
        "window_pools (docs/allocators.md#kv-managers-for-hybrid-models). " * 3
    )
    out = printed(
        capsys, "built-in scenarios", ["name", "what it models"], [(key, prose)], width=80
    )
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = [line.split("│")[2] for line in lines if line.startswith("│")]
    width = len(cells[0]) - 2  # the column's text width, inside its padding
    assert [c.strip() for c in cells] == wrap_cell(prose, width).split("\n")
    assert width < 60 and all(len(c.strip()) > 3 for c in cells)


def test_column_groups() -> None:
    assert column_groups([5, 5, 5], [5, 5, 5], 80) == [[0, 1, 2]]
    # 10 + 30 + 30 + 30 + 13 > 80: key column repeated in each group
    assert column_groups([10, 30, 30, 30], [10, 30, 30, 30], 80) == [[0, 1, 2], [0, 3]]
    # a column too wide even alone with the key still gets its own group
    assert column_groups([10, 100, 5], [10, 100, 5], 80) == [[0, 1], [0, 2]]


def test_csv_has_values_and_no_title(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "compare", ["metric", *RUNS], ROWS, "csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["metric", *RUNS]
    assert rows[2][2] == "12345.678"  # the Cell's value, not its text
    assert rows[3][1:] == ["3", "", "", "7", "0"]
    assert "compare" not in out.splitlines()[0].split(",")[0]


def test_json_is_a_list_of_objects(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "compare", ["metric", *RUNS], ROWS, "json")
    data = json.loads(out)
    assert data[2] == {"metric": "failures", **dict(zip(RUNS, [3, None, None, 7, 0], strict=True))}
    assert data[0][RUNS[2]] == 2.5


def test_markdown_is_a_pipe_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "t", ["name", "n"], [["a|b", 1], ["c", 22]], "markdown")
    assert out.splitlines() == [
        "### t",
        "",
        "| name | n |",
        "|---|---:|",
        "| a\\|b | 1 |",
        "| c | 22 |",
        "",  # what follows is not a row of the table
    ]


def test_print_tables_json_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    tables = [TableData("models", ["m"], [["x"]]), TableData("gpus", ["g", "$/h"], [["a", 2.5]])]
    print_tables(tables, "json")
    assert json.loads(capsys.readouterr().out) == {
        "models": [{"m": "x"}],
        "gpus": [{"g": "a", "$/h": 2.5}],
    }
    print_tables(tables, "csv")
    assert capsys.readouterr().out == "# models\nm\nx\n\n# gpus\ng,$/h\na,2.5\n"


def test_bad_rows_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        print_table(None, ["a"], [[1, 2]])
    with pytest.raises(ValueError, match="expected one of"):
        print_table(None, ["a"], [[1]], "xml")


def test_plain_progress_lines_per_interval_and_at_the_end() -> None:
    stream = io.StringIO()
    with progress(
        "run x",
        total=86_400.0 * 6,
        what="simulated time",
        amounts=sim_time_amounts,
        interval_s=0.05,
        stream=stream,
        terminal=False,
    ) as p:
        p.update(86_400.0 * 2.5)
        time.sleep(0.18)
        p.update(86_400.0 * 6)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3
    assert lines[0].startswith("run x: 42 % of simulated time (2.5 of 6.0 d), ")
    assert lines[-1].startswith("run x: 100 % of simulated time (6.0 of 6.0 d), done in ")


def test_quick_or_quiet_work_prints_nothing() -> None:
    for quiet in (False, True):
        stream = io.StringIO()
        with progress("sweep", what="runs", quiet=quiet, stream=stream, terminal=False) as p:
            p.update(3, total=4, note="1 running")
        assert stream.getvalue() == ""
    stream = io.StringIO()
    with progress("sweep", quiet=True, interval_s=0.01, stream=stream, terminal=True) as p:
        time.sleep(0.03)
    assert stream.getvalue() == ""


def test_progress_line_words() -> None:
    stream = io.StringIO()
    with progress("sweep", what="runs", stream=stream, terminal=False) as p:
        p.update(12, total=40, note="3 running, 1 failed")
        assert p.line().startswith("sweep: 30 % of runs (12 of 40), 3 running, 1 failed, ")
        p.update(5, total=0)
        assert p.line().startswith("sweep: 5 runs, 3 running, 1 failed, ")
    assert [elapsed_text(s) for s in (5, 72, 7_380)] == ["5s", "1m12s", "2h03m"]
    assert sim_time_amounts(90, 600) == "1.5 of 10.0 min"


def test_plan_progress_bound_is_the_most_counts_the_search_tries() -> None:
    from sim.cli.bodies.plan import _at_most
    from sim.sweep.plan import most_evaluated

    # 1..16: gallop 1, 2, 4, 8, 16, then bisect 8..16 three times when 9..16 is the answer
    assert most_evaluated(1, 16) == 8
    assert most_evaluated(5, 5) == 1 and most_evaluated(1, 2) == 2
    assert _at_most(4, 32) == "4 of at most 32" and _at_most(16, 16) == "16 of 16"
