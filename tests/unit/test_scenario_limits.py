"""Every number a scenario holds has a documented range, checked before anything runs.

Contracts checked:

* every integer and float field of every block a scenario embeds (the scenario itself,
  workload, hardware and its inline model and GPU, scheduler, restart, metrics, each
  latency model, each allocator policy) has an upper bound; a value past it -- above
  64 bits, or 1e300 -- is refused at the field with the value as written and the limit;
* the roofline's efficiencies and link speed have sane lower bounds, and any latency
  model whose step at the scenario's extremes is not finite or takes over a minute is
  refused naming the ``latency`` block, before simulating (its counters untouched);
* client retries are bounded, and the span their backoff adds is counted before the
  run, naming ``scheduler.retry_attempts/retry_backoff_s``;
* a KV budget with no room left is one line with every term;
* messages quote numbers as the file wrote them (``got 1e9``).
"""

from __future__ import annotations

import json
import time
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from annotated_types import Le, Lt
from pydantic import BaseModel

import sim
from policies.allocators.registry import ALLOCATORS
from sim.runner import run
from sim.scenario.schema import Scenario, ScenarioError, load_scenario, parse_scenario
from sim.simulate.parts import build_parts, run_parts

BASE: dict[str, Any] = {
    "workload": {"preset": "chat", "synth": {"num_requests": 20}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
}
HUGE_INT = "99999999999999999999"  # above 2**64
HUGE_FLOAT = "1.0e+300"


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names (through unions, Annotated, lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def is_number(annotation: Any) -> bool:
    """int or float (possibly Optional or Annotated), not bool."""
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return is_number(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(is_number(a) for a in args)
    return False


def every_model() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Scenario, *ALLOCATORS.values()]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(models_in(field.annotation))
    return seen


def test_every_number_field_has_an_upper_bound() -> None:
    models = every_model()
    names = {m.__name__ for m in models}
    for expected in ("HardwareConfig", "ModelSpecConfig", "GpuSpecConfig", "SchedulerOptions"):
        assert expected in names, names
    unbounded = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if is_number(field.annotation) and not any(isinstance(m, Le | Lt) for m in field.metadata)
    ]
    assert unbounded == []


def write_scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def refused_text(tmp_path: Path, text: str, *words: str) -> str:
    """The one-line ScenarioError of loading ``text`` (and building its parts)."""
    path = write_scenario(tmp_path, text)
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        scenario = load_scenario(path)
        build_parts(scenario)
    assert time.perf_counter() - start < 30.0  # refused before simulating (hours)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    # the loader names the file; build_parts' errors get it from their caller (the CLI)
    assert message.startswith((f"{path}: field ", "field latency: ")), message
    for word in words:
        assert word in message, (word, message)
    return message


BASE_YAML = """\
workload: {preset: chat, synth: {num_requests: 20}}
allocator: {kind: best_fit}
"""

# (the scenario's YAML, the field the error names); the value is always past the limit.
PAST_THE_LIMIT = [
    (f"seed: {HUGE_INT}", "seed"),
    (f"duration_s: {HUGE_FLOAT}", "duration_s"),
    (f"initial_uptime_s: {HUGE_FLOAT}", "initial_uptime_s"),
    (f"hardware: {{kv_capacity_tokens: {HUGE_INT}}}", "hardware.kv_capacity_tokens"),
    (f"hardware: {{max_seq_tokens: {HUGE_INT}}}", "hardware.max_seq_tokens"),
    (f"hardware: {{weights_bytes: {HUGE_INT}}}", "hardware.weights_bytes"),
    (f"hardware: {{activation_reserve_bytes: {HUGE_INT}}}", "hardware.activation_reserve_bytes"),
    (f"hardware: {{tensor_parallel: {HUGE_INT}}}", "hardware.tensor_parallel"),
    (
        "hardware: {gpu: {memory_bytes: 85899345920, hbm_bytes_per_s: 2.0e12, "
        f"dense_bf16_flops: {HUGE_FLOAT}}}}}",
        "hardware.gpu.dense_bf16_flops",
    ),
    (
        "hardware: {model: {num_layers: 32, num_kv_heads: 32, head_dim: 128, hidden_size: "
        f"4096, max_seq_tokens: 4096, num_params: {HUGE_INT}}}}}",
        "hardware.model.num_params",
    ),
    (f"scheduler: {{max_num_seqs: {HUGE_INT}}}", "scheduler.max_num_seqs"),
    (f"scheduler: {{max_num_batched_tokens: {HUGE_INT}}}", "scheduler.max_num_batched_tokens"),
    ("scheduler: {retry_attempts: 21}", "scheduler.retry_attempts"),
    (f"scheduler: {{retry_backoff_s: {HUGE_FLOAT}}}", "scheduler.retry_backoff_s"),
    (f"scheduler: {{queue_timeout_s: {HUGE_FLOAT}}}", "scheduler.queue_timeout_s"),
    (f"scheduler: {{swap_bytes_per_s: {HUGE_FLOAT}}}", "scheduler.swap_bytes_per_s"),
    (f"restart: {{every_s: {HUGE_FLOAT}}}", "restart.every_s"),
    (f"restart: {{every_s: 60, downtime_s: {HUGE_FLOAT}}}", "restart.downtime_s"),
    (f"metrics: {{sample_interval_s: {HUGE_FLOAT}}}", "metrics.sample_interval_s"),
    (
        f"latency: {{kind: roofline, tp_link_bytes_per_s: {HUGE_FLOAT}}}",
        "latency.tp_link_bytes_per_s",
    ),
    (f"latency: {{kind: constant, step_s: {HUGE_FLOAT}}}", "latency.step_s"),
]


@pytest.mark.parametrize(("line", "field"), PAST_THE_LIMIT)
def test_a_number_past_its_limit_is_refused_at_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    written = HUGE_INT if HUGE_INT in line else HUGE_FLOAT if HUGE_FLOAT in line else "21"
    refused_text(
        tmp_path,
        BASE_YAML + line + "\n",
        f"field {field}: got {written}: ",
        "less than or equal to",
    )


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"rate_scale": 1e300}, "workload.rate_scale"),
        ({"tile_to_s": 1e300}, "workload.tile_to_s"),
        ({"max_requests": 10**20}, "workload.max_requests"),
    ],
)
def test_workload_numbers_have_limits(block: dict[str, Any], field: str) -> None:
    data = BASE | {"workload": BASE["workload"] | block}
    with pytest.raises(ScenarioError, match=rf"field {field}: got .*less than or equal"):
        parse_scenario(data)


