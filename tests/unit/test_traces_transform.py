"""Transforms: rescale, window, tile, sample, filter, merge."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import traces
from traces import transform
from traces.synth import PRESETS, generate


@pytest.fixture(scope="module")
def chat() -> pd.DataFrame:
    return generate(PRESETS["system-prompt"].model_copy(update={"duration_s": 600.0}), 0)


def test_rescale_rate(chat: pd.DataFrame) -> None:
    fast = transform.rescale_rate(chat, 2.0)
    assert (fast["arrival_s"] * 2 == chat["arrival_s"]).all()
    target = transform.rescale_to_rate(chat, 10.0)
    assert traces.describe(target)["rate_per_s"] == pytest.approx(10.0)
    assert chat["arrival_s"].iloc[-1] == pytest.approx(
        traces.describe(chat)["first_arrival_s"] + traces.describe(chat)["span_s"]
    )


def test_time_window(chat: pd.DataFrame) -> None:
    win = transform.time_window(chat, 100.0, 200.0)
    assert win["arrival_s"].between(0, 100, inclusive="left").all()
    assert len(win) == chat["arrival_s"].between(100, 200, inclusive="left").sum()
    kept = transform.time_window(chat, 100.0, 200.0, rebase=False)
    assert kept["arrival_s"].min() >= 100.0


def test_tile_an_hour_to_six_days(shared_traces: Path) -> None:
    hour = traces.load(shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv")
    days = transform.tile(hour, 6 * 86_400.0)
    assert days["request_id"].is_unique and days["arrival_s"].is_monotonic_increasing
    assert days["arrival_s"].max() < 6 * 86_400.0
    copies = 6 * 86_400.0 / (3435.948 * (1 + 1 / 8818))
    assert len(days) == pytest.approx(len(hour) * copies, rel=0.01)
    assert days["prompt_tokens"].mean() == pytest.approx(hour["prompt_tokens"].mean(), rel=0.01)


def test_tile_gives_fresh_prefixes(chat: pd.DataFrame) -> None:
    span = float(chat["arrival_s"].max())
    two = transform.tile(chat, 2 * span + 10, period_s=span + 5)
    assert len(two) == 2 * len(chat)
    assert traces.describe(two)["prefix_reuse_token_ratio"] == pytest.approx(
        traces.describe(chat)["prefix_reuse_token_ratio"], rel=0.01
    )
    shared = transform.tile(chat, 2 * span + 10, period_s=span + 5, fresh_prefixes=False)
    assert (
        traces.describe(shared)["prefix_reuse_token_ratio"]
        > traces.describe(two)["prefix_reuse_token_ratio"]
    )


def test_sample_is_seeded(chat: pd.DataFrame) -> None:
    a = transform.sample(chat, 0.3, seed=1)
    pd.testing.assert_frame_equal(a, transform.sample(chat, 0.3, seed=1))
    assert len(a) / len(chat) == pytest.approx(0.3, abs=0.05)
    assert set(a["request_id"]) <= set(chat["request_id"])


def test_filter(chat: pd.DataFrame) -> None:
    out = transform.filter_requests(
        chat,
        min_prompt_tokens=1_600,
        max_output_tokens=300,
        where=lambda df: df["request_id"] % 2 == 0,
    )
    assert (out["prompt_tokens"] >= 1_600).all() and (out["output_tokens"] <= 300).all()
    assert (out["request_id"] % 2 == 0).all() and len(out) > 0


def test_merge_keeps_ids_unique(chat: pd.DataFrame) -> None:
    bimodal = generate(PRESETS["bimodal"].model_copy(update={"duration_s": 600.0}), 0)
    merged = transform.merge(chat, bimodal)
    assert len(merged) == len(chat) + len(bimodal)
    assert merged["request_id"].is_unique and merged["arrival_s"].is_monotonic_increasing
    twice = transform.merge(chat, chat)
    assert (
        traces.describe(twice)["prefix_reuse_token_ratio"]
        < traces.describe(transform.merge(chat, chat, share_prefixes=True))[
            "prefix_reuse_token_ratio"
        ]
    )
