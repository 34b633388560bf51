"""Replay -> calibrate -> validate end to end on CPU: a tiny model, 50 requests."""

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")

import sim  # noqa: E402
import traces  # noqa: E402
from gpu_backend.calibrate import QUICK_GRID, calibrate, write_calibration  # noqa: E402
from gpu_backend.device import select_kernels, steady_cpu_timing  # noqa: E402
from gpu_backend.model import TINY, DecoderStack  # noqa: E402
from gpu_backend.validate import contiguous_baseline, scenario_dict, validate  # noqa: E402
from sim.latency.calibrated import CalibratedLatency  # noqa: E402

CPU = torch.device("cpu")


def write_trace(path: Path, n: int = 50, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.004, n))
    lines = ["request_id,arrival_s,prompt_tokens,output_tokens"]
    for i in range(n):
        lines.append(f"{i},{arrivals[i]:.6f},{rng.integers(8, 120)},{rng.integers(2, 24)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    steady_cpu_timing(CPU)
    d = tmp_path_factory.mktemp("gpu")
    trace = write_trace(d / "trace.csv")
    stack = DecoderStack(
        TINY, 2, dtype=torch.float32, device=CPU, kernels=select_kernels(CPU, "reference")
    )
    cal_path = write_calibration(calibrate(stack, QUICK_GRID), d / "cal.json")
    scenario = sim.parse_scenario(
        scenario_dict(
            trace,
            cal_path,
            TINY,
            kv_capacity_tokens=1024,
            max_seq_tokens=512,
            scheduler={"max_num_seqs": 16},
        )
    )
    requests = traces.load(trace)
    report, result = validate(requests, scenario, stack)
    return {
        "report": report,
        "result": result,
        "cal": cal_path,
        "scenario": scenario,
        "requests": requests,
    }


def test_calibration_file_loads_in_sim(run: dict) -> None:
    latency = CalibratedLatency.from_json(run["cal"])
    cal = latency.calibration
    assert cal.model == "tiny" and cal.gpu == "cpu" and cal.fit is not None
    assert cal.valid.prefill_tokens == (0, 128) and cal.valid.decode_seqs == (0, 4)
    assert {"torch", "triton", "device", "in_sample_mape", "hidden_size"} <= set(cal.source)
    assert cal.coefficients.per_prefill_token_sq_s >= 0
    result = sim.run(run["scenario"], run["requests"])  # the scenario names the file
    assert (result.requests["status"] == "ok").all()


def test_replay_holds_the_simulators_blocks_every_step(run: dict) -> None:
    report, result = run["report"], run["result"]
    steps = result.steps_frame()
    assert report["paged_blocks"]["identical"] and report["paged_blocks"]["steps_compared"] == len(
        steps
    )
    assert steps["blocks_in_use"].max() <= 1024 // 16 and steps["warmup"].sum() == 3
    assert (steps["measured_s"] > 0).all()
    assert (result.requests["status"] == "ok").all() and len(result.requests) == 50
    assert report["ok"] == {"simulated": 50, "replayed": 50}


def test_report_has_every_error(run: dict) -> None:
    report = run["report"]
    for key in ("ttft", "tpot", "e2e", "step_time"):
        assert report[key]["n"] > 0 and report[key]["p50"] <= report[key]["p99"]
    assert report["contiguous"] == {"measured": False, "note": "not measured on CPU"}


def test_contiguous_baseline_runs_on_cpu(run: dict) -> None:
    data = run["scenario"].model_dump(mode="json", exclude_none=True)
    data["hardware"]["kv_capacity_tokens"] = 1 << 20  # room for the model's 20 MiB segments
    out = contiguous_baseline(
        run["requests"], sim.parse_scenario(data), TINY, 2, torch.float32, CPU, False
    )
    assert out["model_refused_requests"] == 0 and out["tensor_failures"] == 0
    assert "torch" not in out