def test_an_allocator_number_past_its_limit_is_refused() -> None:
    data = BASE | {"allocator": {"kind": "best_fit", "initial_extra_tokens": 10**20}}
    with pytest.raises(ScenarioError, match=r"allocator\.initial_extra_tokens.*less than"):
        parse_scenario(data)


def test_a_kv_capacity_past_64_bits_never_reaches_the_results(tmp_path: Path) -> None:
    """Once a run that crashed writing its results (``OverflowError`` in pyarrow)."""
    data = BASE | {"hardware": {"kv_capacity_tokens": 10**20}}
    with pytest.raises(ScenarioError, match=r"hardware.kv_capacity_tokens: got 10{20}"):
        parse_scenario(data)
    largest = BASE | {"hardware": {"kv_capacity_tokens": 2**40}}
    result = sim.run(parse_scenario(largest))
    result.write(tmp_path / "out")
    assert sim.read_result(tmp_path / "out").summary.kv_capacity_tokens == 2**40


# -- latency --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latency", "field"),
    [
        ("{kind: roofline, mem_efficiency: 1.0e-300}", "latency.mem_efficiency"),
        ("{kind: roofline, compute_efficiency: 1.0e-300}", "latency.compute_efficiency"),
        ("{kind: roofline, tp_link_bytes_per_s: 1.0e-300}", "latency.tp_link_bytes_per_s"),
        ("{kind: constant, step_s: 1.0e-300}", "latency.step_s"),
    ],
)
def test_roofline_factors_have_sane_lower_bounds(tmp_path: Path, latency: str, field: str) -> None:
    refused_text(
        tmp_path,
        BASE_YAML + f"latency: {latency}\n",
        f"field {field}",
        "got 1.0e-300",
        "greater than or equal to",
    )


def test_a_step_over_a_minute_at_the_extremes_is_refused_naming_latency(tmp_path: Path) -> None:
    """Each factor within its range, the combination absurd: GPUs at the least bandwidth
    and FLOP/s allowed; a 70B model on eight GPUs at 1 % efficiency over a slow link.
    Refused when the parts are built, not after simulating."""
    slow_gpu = "{memory_bytes: 85899345920, hbm_bytes_per_s: 1.0e9, dense_bf16_flops: 1.0e9}"
    message = refused_text(
        tmp_path,
        BASE_YAML + f"hardware: {{gpu: {slow_gpu}, kv_capacity_tokens: 20000}}\n",
        "field latency:",
        "roofline",
        "at most 60 s",
        "prefill tokens",
    )
    assert "sample_interval_s" not in message
    tp = (
        "hardware: {model: llama-2-70b, gpu: h100-80gb, tensor_parallel: 8}\n"
        "latency: {kind: roofline, tp_link_bytes_per_s: 1.0e9, mem_efficiency: 0.01,"
        " compute_efficiency: 0.01}\n"
        "scheduler: {max_num_batched_tokens: 16384}\n"
    )
    refused_text(tmp_path, BASE_YAML + tp, "field latency:", "at most 60 s")
    path = write_scenario(tmp_path, BASE_YAML + "latency: {kind: roofline}\n")
    build_parts(load_scenario(path))  # the defaults are far from the limit


