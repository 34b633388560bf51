"""A real Prometheus for tests: the Debian package's ``promtool`` and ``prometheus``
(absent: the tests that need them skip, saying why), a backfill of ``fragsim export
openmetrics``'s text, and a server on 127.0.0.1 over it, stopped when the test ends."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
MISSING = "promtool/prometheus not installed (Debian package prometheus; make test)"

# tests/e2e/test_prometheus.py's fleet. Two pools up an hour already, best-fit on a bimodal trace: allocation failures at high
# free memory, fragmentation rising with uptime (the uptime alert fires: its window is an
# hour), an autoscaler that adds replicas to the second pool, ~10 minutes simulated in a
# few seconds; sampled every 120 s, more sparsely than the 30 s scrapes, as long runs are
# (the six-day seed-postmortem: 300 s).
ALERTING_FLEET: dict[str, Any] = {
    "name": "prom-fleet",
    "mode": "fast",
    "workload": {
        "preset": "bimodal",
        "synth": {"duration_s": 600.0, "arrival": {"kind": "poisson", "rate_per_s": 1.0}},
    },
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "max_seq_tokens": 32768},
    "allocator": {"kind": "best_fit"},
    "latency": {"kind": "roofline"},
    "metrics": {"sample_interval_s": 120.0},
    "fleet": {
        "pools": [
            {"name": "a", "count": 1, "initial_uptime_s": 3600.0},
            {"name": "b", "count": 1, "initial_uptime_s": 3600.0},
        ],
        "scale_pool": "b",
        "router": {"kind": "least_outstanding"},
        "autoscaler": {"kind": "naive"},
        "lifecycle": {"provision": {"mean_s": 100.0}, "load": {"mean_s": 20.0}, "warmup_s": 10.0},
    },
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS``, its output captured (never raises on a non-zero status)."""
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False
    )


def backfill(metrics: Path, data: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics METRICS DATA``; fails the test
    with promtool's stderr when it fails."""
    done = promtool("tsdb", "create-blocks-from", "openmetrics", str(metrics), str(data))
    assert done.returncode == 0, done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    """The JSON the server answers at ``url`` (on 127.0.0.1)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@contextmanager
def serve(data: Path, config: Path) -> Iterator[str]:
    """A Prometheus server over the TSDB in ``data`` with ``config``, listening on a
    free port of 127.0.0.1 (retention 100 y: a backfill is old); yields its base URL
    once it answers, and stops it on exit."""
    assert PROMETHEUS is not None
    port = free_port()
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                get_json(base + "/api/v1/status/buildinfo")
                break
            except OSError:
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def query_range(base: str, expr: str, start_s: float, end_s: float, step_s: float) -> Any:
    """``/api/v1/query_range``'s result list for ``expr`` (raises on an error answer)."""
    query = urllib.parse.urlencode({"query": expr, "start": start_s, "end": end_s, "step": step_s})
    try:
        answer = get_json(f"{base}/api/v1/query_range?{query}")
    except urllib.error.HTTPError as e:  # a bad query: 400 with the server's reason
        raise AssertionError(f"{expr}: {e.read().decode(errors='replace')}") from None
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def scrape_instants(rows: pd.DataFrame, opening: str, last_s: float) -> list[float]:
    """The 30 s scrapes from each ``opening`` row to its episode's ``resolved`` row."""
    instants: list[float] = []
    on: float | None = None
    for time_s, state in zip(rows["time_s"], rows["state"], strict=True):
        if state == opening:
            on = float(time_s)
        elif state == "resolved" and on is not None:
            instants += [30.0 * k for k in range(round(on / 30), round(time_s / 30))]
            on = None
    if on is not None:
        instants += [30.0 * k for k in range(round(on / 30), round(last_s / 30) + 1)]
    return instants
