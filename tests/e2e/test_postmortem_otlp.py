"""`fragsim postmortem` on OpenTelemetry spans: a fleet run's requests exported as OTLP
JSON spans (examples/postmortem-otlp/make_example.py) and replayed reproduce the run's
failures exactly; the shipped example is its script's output; a bad span line is one
error line and nothing is written."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("opentelemetry.proto", reason="the otlp extra (opentelemetry-proto)")

from sim.cli import app
from sim.fleet.otlp_log import load_otlp_log

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem-otlp"


def _script(**constants: float) -> dict[str, Any]:
    script = runpy.run_path(str(EXAMPLE / "make_example.py"))
    script.update(constants)  # the functions read their module globals from this dict
    return script


def _replay(log: Path, out: Path) -> dict[str, Any]:
    args = ["postmortem", str(log), "-o", str(out), "--no-counterfactuals", "--no-report", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads((out / "postmortem.json").read_text())
    return record


def test_a_fleet_runs_spans_replay_to_its_own_failures(tmp_path: Path) -> None:
    """The example's fleet on the replay's own stack (``seed-postmortem``, no model
    error), ``node-a`` restarted at 600 s: every failed request of the run is a recorded
    failure of its spans, and the replay of the spans alone (nodes and the restart
    inferred from them) reproduces them all and no other: precision and recall 1."""
    script = _script(DURATION_S=1200.0, RESTART_S=600.0)
    csv_example = runpy.run_path(str(script["CSV_EXAMPLE"]))
    csv_example["MEM_EFFICIENCY"] = 0.8  # the replay's own stack: no model error
    result, backoff_s = script["simulate"](csv_example)
    attempts = csv_example["attempt_rows"](result, backoff_s)
    rows = script["span_rows"](attempts, result, backoff_s)
    lines = script["otlp_lines"](rows, {"node-a": [600.0]})
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "spans.jsonl").write_text("\n".join(lines) + "\n")

    run_failed = result.requests[result.requests["status"] != "ok"]
    assert len(run_failed) > 0
    log = load_otlp_log(log_dir / "spans.jsonl")
    recorded = log.recorded_failures()
    names = ["node-a", "node-b", "node-c"]
    assert sorted(log.replica_names) == names and len(log.requests) == len(result.requests)
    assert sorted(recorded["replica"].map(log.replica_names.__getitem__)) == sorted(
        names[r] for r in run_failed["replica"]
    )
    assert log.node_events[["replica", "event"]].values.tolist() == [[0, "restart"]]
    # The log starts at the first span: the run's times less the first arrival.
    old = rows[(rows["replica"] == "node-a") & (rows["arrival_s"] < 600.0)]
    inferred_s = old["arrival_s"].max() - rows["arrival_s"].min()
    assert log.node_events["time_s"].iloc[0] == pytest.approx(inferred_s, abs=1e-6)

    record = _replay(log_dir / "spans.jsonl", tmp_path / "pm")
    assert record["recorded_failures"] == len(run_failed)
    assert (record["precision"], record["recall"]) == (1.0, 1.0), record["matched"]
    assert record["router_fallbacks"] == 0


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
