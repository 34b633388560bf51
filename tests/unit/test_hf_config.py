"""Models read from a Hugging Face config.json (sim.models): each shipped preset's KV
bytes per token, weights and KV capacity on a stated GPU, pinned against numbers worked
out here from the config by hand (the formulas written out, not calling the reader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from sim.models.hardware import GIB, GPUS
from sim.models.hf_config import HfConfigError, read_config
from sim.models.presets import CONFIG_DIR, shipped_model, shipped_names
from sim.scenario.hardware import HardwareConfig
from sim.scenario.schema import ScenarioError, load_scenario

H100 = GPUS["h100-80gb"].memory_bytes  # 81,559 MiB


def _blocks(rows: int, cols: int) -> int:
    """FP8 128x128 block scales of one matrix: ceil(rows/128) x ceil(cols/128)."""
    return -(-rows // 128) * -(-cols // 128)


def _capacity(gpu_bytes: int, weights: int, hidden: int, per_token: int, tp: int = 1) -> int:
    """vLLM's budget by hand: floor(mem x 0.9) - weights/tp - (1 GiB + 8192 x hidden x 2
    x 16), over the per-GPU KV bytes of one token."""
    usable = int(gpu_bytes * 0.9)
    activation = GIB + 8192 * hidden * 2 * 16
    return (usable - -(-weights // tp) - activation) // per_token


# (V, H, L, I, heads, kv, head_dim) as each config.json gives them.
LLAMA_8B = 128256, 4096, 32, 14336, 32, 8, 128
LLAMA_70B = 128256, 8192, 80, 28672, 64, 8, 128


def _llama_params(v: int, h: int, n: int, i: int, q: int, kv: int, d: int) -> int:
    # embed + lm_head (untied) + final norm; per layer q, k+v, o, gate/up/down, 2 norms
    return 2 * v * h + h + n * (h * q * d + h * 2 * kv * d + q * d * h + 3 * h * i + 2 * h)


def _gpt_oss_weights(layers: int, experts: int) -> tuple[int, int]:
    """(params, bytes): mxfp4 experts at 17/32 bytes a weight, the rest bf16."""
    v, h, m, q, kv, d = 201088, 2880, 2880, 64, 8, 64
    attn = h * q * d + h * 2 * kv * d + q * d * h + (q + 2 * kv) * d + h + q  # biases, sinks
    bf16 = 2 * v * h + h + layers * (attn + 2 * h + h * experts + experts + experts * (2 * m + h))
    mxfp4 = layers * 3 * experts * h * m
    return bf16 + mxfp4, 2 * bf16 + mxfp4 * 17 // 32


def test_the_shipped_presets_are_the_ten_named_and_jamba() -> None:
    assert shipped_names() == (
        "deepseek-v3",
        "gemma-3-27b",
        "gpt-oss-120b",
        "gpt-oss-20b",
        "jamba-1.5-mini",
        "llama-3.1-70b",
        "llama-3.1-8b",
        "nemotron-h-8b",
        "qwen3-30b-a3b",
        "qwen3-32b",
        "qwen3-8b",
    )
    for name in shipped_names():  # each file names where its numbers come from
        assert "huggingface.co" in json.loads((CONFIG_DIR / f"{name}.json").read_text())["_source"]


def test_llama_3_1_8b_on_one_h100() -> None:
    params = _llama_params(*LLAMA_8B)
    per_token = 2 * 32 * 8 * 128 * 2  # K and V x layers x KV heads x head_dim x bf16
    m = shipped_model("llama-3.1-8b")
    assert (
        (m.total_params, m.weights_bytes) == (params, 2 * params) == (8_030_261_248, 16_060_522_496)
    )
    budget = HardwareConfig(model="llama-3.1-8b", gpu="h100-80gb").resolve()
    assert budget.kv_bytes_per_token == per_token == 131_072
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * params, 4096, per_token)


def test_llama_3_1_70b_on_four_h100s() -> None:
    params = _llama_params(*LLAMA_70B)
    per_gpu_token = 2 * 80 * (8 // 4) * 128 * 2  # two KV heads per rank
    budget = HardwareConfig(model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel=4).resolve()
    assert params == 70_553_706_496
    assert budget.weights_bytes == 2 * params // 4
    assert budget.kv_bytes_per_token == per_gpu_token == 81_920
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * params, 8192, per_gpu_token, tp=4)


@pytest.mark.parametrize(
    ("name", "h", "n", "i", "q", "tp"),
    [("qwen3-8b", 4096, 36, 12288, 32, 1), ("qwen3-32b", 5120, 64, 25600, 64, 2)],
)
def test_qwen3_dense(name: str, h: int, n: int, i: int, q: int, tp: int) -> None:
    v, kv, d = 151936, 8, 128
    # untied embed + lm_head, final norm; per layer q, k+v, o, q/k norms, gated MLP, 2 norms
    params = (
        2 * v * h + h + n * (h * q * d + h * 2 * kv * d + q * d * h + 2 * d + 3 * h * i + 2 * h)
    )
    assert shipped_model(name).total_params == params
    per_gpu_token = 2 * n * (kv // tp) * d * 2
    budget = HardwareConfig(model=name, gpu="h100-80gb", tensor_parallel=tp).resolve()
    assert budget.kv_bytes_per_token == per_gpu_token
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * params, h, per_gpu_token, tp=tp)


def test_qwen3_30b_a3b_counts_every_expert_in_weights_and_eight_in_compute() -> None:
    v, h, n, q, kv, d, e, k, m = 151936, 2048, 48, 32, 4, 128, 128, 8, 768
    per_layer_dense = h * q * d + h * 2 * kv * d + q * d * h + 2 * d + h * e + 2 * h
    experts = 3 * h * m * e
    total = 2 * v * h + h + n * (per_layer_dense + experts)
    active = v * h + h + n * (per_layer_dense + experts * k // e)  # no input embedding lookup
    got = shipped_model("qwen3-30b-a3b")
    assert (got.total_params, got.active_params) == (total, active)
    per_token = 2 * 48 * 4 * 128 * 2
    budget = HardwareConfig(model="qwen3-30b-a3b", gpu="h100-80gb").resolve()
    assert budget.kv_bytes_per_token == per_token == 98_304
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * total, 2048, per_token)


@pytest.mark.parametrize(
    ("name", "layers", "experts"), [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)]
)
def test_gpt_oss_mxfp4_weights_and_half_sliding_layers(
    name: str, layers: int, experts: int
) -> None:
    params, weights = _gpt_oss_weights(layers, experts)
    got = shipped_model(name)
    assert (got.total_params, got.weights_bytes) == (params, weights)
    kinds = {k.kind: (k.layers, k.window_tokens) for k in got.layer_kinds}
    assert kinds == {"full_attention": (layers // 2, 0), "sliding_attention": (layers // 2, 128)}
    per_token = 2 * layers * 8 * 64 * 2  # every layer held as full attention (single pool)
    budget = HardwareConfig(model=name, gpu="h100-80gb").resolve()
    assert budget.kv_bytes_per_token == per_token
    assert budget.kv_capacity_tokens == _capacity(H100, weights, 2880, per_token)
    assert any("sliding-window" in note for note in got.engine_notes())


def test_gpt_oss_120b_is_the_published_117b_total_and_5_1b_active() -> None:
    got = shipped_model("gpt-oss-120b")
    assert round(got.total_params / 1e9, 1) == 116.8
    assert round(got.active_params / 1e9, 1) == 5.1


def test_gemma_3_27b_five_sliding_layers_to_one_global() -> None:
    v, h, n, q, kv, d, i = 262208, 5376, 62, 32, 16, 128, 21504
    params = v * h + h + n * (h * q * d + h * 2 * kv * d + q * d * h + 2 * d + 3 * h * i + 4 * h)
    got = shipped_model("gemma-3-27b")  # tied embeddings: the table counted once
    assert got.total_params == params
    kinds = {k.kind: k.layers for k in got.layer_kinds}
    assert kinds == {"full_attention": 62 // 6, "sliding_attention": 62 - 62 // 6}
    per_token = 2 * 62 * 16 * 128 * 2
    budget = HardwareConfig(model="gemma-3-27b", gpu="h100-80gb").resolve()
    assert budget.kv_bytes_per_token == per_token == 507_904
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * params, h, per_token)


def test_deepseek_v3_mla_latent_fp8_weights_and_fp8_kv_on_eight_h200s() -> None:
    v, h, n, heads, e, m, dense_i = 129280, 7168, 61, 128, 256, 2048, 18432
    attn_mats = [
        (h, 1536),
        (1536, heads * 192),
        (h, 512 + 64),
        (512, heads * 256),
        (heads * 128, h),
    ]
    dense_mats = [(h, dense_i)] * 2 + [(dense_i, h)]
    moe_mats = [(h, m)] * 3 * (e + 1)  # 256 routed + 1 shared expert, gate/up/down
    fp8 = n * sum(r * c for r, c in attn_mats) + 3 * sum(r * c for r, c in dense_mats)
    fp8 += (n - 3) * sum(r * c for r, c in moe_mats)
    scales = n * sum(_blocks(r, c) for r, c in attn_mats) + 3 * sum(
        _blocks(r, c) for r, c in dense_mats
    )
    scales += (n - 3) * sum(_blocks(r, c) for r, c in moe_mats)
    bf16 = 2 * v * h + h + n * (1536 + 512 + 2 * h) + (n - 3) * (h * e + e)  # norms, routers
    weights = fp8 + 4 * scales + 2 * bf16
    got = shipped_model("deepseek-v3")
    assert got.weights_bytes == weights
    assert got.total_params == fp8 + bf16
    assert round(got.total_params / 1e9) == 671 and round(got.active_params / 1e9) == 37
    per_token = 61 * (512 + 64) * 2  # one latent per token and layer, on every rank
    assert (
        HardwareConfig(model="deepseek-v3", gpu="h200-141gb", tensor_parallel=8)
        .resolve()
        .kv_bytes_per_token
        == per_token
    )
    config = {"config": str(CONFIG_DIR / "deepseek-v3.json"), "kv_cache_dtype": "fp8"}
    budget = HardwareConfig(model=config, gpu="h200-141gb", tensor_parallel=8).resolve()
    assert budget.kv_bytes_per_token == per_token // 2 == 35_136  # fp8 halves it
    assert budget.kv_capacity_tokens == _capacity(
        GPUS["h200-141gb"].memory_bytes, weights, h, per_token // 2, tp=8
    )


def test_nemotron_h_8b_attention_kv_and_mamba_state_per_request() -> None:
    got = shipped_model("nemotron-h-8b")
    conv = (4 - 1) * (128 * 64 + 2 * 8 * 128)  # (conv_kernel - 1) x conv_dim
    ssm = 128 * 64 * 128  # heads x head_dim x state
    assert got.mamba_state_bytes_per_request == 24 * (conv + ssm) * 2 == 51_806_208
    assert got.total_params == 8_100_852_736  # the published count of the checkpoint
    per_token = 2 * 4 * 8 * 128 * 2  # four attention layers hold KV
    budget = HardwareConfig(model="nemotron-h-8b", gpu="h100-80gb").resolve()
    assert budget.kv_bytes_per_token == per_token == 16_384
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * got.total_params, 4096, per_token)
    assert any("Mamba" in note for note in got.engine_notes())


def test_jamba_1_5_mini_attention_every_eighth_layer_mamba_1_state_moe_every_other() -> None:
    v, h, n, q, kv, d, f_, e, k = 65536, 4096, 32, 32, 8, 128, 14336, 16, 2
    inner, ds, dc, r = 2 * h, 16, 4, 256  # mamba_expand x hidden, d_state, d_conv, dt_rank
    attn = h * (q + 2 * kv) * d + q * d * h
    mamba = h * 2 * inner + inner * dc + inner + inner * (r + 2 * ds) + r * inner + inner
    mamba += inner * ds + inner + (r + 2 * ds) + inner * h  # A_log, D, dt/B/C norms, out_proj
    moe, dense = h * e + e * 3 * h * f_, 3 * h * f_
    total = 2 * v * h + h + n * 2 * h + 4 * attn + 28 * mamba + 16 * moe + 16 * dense
    got = shipped_model("jamba-1.5-mini")
    assert got.total_params == total
    assert round(total / 1e9, 1) == 51.6  # AI21's published 52B total, 12B active
    assert got.active_params == total - v * h - 16 * (e - k) * 3 * h * f_  # 2 of 16 experts
    assert round(got.active_params / 1e9) == 12
    assert got.mamba_state_bytes_per_request == 28 * ((dc - 1) * inner + inner * ds) * 2
    per_gpu_token = 2 * 4 * (kv // 2) * d * 2
    budget = HardwareConfig(model="jamba-1.5-mini", gpu="h100-80gb", tensor_parallel=2).resolve()
    assert budget.kv_bytes_per_token == per_gpu_token == 8_192
    assert budget.kv_capacity_tokens == _capacity(H100, 2 * total, h, per_gpu_token, tp=2)


def test_quantization_fp8_at_load_and_fp8_kv_for_a_shipped_preset() -> None:
    """Llama-3.1-70B served as vLLM --quantization fp8 --kv-cache-dtype fp8: every linear
    weight one byte (plus a 4-byte scale per matrix), embeddings, LM head and norms bf16."""
    v, h, n, i, q, kv, d = LLAMA_70B
    linear = n * (h * q * d + h * 2 * kv * d + q * d * h + 3 * h * i)
    rest = 2 * v * h + h + n * 2 * h
    model = {"preset": "llama-3.1-70b", "quantization": "fp8", "kv_cache_dtype": "fp8"}
    hw = HardwareConfig(model=model, gpu="h100-80gb", tensor_parallel=2)
    assert hw.hf_model is not None
    got = hw.hf_model.weights_bytes
    assert 0 < got - (linear + 2 * rest) <= 4 * 7 * n  # at most one scale per real matrix
    assert hw.resolve().kv_bytes_per_token == 2 * 80 * (8 // 2) * 128 * 1


def test_w4a16_gptq_weights(tmp_path: Path) -> None:
    data = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    data["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    v, h, n, i, q, kv, d = LLAMA_8B
    linear = n * (h * q * d + h * 2 * kv * d + q * d * h + 3 * h * i)
    rest = 2 * v * h + h + n * 2 * h
    # 4 bits a weight, and per group of 128 an fp16 scale and a 4-bit zero point
    expected = 2 * rest + linear // 2 + linear // 128 * 2 + linear // 128 // 2
    got = read_config(_write(tmp_path, data))
    assert got.weights_bytes == expected and got.weight_format == "W4A16 (gptq, group 128)"


def test_quantizing_a_quantised_checkpoint_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"already ships quantised .*'mxfp4'"):
        HardwareConfig(model={"preset": "gpt-oss-20b", "quantization": "fp8"})
    with pytest.raises(ValidationError, match="give one of config"):
        HardwareConfig(model={"preset": "gpt-oss-20b", "config": "x.json"})


# -- refusals: one line naming the file and the field ------------------------------------


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_missing_field_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    data = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    del data["vocab_size"]
    path = _write(tmp_path, data)
    with pytest.raises(HfConfigError, match=r"config\.json: field 'vocab_size' missing") as e:
        read_config(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_an_unknown_architecture_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, {"model_type": "mixtral", "num_hidden_layers": 32})
    with pytest.raises(HfConfigError, match="field 'model_type': unknown architecture 'mixtral'"):
        read_config(path)


def test_an_unknown_quantisation_is_refused(tmp_path: Path) -> None:
    data = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    data["quantization_config"] = {"quant_method": "bitsandbytes"}
    with pytest.raises(HfConfigError, match=r"quant_method.*'bitsandbytes' not known"):
        read_config(_write(tmp_path, data))


def test_qwen_sliding_window_applies_from_max_window_layers(tmp_path: Path) -> None:
    data = json.loads((CONFIG_DIR / "qwen3-8b.json").read_text())
    data.update(use_sliding_window=True, sliding_window=4096, max_window_layers=28)
    kinds = {
        k.kind: (k.layers, k.window_tokens) for k in read_config(_write(tmp_path, data)).layer_kinds
    }
    assert kinds == {"full_attention": (28, 0), "sliding_attention": (8, 4096)}


def test_tensor_parallel_must_split_the_kv_heads_of_a_config_model() -> None:
    with pytest.raises(ValidationError, match="must divide num_kv_heads=8"):
        HardwareConfig(model="llama-3.1-8b", gpu="h100-80gb", tensor_parallel=3)


# -- a scenario names a config.json relative to its own file ------------------------------


def test_a_scenario_reads_the_config_relative_to_its_file(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "my-llama"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "workload: {preset: bimodal}\n"
        "hardware: {model: {config: models/my-llama/config.json}, gpu: h100-80gb}\n"
        "allocator: {kind: paged}\n"
    )
    hw = load_scenario(str(scenario)).hardware
    assert hw.model_spec.name == "my-llama"
    assert hw.resolve().kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    scenario.write_text(
        "workload: {preset: bimodal}\nallocator: {kind: paged}\n"
        "hardware: {model: {config: missing/config.json}}\n"
    )
    with pytest.raises(ScenarioError, match=r"missing/config\.json: cannot read"):
        load_scenario(str(scenario))


def test_a_config_read_model_runs_end_to_end(tmp_path: Path) -> None:
    """gpt-oss-20b from its config.json through a run: its capacity and bytes per token
    reach the pool, and the roofline computes active (not total) parameters."""
    from support.scenarios import request_frame

    from sim import run
    from sim.scenario.schema import parse_scenario

    config = tmp_path / "config.json"
    config.write_text((CONFIG_DIR / "gpt-oss-20b.json").read_text())
    scenario = parse_scenario(
        {
            "workload": {"preset": "bimodal"},
            "hardware": {"model": {"config": str(config)}, "gpu": "h100-80gb"},
            "allocator": {"kind": "paged"},
        }
    )
    requests = request_frame([0.0, 0.1, 0.2, 0.3], [512, 2048, 64, 900], [64, 16, 200, 30])
    result = run(scenario, requests)
    assert len(result.requests) == 4
    assert result.summary.requests.by_status == {"ok": 4}
    _, weights = _gpt_oss_weights(24, 32)
    assert scenario.hardware.resolve().kv_capacity_tokens == _capacity(
        H100, weights, 2880, 2 * 24 * 8 * 64 * 2
    )
    spec = scenario.hardware.model_spec
    assert spec.compute_params == shipped_model("gpt-oss-20b").active_params < spec.num_params


def test_the_roofline_computes_active_params_and_a_hybrids_all_reduces_per_block() -> None:
    from sim.latency.models import RooflineLatency

    gpu = GPUS["h100-80gb"]
    moe = shipped_model("qwen3-30b-a3b")
    roof = RooflineLatency(moe.to_spec(), gpu, 2)
    assert roof.compute_per_token_s == 2.0 * moe.active_params / 2 / (gpu.dense_bf16_flops * 0.6)
    # Nemotron-H: 52 blocks, one all-reduce after each (not two per KV layer: 2 x 4)
    hybrid = RooflineLatency(shipped_model("nemotron-h-8b").to_spec(), gpu, 2)
    assert hybrid.fixed_s == 0.5e-3 + 52 * 10e-6
    dense = RooflineLatency(shipped_model("llama-3.1-8b").to_spec(), gpu, 2)
    assert dense.fixed_s == 0.5e-3 + 2 * 32 * 10e-6
