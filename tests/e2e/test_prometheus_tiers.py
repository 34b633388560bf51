"""The KV offload tier's alert in the real Prometheus tools, as the seed's alerts are in
tests/e2e/test_prometheus.py: ``fragsim alerts export`` of a scenario or a run with a
tier writes its rule (``promtool check rules``); the promtool tests generated from a
run whose tier fragments pass on the episodes fragsim fires and suppresses, and fail on
a changed threshold or ``for:``; and a real server holding the backfilled run
evaluates the tier rule's expression where ``alerts.parquet`` says its condition held,
and stores ``ALERTS`` firing where fragsim fired."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.prometheus import PROMETHEUS, PROMTOOL, get_json, promtool, scrape_instants, serve
from support.tier_fleet import TIER_FLEET
from typer.testing import CliRunner

from sim.cli import app
from sim.telemetry.alerts import scrape_times

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; make test)"
)

runner = CliRunner()
NAME = "offload_host_tier_fragmentation"
ORIGIN_S = 1704067200.0  # the export's default --origin, 2024-01-01T00:00:00Z


@pytest.fixture(scope="module")
def tier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sim.runner import run
    from sim.scenario.schema import parse_scenario

    out = tmp_path_factory.mktemp("prom-tier") / "run"
    run(parse_scenario(TIER_FLEET)).write(out)
    return out


def test_a_scenario_with_a_tier_gets_its_rule(tmp_path: Path) -> None:
    scenario = tmp_path / "tier.yaml"
    scenario.write_text(yaml.safe_dump(TIER_FLEET))
    rules = tmp_path / "rules.yaml"
    result = runner.invoke(app, ["alerts", "export", "-o", str(rules), "-s", str(scenario)])
    assert result.exit_code == 0, result.output
    assert "wrote 5 alerting rules" in result.stdout
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout
    text = rules.read_text()
    assert "#   fragsim_offload_host_free_bytes (gauge)" in text  # the header names its inputs
    rule = yaml.safe_load(text)["groups"][0]["rules"][-1]
    assert (rule["alert"], rule["for"], rule["labels"]) == (NAME, "30s", {"severity": "warning"})


@pytest.mark.slow
def test_generated_tier_tests_pass_and_fail_on_a_changed_rule(
    tier_run: Path, tmp_path: Path
) -> None:
    rules, tests = tmp_path / "rules.yaml", tmp_path / "rules_test.yaml"
    args = ["-o", str(rules), "--tests", str(tests), "--run", str(tier_run)]
    result = runner.invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 0, result.output
    text = tests.read_text()
    assert re.search(rf"name: '?{NAME} on replica 0 from [\d.]+ s of the run: fires", text)
    assert re.search(rf"name: '?{NAME} on replica 0 from [\d.]+ s of the run: held 30s too", text)
    done = promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr
    original = rules.read_text()
    tier_expr = "fragsim_offload_host_capacity_bytes) > 0.25"
    for before, after in (
        (tier_expr, tier_expr.replace("0.25", "0.99")),  # asks for a nearly empty tier
        ("fragsim_offload_host_largest_contiguous_free_block_ratio < 0.6", "x < 0.6"),
        (f"alert: {NAME}\n    expr: ", "alert: other\n    expr: "),
    ):
        changed = original.replace(before, after)
        assert changed != original, before
        rules.write_text(changed)
        assert promtool("test", "rules", str(tests)).returncode != 0, after
    # the tier rule's for: too (the last for: 30s of the file is the tier rule's)
    head, _, tail = original.rpartition("for: 30s")
    rules.write_text(head + "for: 5m" + tail)
    assert promtool("test", "rules", str(tests)).returncode != 0


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)")
def test_a_real_prometheus_holds_the_tier_rule_where_fragsim_did(
    tier_run: Path, tmp_path: Path
) -> None:
    metrics, rules, data = tmp_path / "run.om", tmp_path / "rules.yaml", tmp_path / "data"
    done = runner.invoke(app, ["export", "openmetrics", str(tier_run), "-o", str(metrics)])
    assert done.exit_code == 0, done.output
    assert "# TYPE fragsim_offload_host_free_bytes gauge" in metrics.read_text()
    args = ["-o", str(rules), "--run", str(tier_run), "--tests", str(tmp_path / "t.yaml")]
    assert runner.invoke(app, ["alerts", "export", *args]).exit_code == 0
    made = promtool("tsdb", "create-blocks-from", "openmetrics", str(metrics), str(data))
    assert made.returncode == 0, made.stdout + made.stderr
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"evaluation_interval": "30s"}, "rule_files": [str(rules)]})
    )
    alerts = pd.read_parquet(tier_run / "alerts.parquet")
    ours = alerts[alerts["alert"] == NAME].sort_values("time_s", kind="stable")
    last_s = float(scrape_times(pd.read_parquet(tier_run / "timeseries.parquet"), 30.0)[-1])
    held_want = scrape_instants(ours, "pending", last_s)
    firing_want = scrape_instants(ours, "firing", last_s)
    assert firing_want and len(held_want) > len(firing_want)
    with serve(data, config) as base:
        loaded = get_json(base + "/api/v1/rules")["data"]
        exprs = {r["name"]: r["query"] for g in loaded["groups"] for r in g["rules"]}
        assert len(exprs) == 5

        def over_run(query: str) -> dict[tuple[str, ...], list[float]]:
            args = {"query": query, "start": ORIGIN_S, "end": ORIGIN_S + last_s, "step": "30"}
            found = get_json(f"{base}/api/v1/query_range?{urllib.parse.urlencode(args)}")
            return {
                tuple(s["metric"].get(k, "") for k in ("replica", "pool", "alertstate")): [
                    float(t) - ORIGIN_S for t, _ in s["values"]
                ]
                for s in found["data"]["result"]
            }

        assert over_run(exprs[NAME]) == {("0", "a", ""): held_want}
        firing = over_run(
            f'ALERTS{{alertname="{NAME}",alertstate="firing"}} and '
            f'timestamp(ALERTS{{alertname="{NAME}",alertstate="firing"}}) > time() - 30'
        )
        assert firing == {("0", "a", "firing"): firing_want}
