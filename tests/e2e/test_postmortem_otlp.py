"""`fragsim postmortem` on OpenTelemetry spans: a fleet run's requests exported as OTLP
JSON spans (examples/postmortem-otlp/make_example.py) and replayed, with the node
events inferred from the spans, reproduce the run's failures exactly; the shipped
example replays with its nodes file merged; it is its script's output; a bad span line
is one error line and nothing is written."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("opentelemetry.proto", reason="the otlp extra (opentelemetry-proto)")

from sim.cli import app
from sim.postmortem.otlp_log import load_otlp_log
from sim.postmortem.otlp_nodes import START_LEAD_S

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem-otlp"


def _script() -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLE / "make_example.py"))


def _replay(log: Path, out: Path) -> dict[str, Any]:
    args = ["postmortem", str(log), "-o", str(out), "--no-counterfactuals", "--no-report", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads((out / "postmortem.json").read_text())
    return record


def test_a_fleet_runs_spans_replay_to_its_own_failures(tmp_path: Path) -> None:
    """The example's fleet on the replay's own stack (``seed-postmortem``, no model
    error): ``node-d`` added at 300 s, ``node-a`` restarted at 600 s, ``node-c`` removed
    at 900 s. Every failed request of the run is a recorded failure of its spans; the
    spans alone tell the three node events (node-d's start before its first span,
    node-a's restart when its old instance's last span ended, node-c's stop at the end of its
    last span), and their replay reproduces the run's failures and no other, every
    request on its recorded node: precision and recall 1."""
    script = _script()
    csv_example = runpy.run_path(str(script["CSV_EXAMPLE"]))
    result, retry = script["simulate"](csv_example, mem_efficiency=0.8)  # the stack's own
    rows, lines = script["spans_of"](result, retry)
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "spans.jsonl").write_text("\n".join(lines) + "\n")

    run_failed = result.requests[result.requests["status"] != "ok"]
    assert len(run_failed) > 0
    log = load_otlp_log(log_dir / "spans.jsonl")
    recorded = log.recorded_failures()
    names = ["node-a", "node-b", "node-c", "node-d"]
    assert log.replica_names == names and len(log.requests) == len(result.requests)
    assert log.up_at_start.tolist() == [True, True, True, False]
    assert sorted(recorded["replica"].map(log.replica_names.__getitem__)) == sorted(
        names[r] for r in run_failed["replica"]
    )
    # The log starts at the first span: the run's times less the first arrival.
    t0 = rows["arrival_s"].min()
    on = {n: rows[rows["replica"] == n] for n in names}
    old_a = on["node-a"][on["node-a"]["arrival_s"] < 600.0]
    events = log.node_events
    assert [names[r] for r in events["replica"]] == ["node-d", "node-a", "node-c"]
    assert events["event"].tolist() == ["start", "restart", "scale_down"]
    assert events["time_s"].tolist() == pytest.approx(
        [
            on["node-d"]["arrival_s"].min() - t0 - START_LEAD_S,
            old_a["end_s"].max() - t0,
            on["node-c"]["end_s"].max() - t0,
        ],
        abs=1e-6,
    )
    assert on["node-d"]["arrival_s"].min() >= 300.0 and on["node-c"]["arrival_s"].max() < 900.0

    record = _replay(log_dir / "spans.jsonl", tmp_path / "pm")
    assert record["recorded_failures"] == len(run_failed)
    assert (record["precision"], record["recall"]) == (1.0, 1.0), record["matched"]
    assert record["router_fallbacks"] == 0
    assert record["script"] | {"recoveries": 0} == {
        "restart": 1, "crash": 0, "scale_up": 1, "scale_down": 1, "recoveries": 0
    }  # fmt: skip


def test_the_example_replays_with_its_nodes_file_merged(tmp_path: Path) -> None:
    """The shipped folder: nodes.csv's uptimes, restart and scale-down (by cause) win,
    node-d's start is the spans'; every failure reproduced, none extra."""
    record = _replay(EXAMPLE, tmp_path / "pm")
    events = [(e["replica"], e["event"], e["detail"]) for e in record["node_events"]]
    assert events == [
        ("node-d", "start", "first span"),
        ("node-a", "restart", "routine restart"),
        ("node-c", "scale_down", "autoscaler: idle"),
    ]
    assert record["pools"] == ["main"] * 4 and record["initial_uptime_s"][3] == 0.0
    assert (record["precision"], record["recall"]) == (1.0, 1.0)
    assert record["recorded_failures"] > 0 and record["router_fallbacks"] == 0


@pytest.mark.slow
def test_the_example_is_what_its_script_writes(tmp_path: Path) -> None:
    """The script simulates 20 minutes of the example fleet (about 5 s)."""
    _script()["write_example"](tmp_path)
    for name in ("spans.jsonl", "nodes.csv"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes()


def test_a_bad_span_line_is_one_error_and_nothing_is_written(tmp_path: Path) -> None:
    lines = (EXAMPLE / "spans.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace('"intValue":"', '"doubleValue":"', 1)
    bad = tmp_path / "spans.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pm"
    result = runner.invoke(app, ["postmortem", str(bad), "-o", str(out)])
    assert result.exit_code == 2
    (text,) = result.output.strip().splitlines()
    assert text.startswith(f"error: {bad}: line 4: field 'gen_ai.usage.prompt_tokens': ")
    assert "expected intValue, got doubleValue" in text
    assert not out.exists()
