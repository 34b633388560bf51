"""A fleet run in the real Prometheus tools (the Debian package ``prometheus``, which
``make test`` installs; skipped, saying why, where ``promtool`` is absent):
``fragsim export openmetrics`` is backfilled by ``promtool tsdb create-blocks-from
openmetrics`` with every sample kept; ``fragsim alerts export``'s rules, over fragsim's
metric names and vLLM's, pass ``promtool check rules``; the promtool tests generated from
a run (``--tests``) pass, and fail on a changed rule; and the real server, holding the
backfilled run and the rules, evaluates each rule where fragsim's alerts.parquet fired."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli import app

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; make test)"
)

runner = CliRunner()

# Two pools up an hour already, best-fit on a bimodal trace: allocation failures at high
# free memory, fragmentation rising with uptime (the uptime alert fires: its window is an
# hour), an autoscaler that adds replicas to the second pool, ~10 minutes simulated in a
# few seconds; sampled every 120 s, more sparsely than the 30 s scrapes, as long runs are
# (the six-day seed-postmortem: 300 s).
FLEET = {
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
    text = metrics.read_text()
    lines = text.splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    assert 'fragsim_fleet_replicas{state="active"}' in text and "fragsim_kv_free_bytes{" in text
    assert "fragsim_node_uptime_vs_fragmentation_correlation{" in text
    summary = json.loads((fleet_run / "summary.json").read_text())
    a, b = summary["fleet"]["pools"]
    assert summary["fleet"]["scale_ups"] > 0 and len(b["replicas"]) > 1
    for pool in (a, b):  # the autoscaler's replicas in the pool it added them to
        for replica in pool["replicas"]:
            assert f'{{replica="{replica}",pool="{pool["name"]}"}}' in text
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


@pytest.mark.slow
def test_generated_promtool_tests_pass_and_fail_on_a_changed_rule(
    fleet_run: Path, tmp_path: Path
) -> None:
    rules, tests = tmp_path / "rules.yaml", tmp_path / "tests" / "rules_test.yaml"
    tests.parent.mkdir()
    args = ["-o", str(rules), "--tests", str(tests), "--run", str(fleet_run), "--for", "30"]
    result = runner.invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 0, result.output
    text = tests.read_text()
    assert "- ../rules.yaml" in text
    assert "name: fragmentation_driven_allocation_failure on replica" in text
    assert "name: node_uptime_vs_fragmentation_correlation on replica" in text
    done = _promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr
    # the same tests over a rule that asks for more failures than happened: they fail
    changed = rules.read_text().replace("[5m])) > 0", "[5m])) > 1000")
    assert changed != rules.read_text()
    rules.write_text(changed)
    assert _promtool("test", "rules", str(tests)).returncode != 0


def test_tests_need_a_run_and_fragsims_names(tmp_path: Path) -> None:
    for args in (["--tests", "t.yaml"], ["--run", "r", "--tests", "t.yaml", "--metrics", "vllm"]):
        result = runner.invoke(app, ["alerts", "export", "-o", str(tmp_path / "r.yaml"), *args])
        assert result.exit_code == 2 and result.stderr.startswith("error: "), result.output
    assert not list(tmp_path.iterdir())


def test_gauge_rules_get_tests_that_promtool_passes(tmp_path: Path) -> None:
    import yaml

    from sim.fleet.prometheus import RuleOptions, alert_rules, rules_yaml
    from sim.fleet.prometheus_tests import rule_tests, tests_file
    from sim.results.seed_alerts import AlertThresholds

    # one replica sampled every 30 s: the ratio falls to 0.45 from 600 s to 1200 s
    times = [30.0 * k for k in range(60)]
    ratio = [0.45 if 600 <= t < 1200 else 0.9 for t in times]
    ts = pd.DataFrame(
        {
            "time_s": times,
            "replica": 0,
            "trigger": "periodic",
            "up": True,
            "uptime_s": times,
            "largest_contiguous_free_block_ratio": ratio,
        }
    )
    events = pd.DataFrame({"time_s": [], "replica": [], "kind": [], "free_share": []})
    options = RuleOptions(for_s=120.0, instance_label="pod")
    rules = alert_rules(AlertThresholds(), 30.0, 3600.0, options)
    found, untested = rule_tests(rules, ts, events, {}, AlertThresholds(), 30.0, 3600.0, options)
    assert sorted(untested) == sorted(
        ["fragmentation_driven_allocation_failure", "node_uptime_vs_fragmentation_correlation"]
    )
    (tests_path := tmp_path / "t.yaml").write_text(tests_file("r.yaml", found, untested, 30.0))
    (tmp_path / "r.yaml").write_text(rules_yaml(rules, options))
    done = _promtool("test", "rules", str(tests_path))
    assert done.returncode == 0, done.stdout + done.stderr
    severe = yaml.safe_load(tests_path.read_text())["tests"][0]
    # the episode starts at scrape 20 (600 s), the test two scrapes earlier; for: 2m is
    # 4 scrapes: pending at 2m30s, firing at 3m
    assert [c["eval_time"] for c in severe["alert_rule_test"]] == ["2m30s", "3m"]
    assert severe["alert_rule_test"][0]["exp_alerts"] == []
    (fired,) = severe["alert_rule_test"][1]["exp_alerts"]
    assert fired["exp_labels"] == {"pod": "0", "pool": "default", "severity": "critical"}
    assert (
        "Replica 0: largest_contiguous_free_block_ratio is 0.45 (< 0.5)"
        in (fired["exp_annotations"]["description"])
    )


PROMETHEUS = shutil.which("prometheus")
ORIGIN_S = 1_704_067_200  # export openmetrics' default origin


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    """The JSON the server answers at ``url`` (on 127.0.0.1)."""
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _starts(instants: list[float]) -> list[float]:
    """The first instant of each run of consecutive 30 s scrapes."""
    return [t for i, t in enumerate(instants) if i == 0 or t - instants[i - 1] > 30.0 + 1e-6]


def _held_starts(rows: pd.DataFrame, hold_s: float) -> list[float]:
    """The starts of one alert's episodes on one replica (its ``alerts.parquet`` rows,
    in time order) once each is held ``hold_s`` past its resolution, as a rule over
    ``increase(...[W])`` holds a failure for ``W`` (``hold_s`` = ``W`` - one scrape):
    episodes that then touch are one."""
    starts: list[float] = []
    held_until = -math.inf
    for time_s, state in zip(rows["time_s"], rows["state"], strict=True):
        if state == "firing":
            if time_s > held_until:
                starts.append(float(time_s))
            held_until = math.inf
        else:
            held_until = float(time_s) + hold_s
    return starts


def _held_instants(rows: pd.DataFrame, hold_s: float, end_s: float) -> list[float]:
    """The 30 s scrape instants one alert fires at on one replica (its ``alerts.parquet``
    rows, in time order), each episode held ``hold_s`` past its resolution."""
    instants: set[float] = set()
    on: float | None = None
    for time_s, state in zip(rows["time_s"], rows["state"], strict=True):
        if state == "firing":
            on = float(time_s)
        elif on is not None:
            instants.update(30.0 * k for k in range(round(on / 30), round((time_s + hold_s) / 30)))
            on = None
    if on is not None:
        instants.update(30.0 * k for k in range(round(on / 30), math.floor(end_s / 30) + 1))
    return sorted(instants)


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)")
def test_a_real_prometheus_fires_the_rules_where_fragsim_did(
    fleet_run: Path, tmp_path: Path
) -> None:
    """Backfill the run, start the server on 127.0.0.1 with the exported rules, and
    evaluate each rule's expression over the run through the HTTP API (a server
    evaluates rules only on its live clock): each alert starts on the same replicas in
    the same scrape windows as in alerts.parquet, within one evaluation interval, and
    fires at exactly the scrapes alerts.parquet fires at (the failure rule's episodes
    held for its increase() window, 60 s: a failure fires it for two scrapes, where
    fragsim's log fires it for the one scrape window). The uptime rule reads the
    exported correlation gauge."""
    import time
    import urllib.parse

    import yaml

    metrics, rules, data = tmp_path / "run.om", tmp_path / "rules.yaml", tmp_path / "data"
    assert (
        runner.invoke(app, ["export", "openmetrics", str(fleet_run), "-o", str(metrics)]).exit_code
        == 0
    )
    args = ["-o", str(rules), "--for", "30", "--failure-window", "60"]
    assert runner.invoke(app, ["alerts", "export", *args]).exit_code == 0
    assert (
        _promtool("tsdb", "create-blocks-from", "openmetrics", str(metrics), str(data)).returncode
        == 0
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"evaluation_interval": "30s"}, "rule_files": [str(rules)]})
    )
    port = _free_port()
    assert PROMETHEUS is not None
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
                _get(base + "/api/v1/status/buildinfo")
                break
            except OSError:
                time.sleep(0.1)
        loaded = _get(base + "/api/v1/rules")["data"]
        exprs = {r["name"]: r["query"] for g in loaded["groups"] for r in g["rules"]}
        assert len(exprs) == 4
        alerts = pd.read_parquet(fleet_run / "alerts.parquet")
        span_s = float(pd.read_parquet(fleet_run / "timeseries.parquet")["time_s"].max())
        checked: dict[str, int] = {}
        for name, expr in exprs.items():
            query = urllib.parse.urlencode(
                {"query": expr, "start": ORIGIN_S, "end": ORIGIN_S + span_s, "step": "30"}
            )
            found = _get(f"{base}/api/v1/query_range?{query}")["data"]["result"]
            ours = alerts[alerts["alert"] == name].sort_values("time_s", kind="stable")
            hold_s = 30.0 if name == "fragmentation_driven_allocation_failure" else 0.0
            theirs: dict[int, list[float]] = {
                int(s["metric"]["replica"]): _starts([float(t) - ORIGIN_S for t, _ in s["values"]])
                for s in found
            }
            mine = {int(r): _held_starts(g, hold_s) for r, g in ours.groupby("replica")}
            assert set(theirs) == set(mine), name
            # every scrape it fires at, not only where each episode starts (the export's
            # counters are on the scrape clock, whatever the run's sampling)
            for s in found:
                replica = int(s["metric"]["replica"])
                rows = ours[ours["replica"] == replica]
                fired = sorted(float(t) - ORIGIN_S for t, _ in s["values"])
                assert fired == _held_instants(rows, hold_s, span_s), (name, replica)
            for replica, starts in mine.items():
                assert len(starts) == len(theirs[replica]), (name, replica, starts, theirs[replica])
                for a, b in zip(starts, theirs[replica], strict=True):
                    assert abs(a - b) <= 30.0, (name, replica, starts, theirs[replica])
                checked[name] = checked.get(name, 0) + len(starts)
        # the run fires the failure, approaching-threshold and uptime alerts (not the
        # severe one: its ratio stays above 0.5)
        assert set(checked) == set(exprs) - {"severe_fragmentation"}, checked
    finally:
        server.terminate()
        server.wait(timeout=30)
