"""A fleet run in the real Prometheus tools (the Debian package ``prometheus``, which
``make test`` installs; skipped, saying why, where ``promtool`` is absent):
``fragsim export openmetrics`` is backfilled by ``promtool tsdb create-blocks-from
openmetrics`` with every sample kept; ``fragsim alerts export``'s rules, over fragsim's
metric names and vLLM's, pass ``promtool check rules``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; make test)"
)

runner = CliRunner()

# Two pools, best-fit on a bimodal trace: allocation failures at high free memory, an
# autoscaler that adds replicas, ~10 minutes simulated in a few seconds.
FLEET = {
    "name": "prom-fleet",
    "mode": "fast",
    "workload": {
        "preset": "bimodal",
        "synth": {"duration_s": 600.0, "arrival": {"kind": "poisson", "rate_per_s": 0.5}},
    },
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
    "allocator": {"kind": "best_fit"},
    "latency": {"kind": "roofline"},
    "metrics": {"sample_interval_s": 10.0},
    "fleet": {
        "pools": [{"name": "a", "count": 1}, {"name": "b", "count": 1}],
        "router": {"kind": "least_outstanding"},
        "autoscaler": {"kind": "naive"},
        "lifecycle": {"provision": {"mean_s": 100.0}, "load": {"mean_s": 20.0}, "warmup_s": 10.0},
    },
}


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sim.runner import run
    from sim.scenario.schema import parse_scenario

    out = tmp_path_factory.mktemp("prom") / "run"
    run(parse_scenario(FLEET)).write(out)
    return out


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_promtool_backfills_every_exported_sample(fleet_run: Path, tmp_path: Path) -> None:
    metrics = tmp_path / "run.om"
    result = runner.invoke(app, ["export", "openmetrics", str(fleet_run), "-o", str(metrics)])
    assert result.exit_code == 0, result.output
    lines = metrics.read_text().splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    assert 'pool="b"' in metrics.read_text() and 'fragsim_fleet_replicas{state="active"}' in (
        metrics.read_text()
    )
    failures = [
        line
        for line in samples
        if line.startswith("fragsim_allocation_failures_at_high_free_memory_total")
    ]
    assert max(float(line.split(" ")[1]) for line in failures) > 0
    done = _promtool(
        "tsdb", "create-blocks-from", "openmetrics", str(metrics), str(tmp_path / "db")
    )
    assert done.returncode == 0, done.stderr
    # the block table: ULID, min, max, duration, samples, chunks, series, size
    rows = [row.split() for row in done.stdout.splitlines() if row[:1].isdigit()]
    assert rows and sum(int(row[-4]) for row in rows) == len(samples)


@pytest.mark.parametrize(
    ("metrics", "label"), [("fragsim", "replica"), ("vllm", "pod"), ("vllm", "instance")]
)
def test_exported_rules_pass_promtool_check_rules(tmp_path: Path, metrics: str, label: str) -> None:
    rules = tmp_path / "rules.yaml"
    args = ["--metrics", metrics, "--instance-label", label, "--runbook-url", "https://x/{alert}"]
    result = runner.invoke(app, ["alerts", "export", "-o", str(rules), *args])
    assert result.exit_code == 0, result.output
    checked = _promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
    text = rules.read_text()
    assert f"sum by ({label})" in text and "https://x/severe_fragmentation" in text
    assert ("vllm:num_preemptions_total" in text) == (metrics == "vllm")
    assert " offset " not in text and "for: 0s" not in text and "for: 5m" in text
