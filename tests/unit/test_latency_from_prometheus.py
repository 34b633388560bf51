"""``calibrate --from-prometheus``'s fit as a round trip: a chat workload run under a
known, non-default linear latency model, its per-request latencies given 3 % noise and
written as vLLM 0.33's histograms (scraped every 15 s, a query_range dump), is fitted from
the roofline's starting point; the fitted model's replay of the real requests that
finished in the held-out windows is within 5 % (MAPE) of the true model's. A dump too
small to fit, or without a needed series, is refused naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.latency import from_prometheus as fp
from sim.latency import from_spans as fs
from sim.latency import prom_dump, vllm_histograms
from sim.latency.calibrated import CalibratedLatency
from sim.scenario.schema import Scenario
from sim.scenario.workload import load_workload

SCENARIO: dict[str, Any] = {
    "name": "prom-fit",
    "seed": 3,
    "workload": {
        "preset": "chat",
        "synth": {"duration_s": 600.0, "arrival": {"kind": "poisson", "rate_per_s": 2.0}},
    },
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
    "allocator": {"kind": "paged", "block_size_tokens": 16},
}
TRUE = np.array([3e-3, 1.2e-4, 2e-4, 2e-8])  # not the roofline's
SCRAPE_S = 15.0
ORIGIN_S = 1_767_225_600.0


def _truth(scenario: Scenario) -> tuple[fs.Replay, pd.DataFrame]:
    """The workload's replay and its run under the true model (the run's columns)."""
    work = load_workload(scenario)
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
    return replay, replay.requests(fs._linear(TRUE, replay))[0]


def _noisy(requests: pd.DataFrame, seed: int = 7) -> pd.DataFrame:
    """3 % noise on each request's TTFT and e2e (admission kept, order kept)."""
    rng = np.random.default_rng(seed)
    arrival = requests["arrival_s"].to_numpy()
    n = len(requests)
    first = arrival + (requests["first_token_s"] - arrival) * (1 + 0.03 * rng.standard_normal(n))
    finish = arrival + (requests["finish_s"] - arrival) * (1 + 0.03 * rng.standard_normal(n))
    return requests.assign(first_token_s=first, finish_s=np.maximum(finish, first))


def _dump(path: Path, requests: pd.DataFrame, *, drop: str = "") -> Path:
    series = vllm_histograms.histogram_series(
        requests, scrape_interval_s=SCRAPE_S, max_model_len=32768, node="node-a", origin_s=ORIGIN_S
    )
    if drop:
        series = {k: v for k, v in series.items() if not k[1].startswith(drop)}
    vllm_histograms.write_query_range_json(path, series)
    return path


def test_a_dump_of_a_known_model_with_noise_fits_back_within_5_percent(tmp_path: Path) -> None:
    """End to end through ``fragsim calibrate --from-prometheus``: the table of held-out
    windows' errors and a ``fragsim-latency/1`` file, whose model replays the held-out
    windows' real requests within 5 % of the true model."""
    scenario = Scenario.model_validate(SCENARIO)
    replay, truth = _truth(scenario)
    assert (truth["status"] == "ok").all()
    noisy = _noisy(truth)
    dump = _dump(tmp_path / "dump.json", noisy)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "latency.json"
    args = ["calibrate", "--from-prometheus", str(dump), "-s", str(tmp_path / "s.yaml")]
    result = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    used = [w for w in prom_dump.read_windows(dump) if w.requests > 0]
    role = fp.held_out_windows(used)
    assert lines[0].startswith(f"error on {(role == 1).sum()} held-out windows (fitted on ")
    assert lines[1].split() == ["latency", "windows", "mean", "APE", "p50", "APE", "p90", "APE"]
    assert [line.split()[0] for line in lines[2:4]] == ["TTFT", "e2e"]
    assert lines[4].startswith("rebuild bias corrected: prefill x")
    assert lines[5].startswith(f"wrote {out}")
    fitted = CalibratedLatency.from_json(out)
    assert fitted.calibration.source["held_out_windows"] == int((role == 1).sum())
    # Held out: the real requests that finished in the windows the fit did not see.
    ends = np.array([w.end_s - ORIGIN_S for w in used])
    held = role[np.searchsorted(ends, noisy["finish_s"].to_numpy(), side="left")] == 1
    assert held.sum() > 100
    true_ttft, true_e2e = replay.predict(fs._linear(TRUE, replay))
    # The default roofline is far from the truth: the fit has work to do.
    _, start_e2e = replay.predict(replay.parts.latency)
    assert fs.errors(start_e2e[held], true_e2e[held])[0] > 0.15
    ttft, e2e = replay.predict(fitted)
    for pred, true in ((ttft, true_ttft), (e2e, true_e2e)):
        mape, _ = fs.errors(pred[held], true[held])
        assert mape < 0.05


def test_a_dump_too_short_or_without_a_needed_series_is_refused(tmp_path: Path) -> None:
    """One error line naming the dump and what is missing; nothing written."""
    scenario = Scenario.model_validate(SCENARIO)
    _, truth = _truth(scenario)
    short = truth[truth["finish_s"] < 100.0]
    windows = prom_dump.read_windows(_dump(tmp_path / "short.json", short))
    with pytest.raises(prom_dump.DumpError, match=r"short\.json: \d+ windows with \d+ finished"):
        fp.fit_from_prometheus(scenario, windows, source=str(tmp_path / "short.json"))
    bare = _dump(tmp_path / "bare.json", truth, drop=prom_dump.GENERATION)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "x.json"
    args = ["calibrate", "--from-prometheus", str(bare), "-s", str(tmp_path / "s.yaml")]
    result = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "bare.json: node 'node-a' has no vllm:request_generation_tokens_bucket" in result.output
    assert not out.exists()
    result = CliRunner().invoke(app, ["calibrate", "--from-prometheus", str(bare), "-o", str(out)])
    assert result.exit_code == 2 and "give the replica to replay: -s SCENARIO" in result.output
