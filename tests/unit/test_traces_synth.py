"""Synthetic workloads: determinism, arrival processes, length mixes, shared prefixes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

import traces
from traces.arrivals import (
    BurstyArrival,
    DiurnalArrival,
    GammaArrival,
    PoissonArrival,
    arrival_times,
    mean_rate_per_s,
)
from traces.synth import (
    PRESETS,
    EmpiricalLengths,
    FixedTokens,
    LognormalTokens,
    PairLengths,
    SharedPrefix,
    SynthSpec,
    generate,
)

FIXED = PairLengths(prompt=FixedTokens(tokens=100), output=FixedTokens(tokens=10))


def test_same_seed_same_table_other_seed_differs() -> None:
    spec = PRESETS["bimodal"]
    pd.testing.assert_frame_equal(generate(spec, 7), generate(spec, 7))
    assert not generate(spec, 7).equals(generate(spec, 8))


@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"diurnal-chat-6d"}))
def test_presets_generate_valid_traces(name: str) -> None:
    df = generate(PRESETS[name], 0)
    traces.from_frame(df)  # passes every validation rule
    assert df["arrival_s"].is_monotonic_increasing and len(df) > 100
    summary = traces.describe(df)
    rate = mean_rate_per_s(PRESETS[name].arrival)
    assert summary["rate_per_s"] == pytest.approx(rate, rel=0.35)


def test_bimodal_preset_is_the_seeds_mix() -> None:
    df = generate(
        PRESETS["bimodal"].model_copy(update={"duration_s": None, "num_requests": 20_000}), 1
    )
    prompt = df["prompt_tokens"]
    short, long_ = prompt < 500, (prompt >= 15_000) & (prompt <= 30_000)
    assert (short | long_).all()
    assert short.mean() == pytest.approx(0.7, abs=0.015)


@pytest.mark.parametrize(
    "spec",
    [
        PoissonArrival(rate_per_s=4.0),
        GammaArrival(rate_per_s=4.0, cv=3.0),
        DiurnalArrival(rate_curve_per_s=(1.0, 7.0), period_s=100.0),
        BurstyArrival(on_rate_per_s=10.0, off_rate_per_s=0.5, mean_on_s=5.0, mean_off_s=10.0),
    ],
)
def test_arrival_rates_and_sizes(spec: object) -> None:
    rng = np.random.default_rng(0)
    by_count = arrival_times(spec, rng, num_requests=40_000)  # type: ignore[arg-type]
    assert len(by_count) == 40_000 and (np.diff(by_count) >= 0).all()
    rate = mean_rate_per_s(spec)  # type: ignore[arg-type]
    assert len(by_count) / by_count[-1] == pytest.approx(rate, rel=0.06)
    by_time = arrival_times(spec, rng, duration_s=5_000.0)  # type: ignore[arg-type]
    assert by_time.max() < 5_000.0
    assert len(by_time) / 5_000.0 == pytest.approx(rate, rel=0.08)


def test_gamma_cv() -> None:
    gaps = np.diff(
        arrival_times(
            GammaArrival(rate_per_s=2.0, cv=2.5), np.random.default_rng(1), num_requests=100_000
        )
    )
    assert gaps.std() / gaps.mean() == pytest.approx(2.5, rel=0.05)


def test_diurnal_follows_the_curve() -> None:
    t = arrival_times(
        DiurnalArrival(rate_curve_per_s=(1.0, 0.0, 9.0), period_s=30.0),
        np.random.default_rng(2),
        duration_s=30_000.0,
    )
    phase = (t % 30.0) // 10.0
    counts = np.bincount(phase.astype(int), minlength=3)
    assert counts[1] == 0
    assert counts[2] / counts[0] == pytest.approx(9.0, rel=0.1)


def test_lognormal_mean_and_spread() -> None:
    spec = SynthSpec(
        arrival=PoissonArrival(rate_per_s=1.0),
        num_requests=50_000,
        lengths=PairLengths(
            prompt=LognormalTokens(mean_tokens=800, cv=0.5), output=FixedTokens(tokens=3)
        ),
    )
    p = generate(spec, 3)["prompt_tokens"]
    assert p.mean() == pytest.approx(800, rel=0.02)
    assert p.std() / p.mean() == pytest.approx(0.5, rel=0.05)


def test_empirical_lengths_resample_pairs(shared_traces: Path) -> None:
    src = shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    spec = SynthSpec(
        arrival=PoissonArrival(rate_per_s=1.0),
        num_requests=5_000,
        lengths=EmpiricalLengths(path=src),
    )
    df = generate(spec, 4)
    real = traces.load(src)
    pairs = set(zip(real["prompt_tokens"], real["output_tokens"], strict=True))
    assert set(zip(df["prompt_tokens"], df["output_tokens"], strict=True)) <= pairs
    assert df["prompt_tokens"].mean() == pytest.approx(real["prompt_tokens"].mean(), rel=0.05)


def test_shared_system_prompt_hashes() -> None:
    spec = SynthSpec(
        arrival=PoissonArrival(rate_per_s=1.0),
        num_requests=2_000,
        lengths=FIXED,
        shared_prefix=SharedPrefix(fraction=0.5, prefix_tokens=1_000, block_tokens=100),
    )
    df = generate(spec, 5)
    with_prefix = df["prompt_tokens"] == 1_100
    assert with_prefix.mean() == pytest.approx(0.5, abs=0.05)
    assert set(df["prompt_tokens"]) == {100, 1_100}
    blocks = df["prefix_hashes"].list.len()
    assert (blocks == -(-df["prompt_tokens"] // 100)).all()
    shared_rows = df[with_prefix]["prefix_hashes"]
    assert all(list(h[:10]) == list(range(10)) for h in shared_rows)
    summary = traces.describe(df)
    n_shared = int(with_prefix.sum())
    expected = (n_shared - 1) * 1_000 / df["prompt_tokens"].sum()
    assert summary["prefix_reuse_token_ratio"] == pytest.approx(expected)


def test_parallel_sampling_and_beams() -> None:
    df = generate(PRESETS["parallel-sampling"], 0)
    assert (df["num_samples"] == 4).all() and (df["beam_width"] == 1).all()
    assert (generate(PRESETS["beam-search"], 0)["beam_width"] == 4).all()


def test_spec_validation() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        SynthSpec(arrival=PoissonArrival(rate_per_s=1.0), lengths=FIXED)
    with pytest.raises(ValidationError):
        PoissonArrival(rate_per_s=0)
    with pytest.raises(ValidationError):
        SynthSpec.model_validate(
            {
                "arrival": {"kind": "poisson", "rate_per_s": 1},
                "lengths": {"kind": "nope"},
                "num_requests": 3,
            }
        )
    spec = SynthSpec.model_validate(
        {
            "arrival": {"kind": "gamma", "rate_per_s": 2, "cv": 2},
            "lengths": {
                "kind": "mixture",
                "components": [
                    {
                        "weight": 1,
                        "lengths": {
                            "kind": "pair",
                            "prompt": {"kind": "fixed", "tokens": 5},
                            "output": {"kind": "uniform", "min_tokens": 1, "max_tokens": 9},
                        },
                    }
                ],
            },
            "num_requests": 10,
        }
    )
    assert len(generate(spec, 0)) == 10
