"""``calibrate --from-spans``'s fit as a round trip: spans written from a fragsim run under
a known, non-default linear latency model, with 3 % noise on each latency, are fitted from
the roofline's starting point, and the fitted model's replay is within 5 % (MAPE) of the
true model's on the held-out requests; too few spans, spans without the latency
attributes and a scenario with a fleet are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.latency import from_spans as fs
from sim.scenario.schema import Scenario

SCENARIO: dict[str, Any] = {
    "name": "spans-fit",
    "seed": 3,
    "workload": {
        "preset": "bimodal",
        "synth": {"duration_s": 700.0, "arrival": {"kind": "poisson", "rate_per_s": 0.5}},
    },
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
    "allocator": {"kind": "paged", "block_size_tokens": 16},
}
TRUE = np.array([3e-3, 1.2e-4, 2e-4, 2e-8])  # not the roofline's


def _attr(key: str, value: float | int | str) -> dict[str, Any]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def _spans(path: Path, rows: pd.DataFrame, *, latencies: bool = True) -> None:
    spans = []
    for r in rows.itertuples(index=False):
        attrs = [
            _attr("gen_ai.request.id", f"req-{r.request_id}"),
            _attr("gen_ai.usage.prompt_tokens", int(r.prompt_tokens)),
            _attr("gen_ai.usage.completion_tokens", int(r.output_tokens)),
        ]
        if latencies:
            attrs += [_attr(fs.TTFT, float(r.ttft_s)), _attr(fs.E2E, float(r.e2e_s))]
        start = 1_767_225_600_000_000_000 + round(r.arrival_s * 1e9)
        spans.append(
            {
                "name": "llm_request",
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + round(r.e2e_s * 1e9)),
                "attributes": attrs,
                "status": {"code": 1},
            }
        )
    resource = {"attributes": [_attr("host.name", "node-a")]}
    doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(doc) + "\n")


def _truth(scenario: Scenario, n: int) -> tuple[pd.DataFrame, fs.Replay]:
    from sim.scenario.workload import load_workload

    work = load_workload(scenario).iloc[:n]
    rows = pd.DataFrame(
        {
            "node": "node-a",
            "prompt_tokens": work["prompt_tokens"].astype(int),
            "output_tokens": work["output_tokens"].astype(int),
            "ttft_s": 1.0,
            "e2e_s": 1.0,
            "arrival_s": work["arrival_s"] - work["arrival_s"].min(),
        }
    ).reset_index(drop=True)
    replay = fs.prepare(scenario, rows)
    ttft, e2e = replay.predict(fs._linear(TRUE, replay))
    return rows.assign(ttft_s=ttft, e2e_s=e2e), replay


def test_spans_of_a_known_model_with_noise_fit_back_within_5_percent(tmp_path: Path) -> None:
    scenario = Scenario.model_validate(SCENARIO)
    rows, replay = _truth(scenario, 300)
    assert rows["e2e_s"].notna().all()
    rng = np.random.default_rng(7)
    noisy = rows.assign(
        ttft_s=rows["ttft_s"] * (1 + 0.03 * rng.standard_normal(len(rows))),
        e2e_s=rows["e2e_s"] * (1 + 0.03 * rng.standard_normal(len(rows))),
    )
    noisy["ttft_s"] = np.minimum(noisy["ttft_s"], noisy["e2e_s"])
    _spans(tmp_path / "spans.jsonl", noisy.assign(request_id=range(len(rows))))
    spans = fs.read_span_requests(tmp_path)
    assert len(spans) == 300
    fit = fs.fit_from_spans(scenario, spans, source="spans")
    # The default roofline is far from the truth: the fit has work to do.
    _, start_e2e = replay.predict(replay.parts.latency)
    held = replay.observed["held_out"].to_numpy()
    assert fs.errors(start_e2e[held], rows["e2e_s"].to_numpy()[held])[0] > 0.15
    ttft, e2e = replay.predict(fit.latency)
    for pred, true in ((ttft, rows["ttft_s"]), (e2e, rows["e2e_s"])):
        mape, _ = fs.errors(pred[held], true.to_numpy()[held])
        assert mape < 0.05
    out = tmp_path / "latency.json"
    fit.latency.to_json(out)
    loaded = type(fit.latency).from_json(out)
    assert loaded.calibration.source["held_out_requests"] == int(held.sum())


def test_too_few_spans_or_no_latencies_or_a_fleet_are_refused(tmp_path: Path) -> None:
    scenario = Scenario.model_validate(SCENARIO)
    rows, _ = _truth(scenario, 60)
    rows = rows.assign(request_id=range(len(rows)))
    _spans(tmp_path / "few.jsonl", rows.iloc[:10])
    with pytest.raises(fs.SpanFitError, match="10 ok spans; a fit needs at least 50"):
        fs.read_span_requests(tmp_path / "few.jsonl")
    _spans(tmp_path / "bare.jsonl", rows, latencies=False)
    with pytest.raises(fs.SpanFitError, match=r"bare\.jsonl line 1: an ok span without gen_ai"):
        fs.read_span_requests(tmp_path / "bare.jsonl")
    spans = fs.read_span_requests(_write(tmp_path / "ok.jsonl", rows))
    fleet = Scenario.model_validate({**SCENARIO, "fleet": {"pools": [{"name": "a", "count": 2}]}})
    with pytest.raises(fs.SpanFitError, match="the scenario has a fleet"):
        fs.prepare(fleet, spans)
    short = Scenario.model_validate(
        {**SCENARIO, "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"}}
    )
    with pytest.raises(fs.SpanFitError, match="model cannot run the spans: a span of"):
        fs.prepare(short, spans)


def _write(path: Path, rows: pd.DataFrame) -> Path:
    _spans(path, rows)
    return path


def test_the_command_writes_a_file_any_scenario_loads_and_prints_the_error(
    tmp_path: Path,
) -> None:
    """``fragsim calibrate --from-spans`` end to end: the table of held-out errors, a
    ``fragsim-latency/1`` file a scenario runs with; a bad span is one error line, no file."""
    import yaml
    from typer.testing import CliRunner

    from sim.cli import app
    from sim.runner import run

    scenario = Scenario.model_validate(SCENARIO)
    rows, _ = _truth(scenario, 150)
    _write(tmp_path / "spans.jsonl", rows.assign(request_id=range(len(rows))))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "latency.json"
    args = ["calibrate", "--from-spans", str(tmp_path / "spans.jsonl"), "-s"]
    result = CliRunner().invoke(app, [*args, str(tmp_path / "s.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("error on 30 held-out requests (fitted on 120 of 150")
    assert lines[1].split() == ["latency", "requests", "MAPE", "p90", "APE"]
    assert [line.split()[:2] for line in lines[2:4]] == [["TTFT", "30"], ["e2e", "30"]]
    assert lines[4].startswith(f"wrote {out}")
    with_fit = Scenario.model_validate(
        {**SCENARIO, "latency": {"kind": "calibrated", "path": str(out)}}
    )
    assert (run(with_fit).requests["status"] == "ok").all()
    bad = tmp_path / "bad.jsonl"
    _spans(bad, rows.assign(request_id=range(len(rows))), latencies=False)
    result = CliRunner().invoke(
        app, [*args[:2], str(bad), "-s", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "an ok span without gen_ai.latency.time_to_first_token" in result.output
    assert not (tmp_path / "x.json").exists()


def test_a_span_start_that_is_no_integer_is_one_line_naming_the_file_and_line(
    tmp_path: Path,
) -> None:
    scenario = Scenario.model_validate(SCENARIO)
    rows, _ = _truth(scenario, 60)
    path = tmp_path / "bad_start.jsonl"
    _spans(path, rows.assign(request_id=range(len(rows))))
    doc = json.loads(path.read_text())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][3]["startTimeUnixNano"] = "soon"
    path.write_text(json.dumps(doc) + "\n")
    with pytest.raises(
        fs.SpanFitError, match=r"bad_start\.jsonl line 1: startTimeUnixNano 'soon': expected an"
    ):
        fs.read_span_requests(path)
