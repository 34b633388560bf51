"""The device check script's logic, on CPU at tiny shapes (``--cpu --quick``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
pytest.importorskip("triton", reason="the device check's kernel benchmark needs triton")

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_cpu_quick_prints_one_table(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    proc = subprocess.run(
        [str(ROOT / "gpu_backend" / "device_check.sh"), "--cpu", "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fragsim device check on cpu")
    text = proc.stdout
    for label in (
        "decode b=2 ctx=64",
        "copy bandwidth",
        "calibration (tiny",
        "validation e2e error",
        "paged blocks, sim vs replay",
        "contiguous baseline",
    ):
        assert label in text
    assert "not measured on CPU" in text and "identical over" in text
    assert {"calibration.json", "device_check.json", "steps.csv", "trace.csv"} <= {
        p.name for p in tmp_path.iterdir()
    }