def test_the_step_check_leaves_a_calibrated_model_uncounted(tmp_path: Path) -> None:
    """Its extremes lie outside the file's validity range: the check must not count
    them as steps the run evaluated there (the summary reports those)."""
    calibration = {
        "format": "fragsim-latency/1",
        "model": "llama-2-7b",
        "gpu": "a100-80gb",
        "coefficients": {
            "intercept_s": 0.007,
            "per_prefill_token_s": 6.1e-05,
            "per_decode_seq_s": 4.0e-05,
            "per_kv_token_s": 3.2e-08,
        },
        "valid": {"prefill_tokens": [0, 16], "decode_seqs": [0, 2], "kv_tokens": [0, 64]},
    }
    (tmp_path / "lat.json").write_text(json.dumps(calibration))
    path = write_scenario(tmp_path, BASE_YAML + "latency: {kind: calibrated, path: lat.json}\n")
    scenario = load_scenario(path)
    parts = run_parts(scenario)
    # The probe counted nothing, and runs sharing the parts count only their own steps.
    first, again = (run(scenario, parts=parts).summary.latency for _ in range(2))
    assert first == again and first.out_of_range_calls > 0


# -- retries --------------------------------------------------------------------------


def test_retry_backoff_counts_in_the_span_before_simulating(tmp_path: Path) -> None:
    retries = (
        "scheduler: {on_admission_failure: reject, retry_attempts: 20, retry_backoff_s: 100}\n"
    )
    path = write_scenario(tmp_path, BASE_YAML + retries)
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        sim.run(load_scenario(path))
    assert time.perf_counter() - start < 30.0  # refused before simulating (hours)
    message = str(info.value)
    assert message.startswith("field scheduler.retry_attempts/retry_backoff_s: "), message
    assert "20 client retries" in message and "104,857,500 s" in message
    # a modest backoff is no cost: 20 retries after 1 s each doubling span 12 days
    modest = "scheduler: {on_admission_failure: reject, retry_attempts: 20, retry_backoff_s: 1}\n"
    sim.run(load_scenario(write_scenario(tmp_path, BASE_YAML + modest)))


# -- messages -------------------------------------------------------------------------


def test_a_budget_without_kv_memory_is_one_line(tmp_path: Path) -> None:
    message = refused_text(
        tmp_path,
        BASE_YAML + "hardware: {memory_utilization: 0.05}\n",
        "no KV-cache memory left",
        "usable_bytes 4,294,967,296",
        "kv_capacity_tokens 0",
    )
    assert len(message) < 600


@pytest.mark.parametrize(
    ("line", "quoted"),
    [
        (
            "workload: {preset: chat, synth: {num_requests: 1e9}}",
            "field workload.synth.num_requests: got 1e9:",
        ),
        ("workload: {preset: chat, synth: {num_requests: 2.0E+9}}", "got 2.0E+9:"),
        ("duration_s: 2e9", "field duration_s: got 2e9:"),
        ("scheduler: {max_num_seqs: 1e5}", "field scheduler.max_num_seqs: got 1e5:"),
        ("metrics: {sample_interval_s: -0.0}", "got -0.0:"),
    ],
)
def test_numbers_are_quoted_as_written(tmp_path: Path, line: str, quoted: str) -> None:
    text = "allocator: {kind: best_fit}\n" + line + "\n"
    if "workload" not in line:
        text += "workload: {preset: chat, synth: {num_requests: 20}}\n"
    refused_text(tmp_path, text, quoted)


def test_yaml_numbers_as_written_equal_the_numbers() -> None:
    """Written numbers only change messages: a valid scenario is the same either way."""
    text = yaml.safe_dump(BASE | {"seed": 7, "duration_s": 1e3})
    from sim.scenario.yaml_loader import load_yaml

    plain, written = load_yaml(text), load_yaml(text, written=True)
    assert plain == written
    assert parse_scenario(plain) == parse_scenario(written)
