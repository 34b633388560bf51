"""Presets, KV bytes per token and the replica's KV budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.fleet import fleet_data, run_fleet_data
from support.scenarios import request_frame

from sim.models.hardware import (
    GIB,
    GPUS,
    MIB,
    MODELS,
    GpuSpec,
    ModelSpec,
    default_activation_reserve_bytes,
    kv_bytes_per_token,
    kv_heads_per_gpu,
)
from sim.results.summary_model import Fleet
from sim.scenario.hardware import HardwareConfig

HARDWARE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "hardware-latency.md"


@pytest.mark.parametrize(
    ("name", "expected_bytes"),
    [
        ("llama-2-7b", 2 * 32 * 32 * 128 * 2),  # 524,288: MHA
        ("llama-3-8b", 2 * 32 * 8 * 128 * 2),  # 131,072: GQA 32/8
        ("llama-2-70b", 2 * 80 * 8 * 128 * 2),
        ("opt-13b", 2 * 40 * 40 * 128 * 2),
        ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),
    ],
)
def test_kv_bytes_per_token_of_known_models(name: str, expected_bytes: int) -> None:
    assert kv_bytes_per_token(MODELS[name]) == expected_bytes


def test_kv_bytes_per_token_under_tensor_parallelism() -> None:
    llama7 = MODELS["llama-2-7b"]
    assert kv_bytes_per_token(llama7, tp=2) == 524_288 // 2
    llama70 = MODELS["llama-3-70b"]
    assert kv_heads_per_gpu(llama70, 8) == 1
    # more ranks than KV heads: each rank keeps one (replicated) head
    assert kv_heads_per_gpu(llama70, 16) == 1
    assert kv_bytes_per_token(llama70, 16) == 2 * 80 * 1 * 128 * 2
    with pytest.raises(ValueError, match=">= 1"):
        kv_bytes_per_token(llama70, 0)


def test_presets_cover_the_issue_and_are_read_only() -> None:
    assert {
        "opt-13b",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3-70b",
        "mistral-7b",
        "qwen2.5-7b",
    } <= set(MODELS)
    assert {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4", "a10g"} <= set(GPUS)
    with pytest.raises(TypeError):
        MODELS["x"] = MODELS["llama-2-7b"]  # type: ignore[index]
    # parameter counts are the real ones (weights in bf16 ~ 2 bytes/param)
    assert MODELS["llama-2-7b"].weights_bytes == 13_476_831_232
    assert 69e9 < MODELS["llama-3-70b"].num_params < 71e9


def test_the_docs_list_every_preset() -> None:
    section = HARDWARE_PAGE.read_text(encoding="utf-8")
    section = section[section.index("## Presets") : section.index("## KV capacity")]
    for name in (*MODELS, *GPUS):
        assert f"`{name}`" in section, name
    for name, gpu in GPUS.items():  # one price table: the docs print the presets' prices
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
        assert row.rstrip(" |").endswith(f"| {gpu.usd_per_hour:.2f}"), row


# -- prices -------------------------------------------------------------------------------


def _fleet_bill(gpu: str, tensor_parallel: int, **pool: Any) -> Fleet:
    """The fleet summary of two replicas of ``gpu`` serving one hour."""
    hardware = {"gpu": gpu, "tensor_parallel": tensor_parallel}
    data = fleet_data(
        pools=[{"name": "p", "count": 2, "hardware": hardware, **pool}], sample_interval_s=600.0
    )
    df = request_frame([0.0, 3599.0], [100, 100], [10, 100])  # ends at 3,600 s
    fleet = run_fleet_data(data, df).summary.fleet
    assert fleet is not None
    assert fleet.replica_hours == pytest.approx(2.0)
    return fleet


@pytest.mark.parametrize(("gpu", "tp"), [("a100-80gb", 1), ("h100-80gb", 2)])
def test_a_pool_costs_its_gpu_presets_price_times_gpus_per_replica(gpu: str, tp: int) -> None:
    fleet = _fleet_bill(gpu, tp)
    replica_usd_per_hour = HardwareConfig(gpu=gpu, tensor_parallel=tp).replica_usd_per_hour
    assert replica_usd_per_hour == tp * GPUS[gpu].usd_per_hour  # what fragsim hardware prints
    assert fleet.cost_usd == pytest.approx(2.0 * replica_usd_per_hour)


def test_a_pools_own_price_overrides_the_preset() -> None:
    assert _fleet_bill("a100-80gb", 2, usd_per_gpu_hour=3.0).cost_usd == pytest.approx(12.0)
    assert _fleet_bill("a100-80gb", 1, usd_per_gpu_hour=0.0).cost_usd == 0.0


def test_llama2_7b_on_a100_80gb_capacity_arithmetic() -> None:
    budget = HardwareConfig(model="llama-2-7b", gpu="a100-80gb").resolve()
    usable = int(81_920 * MIB * 0.9)
    weights = 6_738_415_616 * 2
    activation = GIB + 8192 * 4096 * 2 * 16  # 2 GiB
    assert budget.usable_bytes == usable == 77_309_411_328
    assert budget.weights_bytes == weights
    assert (
        budget.activation_reserve_bytes
        == activation
        == default_activation_reserve_bytes(MODELS["llama-2-7b"])
    )
    assert budget.kv_bytes == usable - weights - activation
    assert budget.kv_bytes_per_token == 524_288
    assert budget.kv_capacity_tokens == (usable - weights - activation) // 524_288 == 117_654
    assert budget.capacity_source == "derived"
    assert budget.replica_kv_bytes_per_token == 524_288


def test_tensor_parallel_splits_weights_and_kv_but_not_token_capacity_terms() -> None:
    budget = HardwareConfig(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4).resolve()
    assert budget.weights_bytes == -(-MODELS["llama-2-70b"].weights_bytes // 4)
    assert budget.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2
    assert budget.kv_capacity_tokens == budget.kv_bytes // budget.kv_bytes_per_token
    assert budget.replica_kv_bytes_per_token == 4 * budget.kv_bytes_per_token
    config = HardwareConfig(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4)
    assert config.replica_usd_per_hour == pytest.approx(4 * GPUS["h100-80gb"].usd_per_hour)


def test_overrides_replace_each_term() -> None:
    config = HardwareConfig(
        weights_bytes=10 * GIB,
        activation_reserve_bytes=0,
        memory_utilization=0.5,
        max_seq_tokens=16384,
    )
    budget = config.resolve()
    assert budget.weights_bytes == 10 * GIB
    assert budget.activation_reserve_bytes == 0
    assert budget.kv_bytes == int(81_920 * MIB * 0.5) - 10 * GIB
    assert config.model_spec.max_seq_tokens == 16384
    assert MODELS["llama-2-7b"].max_seq_tokens == 4096  # the preset is untouched


def test_kv_capacity_override_is_used_directly() -> None:
    # even where the derived budget would not fit
    budget = HardwareConfig(model="llama-2-70b", kv_capacity_tokens=1000).resolve()
    assert budget.kv_capacity_tokens == 1000
    assert budget.capacity_source == "override"
    assert budget.kv_bytes == 1000 * kv_bytes_per_token(MODELS["llama-2-70b"])
    assert "override" in budget.describe()


def test_inline_model_and_gpu() -> None:
    config = HardwareConfig.model_validate(
        {
            "model": {
                "name": "tiny",
                "num_layers": 2,
                "num_kv_heads": 2,
                "head_dim": 64,
                "num_params": 1_000_000,
                "hidden_size": 128,
                "max_seq_tokens": 512,
            },
            "gpu": {
                "name": "toy",
                "memory_bytes": 1 * GIB,
                "hbm_bytes_per_s": 1e11,
                "dense_bf16_flops": 1e13,
            },
            "activation_reserve_bytes": 0,
        }
    )
    assert config.model_spec == ModelSpec("tiny", 2, 2, 64, 2, 1_000_000, 128, 512)
    assert config.gpu_spec == GpuSpec("toy", GIB, 1e11, 1e13, 0.0)
    budget = config.resolve()
    assert budget.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert budget.kv_capacity_tokens == (int(GIB * 0.9) - 2_000_000) // 1024


def test_unknown_preset_lists_allowed_names() -> None:
    with pytest.raises(ValueError, match=r"unknown model preset 'llama-9'.*llama-2-7b"):
        HardwareConfig(model="llama-9")
    with pytest.raises(ValueError, match=r"unknown gpu preset 'b200'.*h100-80gb"):
        HardwareConfig(gpu="b200")


@pytest.mark.parametrize(
    "fields",
    [
        {"memory_utilization": 0.0},
        {"memory_utilization": 1.5},
        {"tensor_parallel": 0},
        {"kv_capacity_tokens": 0},
        {"weights_bytes": -1},
        {"gpu_memory": 1},  # not a field
    ],
)
def test_bad_fields_are_rejected(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HardwareConfig.model_validate(fields)


def test_budget_without_kv_memory_shows_every_term() -> None:
    with pytest.raises(ValueError, match="no KV-cache memory") as info:
        HardwareConfig(model="llama-2-70b", gpu="a100-80gb")
    message = str(info.value)
    for term in (
        "gpu_memory_bytes",
        "memory_utilization",
        "usable_bytes",
        "weights_bytes",
        "activation_reserve_bytes",
        "kv_bytes",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
    ):
        assert term in message


def test_tensor_parallel_must_fit_the_kv_heads() -> None:
    with pytest.raises(ValueError, match="must divide num_kv_heads"):
        HardwareConfig(model="llama-3-8b", tensor_parallel=3)
    HardwareConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=16)  # replicated


def test_specs_check_themselves() -> None:
    with pytest.raises(ValueError, match="num_layers"):
        ModelSpec("bad", 0, 1, 1, 2, 1, 1, 1)
    with pytest.raises(ValueError, match="hbm_bytes_per_s"):
        GpuSpec("bad", 1, 0.0, 1.0, 1.0)


def test_every_small_model_fits_every_large_gpu() -> None:
    for model in ("llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "opt-13b"):
        for gpu in ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"):
            budget = HardwareConfig(model=model, gpu=gpu).resolve()
            assert budget.kv_capacity_tokens > 1000, (model, gpu)
