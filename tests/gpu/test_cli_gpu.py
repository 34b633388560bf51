"""``fragsim calibrate / validate / gpu-bench``: one-line errors, and a CPU run."""

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.gpu

from sim.cli import app  # noqa: E402

runner = CliRunner()


def fragsim(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.output


def test_without_torch_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, out = fragsim("calibrate", "-o", str(tmp_path / "c.json"), "--device", "cpu")
    assert code == 2 and out.strip().splitlines() == [
        "error: fragsim calibrate needs the gpu extra: pip install 'fragsim[gpu]'"
    ]
    assert fragsim("gpu-bench")[0] == 2


def test_bad_options_and_files(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
    code, out = fragsim("calibrate", "-o", str(tmp_path / "c.json"), "--device", "tpu")
    assert code == 2 and "--device: got 'tpu'" in out and len(out.strip().splitlines()) == 1
    code, out = fragsim("gpu-bench", "--device", "tpu")
    assert code == 2 and out.strip().splitlines() == [
        "error: fragsim gpu-bench: --device: got 'tpu'; allowed: cuda, cpu"
    ]
    code, out = fragsim(
        "calibrate", "-o", str(tmp_path / "c.json"), "--device", "cpu", "--model", "gpt-5"
    )
    assert code == 2 and "unknown model preset" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    trace = tmp_path / "t.csv"
    trace.write_text("request_id,arrival_s,prompt_tokens,output_tokens\n0,0.0,10,2\n")
    code, out = fragsim(
        "validate",
        str(trace),
        "--calibration",
        str(bad),
        "-o",
        str(tmp_path / "o"),
        "--device",
        "cpu",
    )
    assert code == 2 and "bad latency calibration" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_calibrate_then_validate_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
    cal = tmp_path / "cal.json"
    code, out = fragsim(
        "calibrate",
        "--model",
        "tiny",
        "--layers",
        "2",
        "--device",
        "cpu",
        "--quick",
        "--kernels",
        "reference",
        "-o",
        str(cal),
    )
    assert code == 0 and out.startswith(f"wrote {cal}")
    trace = tmp_path / "t.csv"
    rows = [f"{i},{i * 0.01:.2f},{20 + 7 * i},{2 + i % 5}" for i in range(12)]
    trace.write_text("request_id,arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    code, out = fragsim(
        "validate",
        str(trace),
        "--calibration",
        str(cal),
        "-o",
        str(tmp_path / "o"),
        "--device",
        "cpu",
        "--kernels",
        "reference",
        "--kv-capacity-tokens",
        "2048",
    )
    assert code == 0, out
    assert {p.name for p in (tmp_path / "o").iterdir()} == {
        "validation.json",
        "steps.csv",
        "replay_requests.csv",
    }
