"""Every loader on the real public files (../shared/traces_external), checked against
the row counts and means in its SOURCES.md, plus BurstGPT from an inline fixture."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traces
from traces.arrivals import PoissonArrival
from traces.schema import ARROW_SCHEMA

# file, format, rows, input mean, output mean (SOURCES.md, "Statistics computed on these files")
REAL = [
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 19_366, 1154.7, 211.1),
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", 8_819, 2047.8, 27.9),
    ("mooncake_fast25/conversation_trace.jsonl", "mooncake", 12_031, 12035.1, 342.6),
    ("mooncake_fast25/synthetic_trace.jsonl", "mooncake", 3_993, 15325.5, 149.1),
    ("vidur_processed_traces/splitwise_conv.csv", "vidur", 19_366, 1154.7, 211.1),
    ("vidur_processed_traces/splitwise_code.csv", "vidur", 8_819, 2047.8, 27.9),
    (
        "vidur_processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "lengths",
        28_257,
        2588.1,
        291.4,
    ),
    (
        "sharegpt_sarathi/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        "lengths",
        30_731,
        2340.0,
        438.7,
    ),
]
POISSON = PoissonArrival(rate_per_s=2.0)


@pytest.mark.parametrize(("name", "fmt", "rows", "prompt_mean", "output_mean"), REAL)
def test_real_file_matches_sources(
    shared_traces: Path, name: str, fmt: str, rows: int, prompt_mean: float, output_mean: float
) -> None:
    path = shared_traces / name
    assert traces.detect_format(path).name == fmt
    df = traces.load(path, arrivals=POISSON)
    assert list(df.columns) == ARROW_SCHEMA.names
    assert len(df) == rows
    assert df["prompt_tokens"].mean() == pytest.approx(prompt_mean, abs=0.05)
    assert df["output_tokens"].mean() == pytest.approx(output_mean, abs=0.05)
    assert df["arrival_s"].is_monotonic_increasing
    assert df["request_id"].is_unique


@pytest.mark.parametrize(
    ("name", "ratio", "per_request"),
    [
        ("conversation_trace.jsonl", 0.374, 0.409),
        ("synthetic_trace.jsonl", 0.651, 0.432),
    ],
)
def test_mooncake_prefix_reuse_reproduced(
    shared_traces: Path, name: str, ratio: float, per_request: float
) -> None:
    summary = traces.describe(traces.load(shared_traces / "mooncake_fast25" / name))
    assert summary["prefix_reuse_token_ratio"] == pytest.approx(ratio, abs=0.0005)
    assert summary["prefix_hit_fraction_mean"] == pytest.approx(per_request, abs=0.0005)


def test_mooncake_hashes_and_times(shared_traces: Path) -> None:
    df = traces.load(shared_traces / "mooncake_fast25" / "conversation_trace.jsonl")
    blocks = df["prefix_hashes"].list.len().to_numpy()
    assert (blocks == -(-df["prompt_tokens"].to_numpy() // 512)).all()
    assert (df["prefix_block_tokens"] == 512).all()
    assert df["arrival_s"].max() == pytest.approx(3537.0, abs=1.0)  # ms -> s, about an hour


def test_azure_arrivals_equal_vidur_processed(shared_traces: Path) -> None:
    """SOURCES.md: Vidur's arrived_at is exactly TIMESTAMP - TIMESTAMP[0]."""
    azure = traces.load(shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    vidur = traces.load(shared_traces / "vidur_processed_traces" / "splitwise_conv.csv")
    assert azure["arrival_s"].iloc[0] == 0.0
    np.testing.assert_allclose(azure["arrival_s"], vidur["arrival_s"], atol=1e-6)
    assert (azure["prompt_tokens"] == vidur["prompt_tokens"]).all()


def test_azure_2024_header_is_azure(tmp_path: Path) -> None:
    """Azure 2024 week-long traces have the 2023 columns; read the same way."""
    path = tmp_path / "AzureLLMInferenceTrace_code_1week.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.0059650,2162,5\n2024-05-10 00:00:00.0123390,1107,7\n"
    )
    df = traces.load(path)
    assert traces.detect_format(path).name == "azure"
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 0.006374])


def test_iter_chunks_concatenates_to_load(shared_traces: Path) -> None:
    path = shared_traces / "mooncake_fast25" / "synthetic_trace.jsonl"
    chunks = list(traces.iter_chunks(path, chunk_rows=1000))
    assert [len(c) for c in chunks] == [1000, 1000, 1000, 993]
    whole = pd.concat(chunks, ignore_index=True)
    pd.testing.assert_frame_equal(whole, traces.load(path))
    assert traces.describe(iter(chunks)) == traces.describe(traces.load(path))


def test_lengths_need_an_arrival_process(shared_traces: Path) -> None:
    path = shared_traces / "sharegpt_sarathi" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    with pytest.raises(traces.TraceError, match="arrival"):
        traces.load(path)
    a = traces.load_lengths(path, POISSON, seed=3)
    b = traces.load_lengths(path, POISSON, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) / a["arrival_s"].max() == pytest.approx(2.0, rel=0.05)
    assert a["request_id"].tolist() == list(range(len(a)))  # arrivals are drawn in file order


BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,276,693,API log\n"
    "125,ChatGPT,1360,0,1360,API log\n"
    "178,GPT-4,235,222,457,Conversation log\n"
)


def test_burstgpt_drops_failed_rows_with_a_count(tmp_path: Path) -> None:
    path = tmp_path / "BurstGPT_sample.csv"
    path.write_text(BURSTGPT)
    assert traces.detect_format(path).name == "burstgpt"
    with pytest.warns(traces.TraceWarning, match="dropped 2 failed"):
        df = traces.load(path)
    assert df["request_id"].tolist() == [0, 2, 4]  # ids are source rows
    assert df["arrival_s"].tolist() == [5.0, 118.0, 178.0]
    assert df["output_tokens"].tolist() == [18, 276, 222]


def test_burstgpt_keep_failed(tmp_path: Path) -> None:
    path = tmp_path / "BurstGPT_sample.csv"
    path.write_text(BURSTGPT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = traces.load(path, keep_failed=True)
    assert len(df) == 5
    assert (df["output_tokens"] == 0).sum() == 2


def test_builtin_samples_load() -> None:
    df = traces.load(traces.sample_path("bimodal_200.csv"))
    assert len(df) == 200
    sp = traces.load(traces.sample_path("system_prompt_200.jsonl"))
    assert traces.detect_format(traces.sample_path("system_prompt_200.jsonl")).name == "canonical"
    assert (sp["prefix_hashes"].list.len() > 0).all()
    with pytest.raises(traces.TraceError, match="no such sample"):
        traces.sample_path("nope.csv")


def test_explicit_format_overrides_detection(shared_traces: Path) -> None:
    path = shared_traces / "vidur_processed_traces" / "splitwise_code.csv"
    as_lengths = traces.load(path, format="lengths", arrivals=POISSON)
    assert len(as_lengths) == 8_819
    with pytest.raises(traces.TraceError, match="unknown format"):
        traces.load(path, format="nope")
    with pytest.raises(traces.TraceError, match="missing column") as info:
        traces.load(path, format="azure")
    assert info.value.field == "TIMESTAMP"
