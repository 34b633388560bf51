"""Every number of a synth spec is finite and in range; contradictions and costs refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from traces.bounds import BoundError
from traces.synth import SynthSpec, generate

FIXED = {
    "kind": "pair",
    "prompt": {"kind": "fixed", "tokens": 100},
    "output": {"kind": "fixed", "tokens": 10},
}
POISSON = {"kind": "poisson", "rate_per_s": 1.0}


def spec(**over: Any) -> dict[str, Any]:
    return {"arrival": POISSON, "lengths": FIXED, "num_requests": 30} | over


def refused(data: dict[str, Any], *words: str) -> None:
    with pytest.raises(ValidationError) as info:
        SynthSpec.model_validate(data)
    text = str(info.value)
    for word in words:
        assert word in text, (word, text)


@pytest.mark.parametrize(
    ("arrival", "words"),
    [
        (
            {"kind": "bursty", "on_rate_per_s": 1.0, "mean_on_s": 1e308, "mean_off_s": 1e308},
            ("mean_on_s", "1000000000"),
        ),
        (
            {"kind": "bursty", "on_rate_per_s": 1.0, "mean_on_s": 5e-324, "mean_off_s": 1e9},
            ("mean_on_s", "0.000001"),
        ),
        ({"kind": "gamma", "rate_per_s": 1.0, "cv": 5e-324}, ("cv", "0.001")),
        ({"kind": "gamma", "rate_per_s": 1.0, "cv": float("nan")}, ("cv", "finite")),
        (
            {"kind": "diurnal", "rate_curve_per_s": [1, 0], "period_s": float("inf")},
            ("period_s", "finite"),
        ),
        (
            {"kind": "diurnal", "rate_curve_per_s": [1e308, 1e308]},
            ("rate_curve_per_s.0", "1000000"),
        ),
        (
            {"kind": "diurnal", "rate_curve_per_s": [1, 1], "period_s": 1e308},
            ("period_s", "1000000000"),
        ),
        ({"kind": "diurnal", "rate_curve_per_s": [1, 1], "period_s": 0.5}, ("period_s", "1")),
    ],
)
def test_arrival_numbers_are_finite_and_in_range(
    arrival: dict[str, Any], words: tuple[str, ...]
) -> None:
    refused(spec(arrival=arrival), *words)


def test_huge_mixture_weights_refused_and_large_ones_normalise() -> None:
    comp = {"weight": 1e308, "lengths": FIXED}
    refused(spec(lengths={"kind": "mixture", "components": [comp, comp]}), "weight", "1000000")
    comp = {"weight": 1e6, "lengths": FIXED}
    ok = SynthSpec.model_validate(spec(lengths={"kind": "mixture", "components": [comp, comp]}))
    assert len(generate(ok, 1)) == 30


def test_lognormal_contradictions_and_huge_tokens_refused() -> None:
    ln = {"kind": "lognormal", "mean_tokens": 100, "cv": 1, "min_tokens": 5000, "max_tokens": 10}
    refused(spec(lengths=FIXED | {"prompt": ln}), "min_tokens (5000) must be <= max_tokens (10)")
    ln = {"kind": "lognormal", "mean_tokens": 100, "cv": 1, "min_tokens": 99999999999999999999999}
    refused(spec(lengths=FIXED | {"prompt": ln}), "min_tokens", "10000000")


def test_shared_prefix_cost_is_bounded_up_front() -> None:
    sp = {"fraction": 1, "prefix_tokens": 10_000_000, "block_tokens": 1}
    refused(spec(shared_prefix=sp), "prefix_tokens", "1048576")
    sp = {"fraction": 1, "prefix_tokens": 1 << 20, "block_tokens": 1}
    refused(spec(shared_prefix=sp, num_requests=100), "prefix_tokens", "50,000,000")


def test_prefix_hashes_of_long_prompts_are_bounded_before_allocation() -> None:
    lengths = FIXED | {"prompt": {"kind": "fixed", "tokens": 9_000_000}}
    sp = {"fraction": 0.5, "prefix_tokens": 16, "block_tokens": 1}
    s = SynthSpec.model_validate(spec(lengths=lengths, shared_prefix=sp))
    with pytest.raises(BoundError, match="50,000,000"):
        generate(s, 1)
