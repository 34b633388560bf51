"""Calibration files a scenario names: what loading refuses, and how it says so.

Contracts checked: coefficients must be >= 0, the fastest step of the validity range
must take time and the slowest at most ``MAX_STEP_S`` (so 1e308 cannot overflow a run
into inf); numbers are JSON numbers, not strings; a key given twice, a file that is not
UTF-8, not a regular file or too big is refused naming the calibration file; through a
scenario, the message names the scenario, ``latency.path`` and the calibration file;
a file that passes runs to positive times.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import sim
from sim.latency.calibrated import MAX_STEP_S, CalibratedLatency
from sim.scenario.schema import ScenarioError, parse_scenario


def document(**coefficients: Any) -> dict[str, Any]:
    return {
        "format": "fragsim-latency/1",
        "model": "llama-2-7b",
        "gpu": "a100-80gb",
        "coefficients": {
            "intercept_s": 7e-3,
            "per_prefill_token_s": 6e-5,
            "per_decode_seq_s": 4e-5,
            "per_kv_token_s": 3e-8,
        }
        | coefficients,
        "valid": {"prefill_tokens": [0, 8192], "decode_seqs": [0, 256], "kv_tokens": [0, 262144]},
    }


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("coefficients", "words"),
    [
        ({"intercept_s": -1.0}, ("coefficients.intercept_s", "-1.0", ">= 0")),
        ({"per_decode_seq_s": -4e-5}, ("coefficients.per_decode_seq_s", ">= 0")),
        ({"per_prefill_token_sq_s": -1e-12}, ("per_prefill_token_sq_s", ">= 0")),
        ({"per_kv_token_s": 1e308}, ("coefficients", f"at most {MAX_STEP_S:g} s")),
        ({"intercept_s": 1e308, "per_prefill_token_s": 1e308}, ("at most",)),
        ({"intercept_s": 61.0}, ("61", "at most")),
        (
            {"intercept_s": 0.0, "per_prefill_token_s": 0.0, "per_decode_seq_s": 0.0},
            ("fastest step", "takes 0 s"),
        ),
        ({"intercept_s": "0.007"}, ("coefficients.intercept_s", "'0.007'", "valid number")),
        ({"intercept_s": True}, ("coefficients.intercept_s",)),
    ],
)
def test_unusable_coefficients_are_refused(
    tmp_path: Path, coefficients: dict[str, Any], words: tuple[str, ...]
) -> None:
    path = write_json(tmp_path / "cal.json", document(**coefficients))
    with pytest.raises(ValueError) as info:
        CalibratedLatency.from_json(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_a_step_of_no_time_is_fine_only_outside_the_range(tmp_path: Path) -> None:
    """No intercept, but every step of the range has a token or a sequence to pay for."""
    path = write_json(tmp_path / "cal.json", document(intercept_s=0.0))
    assert CalibratedLatency.from_json(path).step_time_s(0, 1, 0) > 0


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"format": "fragsim-latency/1", "format": "x"}', ("'format' given twice",)),
        (b'{"model": "caf\xe9"}', ("not UTF-8", "0xe9", "offset 14")),
        (b"[" * 100_000 + b"]" * 100_000, ("nested too deeply",)),
        (b"{not json", ("cannot read",)),
    ],
)
def test_unreadable_files_name_the_file(
    tmp_path: Path, content: bytes, words: tuple[str, ...]
) -> None:
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        CalibratedLatency.from_json(path)
    message = str(info.value)
    assert message.startswith(f"{path}: cannot read latency calibration: "), message
    for word in words:
        assert word in message, (word, message)


def test_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cal.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        CalibratedLatency.from_json(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        CalibratedLatency.from_json(tmp_path)


SCENARIO: dict[str, Any] = {
    "workload": {"preset": "chat", "synth": {"num_requests": 30}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
}


def test_through_a_scenario_the_message_names_latency_path_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_bytes(b"\xff\xfe{}")
    data = SCENARIO | {"latency": {"kind": "calibrated", "path": str(path)}}
    with pytest.raises(ScenarioError) as info:
        sim.run(parse_scenario(data, source="s.yaml"))
    assert str(info.value).startswith(f"field latency.path: {path}: cannot read")
    assert "not UTF-8" in str(info.value)


def test_negative_coefficients_never_reach_a_run(tmp_path: Path) -> None:
    """The issue's case: negative coefficients ran to a finish at -138.6 s, exit 0."""
    path = write_json(tmp_path / "cal.json", document(intercept_s=-0.5, per_decode_seq_s=-1e-2))
    data = SCENARIO | {"latency": {"kind": "calibrated", "path": str(path)}}
    with pytest.raises(ScenarioError, match=r"latency\.path.*intercept_s"):
        sim.run(parse_scenario(data))


def test_a_good_file_runs_to_positive_times_quickly(tmp_path: Path) -> None:
    path = write_json(tmp_path / "cal.json", document())
    data = SCENARIO | {"latency": {"kind": "calibrated", "path": str(path)}}
    start = time.perf_counter()
    result = sim.run(parse_scenario(data))
    assert time.perf_counter() - start < 10
    ok = result.requests[result.requests["status"] == "ok"]
    assert len(ok) > 20 and (ok["finish_s"] > ok["arrival_s"]).all()


def test_a_leading_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(document()).encode())
    assert CalibratedLatency.from_json(path).calibration.model == "llama-2-7b"


def test_a_number_of_too_many_digits_is_worded(tmp_path: Path) -> None:
    path = tmp_path / "long.json"
    path.write_text(
        json.dumps(document()).replace('"tensor_parallel"', '"x"')[:-1]
        + ', "tensor_parallel": '
        + "9" * 5000
        + "}"
    )
    with pytest.raises(ValueError) as info:
        CalibratedLatency.from_json(path)
    message = str(info.value)
    assert str(path) in message and "too many digits (5,000" in message, message
    assert "set_int_max_str_digits" not in message and "\n" not in message
