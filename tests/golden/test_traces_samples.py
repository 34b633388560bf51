"""Seeded golden outputs: the shipped samples regenerate byte for byte, and the bimodal
preset's summary is pinned (a change here changes every downstream golden number)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traces
from traces.synth import PRESETS, SharedPrefix, generate


def _bimodal_200() -> object:
    return PRESETS["bimodal"].model_copy(update={"duration_s": None, "num_requests": 200})


def _system_prompt_200() -> object:
    return PRESETS["system-prompt"].model_copy(
        update={
            "duration_s": None,
            "num_requests": 200,
            "shared_prefix": SharedPrefix(fraction=0.8, prefix_tokens=1_500, block_tokens=64),
        }
    )


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("bimodal_200.csv", _bimodal_200),
        ("system_prompt_200.jsonl", _system_prompt_200),
    ],
)
def test_samples_regenerate_byte_for_byte(tmp_path: Path, name: str, spec: object) -> None:
    out = tmp_path / name
    traces.write(generate(spec(), seed=0), out)  # type: ignore[operator]
    assert out.read_bytes() == traces.sample_path(name).read_bytes()


def test_bimodal_seed0_summary() -> None:
    s = traces.describe(generate(PRESETS["bimodal"], seed=0))
    assert s["rows"] == 1753
    assert s["prompt_tokens"]["mean"] == pytest.approx(6785.841985168283, rel=1e-12)
    assert s["prompt_tokens"]["p50"] == 374
    assert s["output_tokens"]["mean"] == pytest.approx(225.04221334854535, rel=1e-12)
