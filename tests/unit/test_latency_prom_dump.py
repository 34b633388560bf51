"""The Prometheus range dump reader (``calibrate --from-prometheus``'s input): vLLM
histograms written from known requests read back as the same windows from query_range
JSON and from OpenMetrics text, with exact per-window means; a dump without a needed
series is refused naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.latency import prom_dump, vllm_histograms


def _requests() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    arrival = np.sort(rng.uniform(0, 100, 60))
    ttft = rng.uniform(0.05, 0.5, 60)
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + rng.uniform(1, 5, 60),
            "prompt_tokens": rng.integers(1, 3000, 60),
            "output_tokens": rng.integers(2, 400, 60),
            "status": "ok",
        }
    )


def test_json_and_openmetrics_dumps_read_as_the_same_windows(tmp_path: Path) -> None:
    req = _requests()
    series = vllm_histograms.histogram_series(req, scrape_interval_s=10.0, max_model_len=4096)
    vllm_histograms.write_query_range_json(tmp_path / "d.json", series)
    vllm_histograms.write_openmetrics(tmp_path / "d.om", series)
    a = prom_dump.read_windows(tmp_path / "d.json")
    b = prom_dump.read_windows(tmp_path / "d.om")
    assert [(w.start_s, w.end_s, w.requests) for w in a] == [
        (w.start_s, w.end_s, w.requests) for w in b
    ]
    assert sum(w.requests for w in a) == len(req)
    e2e = (req["finish_s"] - req["arrival_s"]).to_numpy()
    busy = next(w for w in a if w.requests > 0)
    start = busy.start_s - 1_767_225_600.0
    mine = (req["finish_s"] > start) & (req["finish_s"] <= start + 10.0)
    assert busy.histograms[prom_dump.E2E].mean() == pytest.approx(e2e[mine].mean())


def test_a_dump_without_the_prompt_histogram_is_refused(tmp_path: Path) -> None:
    series = vllm_histograms.histogram_series(
        _requests(), scrape_interval_s=10.0, max_model_len=4096
    )
    bare = {k: v for k, v in series.items() if not k[1].startswith(prom_dump.PROMPT)}
    vllm_histograms.write_query_range_json(tmp_path / "d.json", bare)
    with pytest.raises(prom_dump.DumpError, match="has no vllm:request_prompt_tokens_bucket"):
        prom_dump.read_windows(tmp_path / "d.json")
    (tmp_path / "v.json").write_text('{"status": "success", "data": {"resultType": "vector"}}')
    with pytest.raises(prom_dump.DumpError, match="expected 'matrix'"):
        prom_dump.read_windows(tmp_path / "v.json")
