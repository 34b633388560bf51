"""The postmortem report over a hand-made postmortem folder: what it reads, the failures
by outcome, nodes by the log's names, the bounds that keep a large fleet's report small,
and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import reports.postmortem as rp
from reports.html import ReportError
from sim.postmortem.matching import match_failures

NODES = [f"gpu-{i:02d}" for i in range(40)]


def _folder(tmp_path: Path, recorded: pd.DataFrame, simulated: pd.DataFrame) -> Path:
    out = tmp_path / "pm"
    out.mkdir()
    match = match_failures(recorded, simulated)
    match.table.to_csv(out / "match.csv", index=False)
    record = {
        "log": "prod-log",
        "scenario": "seed-postmortem",
        "requests": len(simulated),
        "replicas": NODES,
        "pools": ["a100"] * len(NODES),
        "initial_uptime_s": [86400.0] + [0.0] * (len(NODES) - 1),
        "span_s": [0.0, 7200.0],
        "node_events": [
            {"time_s": 3600.0, "replica": "gpu-00", "event": "restart", "detail": "<b>x</b>"}
        ],
        "rule": match.rule,
        "tolerance_s": match.tolerance_s,
        "recorded_failures": match.recorded_failures,
        "simulated_failures": match.simulated_failures,
        "matched": match.matched,
        "precision": match.precision,
        "recall": match.recall,
        "router": {"recorded": len(simulated), "fallbacks": 0, "later": 0},
        "router_fallbacks": 0,
        "script": {"restart": 1},
        "counterfactuals": [],
    }
    (out / "postmortem.json").write_text(json.dumps(record))
    compare = pd.DataFrame({"scenario": ["replay"], "failed_requests": [len(simulated)]})
    compare.to_csv(out / "compare.csv", index=False)
    replicas = pd.DataFrame({"fleet_id": range(len(NODES)), "replica": NODES, "pool": "a100"})
    replicas.to_csv(out / "replicas.csv", index=False)
    return out


def _frames(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``n`` recorded failures, one per node in turn; the replay reproduces the even ones
    and fails one request the log served."""
    rows = [(i, NODES[i % len(NODES)], "failed", 10.0 * i) for i in range(n)]
    recorded = pd.DataFrame(rows, columns=["request_id", "replica", "status", "arrival_s"])
    simulated = recorded.copy()
    simulated["status"] = ["failed-capacity" if i % 2 == 0 else "ok" for i in range(n)]
    extra = pd.DataFrame([(n, "gpu-39", "rejected-capacity", 5.0)], columns=recorded.columns)
    return recorded, pd.concat([simulated, extra], ignore_index=True)


def test_failures_by_outcome_at_each_sides_time(tmp_path: Path) -> None:
    pm = rp.read_postmortem(_folder(tmp_path, *_frames(6)))
    points = rp.failure_points(pm.match)
    assert points["reproduced"]["request_id"].tolist() == [0, 2, 4]
    assert points["missed"]["request_id"].tolist() == [1, 3, 5]
    assert points["extra"][["request_id", "replica", "time_s"]].values.tolist() == [
        [6, "gpu-39", 5.0]
    ]


def test_the_report_names_nodes_as_the_log_does_and_escapes_them(tmp_path: Path) -> None:
    folder = _folder(tmp_path, *_frames(6))
    out = rp.write_postmortem_report(folder, tmp_path / "r.html")
    text = out.read_text()
    assert "postmortem of log prod-log/ on seed-postmortem" in text
    assert "gpu-00" in text and "replica 0" not in text
    assert "<b>x</b>" not in text
    assert "restart &lt;b&gt;x&lt;\\u002fb&gt;" in text  # in a figure's JSON
    assert "no counterfactuals were run" in text
    assert "0.75" in text and "0.50" in text  # precision 3 / 4, recall 3 / 6
    again = rp.write_postmortem_report(folder, tmp_path / "again.html")
    assert again.read_bytes() == out.read_bytes()


def test_a_large_fleet_is_drawn_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rp, "TOP_NODES", 10)
    monkeypatch.setattr(rp, "MAX_POINTS", 100)
    pm = rp.read_postmortem(_folder(tmp_path, *_frames(1000)))
    nodes, with_failures = rp.top_nodes(pm)
    assert (len(nodes), with_failures) == (10, 40)
    fig = rp.failures_by_node_over_time(pm)
    drawn = sum(len(t.x) for t in fig.data if t.name != "node event (log)")
    assert drawn <= 100
    assert "10 of 40 nodes with failures; 1 in 3 failures drawn" in fig.layout.title.text
    assert len(rp.failures_by_node(pm).data[0].y) == 10


def test_a_folder_that_is_not_a_postmortem(tmp_path: Path) -> None:
    folder = _folder(tmp_path, *_frames(4))
    (folder / "compare.csv").unlink()
    assert not rp.is_postmortem_dir(folder)
    with pytest.raises(ReportError, match=r"not a postmortem folder \(no compare\.csv\)"):
        rp.read_postmortem(folder)
    (folder / "compare.csv").write_text("scenario\nreplay\n")
    (folder / "match.csv").write_text("request_id,replica\n1,a\n")
    with pytest.raises(ReportError, match=r"match\.csv: no recorded_time_s"):
        rp.read_postmortem(folder)


def test_a_capped_table_says_how_many_rows_it_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from reports import postmortem_tables as tables

    monkeypatch.setattr(tables, "MAX_ROWS", 2)
    body = [[str(i)] for i in range(5)]
    html = tables.capped_table(["n"], body, 5, "rows in match.csv")
    assert html.count("<td>") == 2 and html.endswith("<p>3 more rows in match.csv</p>")
    assert "more" not in tables.capped_table(["n"], body[:2], 2, "rows in match.csv")


def test_a_log_without_failures_says_so_instead_of_drawing(tmp_path: Path) -> None:
    recorded, simulated = _frames(4)
    simulated = simulated.iloc[:4].assign(status="ok")
    folder = _folder(tmp_path, recorded.iloc[0:0], simulated)
    text = rp.write_postmortem_report(folder, tmp_path / "r.html").read_text()
    line = "no failures to draw: neither the log nor the replay has a failed request"
    assert text.count(line) == 2  # over time (both figures), and per node
    assert "Plotly.newPlot" not in text.split("</head>", 1)[1]
