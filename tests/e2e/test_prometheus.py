"""A fleet run in the real Prometheus tools (the Debian package ``prometheus``, which
``make test`` installs; skipped, saying why, where ``promtool`` is absent):
``fragsim export openmetrics`` is backfilled by ``promtool tsdb create-blocks-from
openmetrics`` with every sample kept; ``fragsim alerts export``'s rules, over fragsim's
metric names and vLLM's, pass ``promtool check rules``; the promtool tests generated from
a run (``--tests``) pass on the episodes fragsim fires and the ones ``for:`` suppresses,
and fail on a changed rule or ``for:``; and the real server, holding the backfilled run,
evaluates each rule's expression where fragsim's alerts.parquet says its condition held
and answers ``ALERTS`` / ``ALERTS_FOR_STATE`` at exactly the instants fragsim says."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from support.prometheus import ALERTING_FLEET, PROMTOOL, get_json, promtool, scrape_instants, serve
from support.runfolder import stub_summary
from typer.testing import CliRunner

from sim.cli import app
from sim.results.summary_model import Summary
from sim.telemetry.alerts import scrape_times

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; make test)"
)

runner = CliRunner()

FLEET = ALERTING_FLEET  # tests/support/prometheus.py says what it is


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sim.runner import run
    from sim.scenario.schema import parse_scenario

    out = tmp_path_factory.mktemp("prom") / "run"
    run(parse_scenario(FLEET)).write(out)
    return out


@pytest.fixture(scope="module")
def severe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet with the severe threshold at the approaching one's (0.6): every rule
    fires, the severe one without a for:."""
    from sim.runner import run
    from sim.scenario.schema import parse_scenario

    out = tmp_path_factory.mktemp("prom-severe") / "run"
    scenario = FLEET | {"name": "prom-severe", "metrics": FLEET["metrics"] | {"ratio_severe": 0.6}}
    run(parse_scenario(scenario)).write(out)
    return out


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
    done = promtool("tsdb", "create-blocks-from", "openmetrics", str(metrics), str(tmp_path / "db"))
    assert done.returncode == 0, done.stderr
    # the block table: ULID, min, max, duration, samples, chunks, series, size
    rows = [row.split() for row in done.stdout.splitlines() if row[:1].isdigit()]
    assert rows and sum(int(row[-4]) for row in rows) == len(samples)


@pytest.mark.parametrize(
    ("metrics", "label"), [("fragsim", "replica"), ("vllm", "pod"), ("vllm", "instance")]
)
def test_exported_rules_pass_promtool_check_rules(tmp_path: Path, metrics: str, label: str) -> None:
    import yaml

    rules = tmp_path / "rules.yaml"
    args = ["--metrics", metrics, "--instance-label", label, "--runbook-url", "https://x/{alert}"]
    result = runner.invoke(app, ["alerts", "export", "-o", str(rules), *args])
    assert result.exit_code == 0, result.output
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
    text = rules.read_text()
    assert f"sum by ({label}, pool)" in text and "https://x/severe_fragmentation" in text
    assert ("vllm:num_preemptions_total" in text) == (metrics == "vllm")
    assert " offset " not in text and "for: 0s" not in text
    # the shipped for: (sim.telemetry.alert_states.SHIPPED_FOR_S): none on the failure and
    # severe rules, 30s (two scrapes in a row) on the approaching and uptime rules
    holds = [r.get("for") for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert holds == [None, None, "30s", "30s"]


@pytest.mark.slow
def test_generated_promtool_tests_pass_and_fail_on_a_changed_rule(
    fleet_run: Path, tmp_path: Path
) -> None:
    """With the shipped for: the run fires the failure, approaching and uptime rules:
    promtool agrees with fragsim at the instants it derives, and disagrees once a rule
    asks for more failures or holds longer than fragsim's evaluation did."""
    rules, tests = tmp_path / "rules.yaml", tmp_path / "tests" / "rules_test.yaml"
    tests.parent.mkdir()
    args = ["-o", str(rules), "--tests", str(tests), "--run", str(fleet_run)]
    result = runner.invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 0, result.output
    text = tests.read_text()
    assert "- ../rules.yaml" in text
    for name in (
        "fragmentation_driven_allocation_failure",
        "high_fragmentation_approaching_threshold",
        "node_uptime_vs_fragmentation_correlation",
    ):
        assert re.search(rf"name: '?{name} on replica \d+ from [\d.]+ s of the run: fires", text)
    assert "# No firing in the run to test: severe_fragmentation" in text
    done = promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr
    original = rules.read_text()
    for before, after in (("[5m])) > 0", "[5m])) > 1000"), ("for: 30s", "for: 10m")):
        changed = original.replace(before, after)
        assert changed != original
        rules.write_text(changed)
        assert promtool("test", "rules", str(tests)).returncode != 0, after


@pytest.mark.slow
def test_generated_tests_hold_an_episode_for_suppresses(fleet_run: Path, tmp_path: Path) -> None:
    """With for: 5m on the gauge rules (the issue's rules: no episode of this run holds
    that long) fragsim fires no ratio alert, its tests say promtool fires none on an
    episode the condition held, and they fail once the rule fires at once."""
    rules, tests = tmp_path / "rules.yaml", tmp_path / "rules_test.yaml"
    args = ["-o", str(rules), "--tests", str(tests), "--run", str(fleet_run), "--for", "300"]
    assert runner.invoke(app, ["alerts", "export", *args]).exit_code == 0
    text = tests.read_text()
    name = "high_fragmentation_approaching_threshold"
    assert re.search(rf"name: '?{name} on replica \d+ from [\d.]+ s of the run: held 5m too", text)
    assert name in text.splitlines()[1]  # never fired: listed as untested
    shown = runner.invoke(app, ["alerts", "show", str(fleet_run), "--for", "300", "-f", "csv"])
    row = next(r for r in shown.stdout.splitlines() if r.startswith(name))
    held, fired = (int(v) for v in row.split(",")[3:5])
    assert held > 0 and fired == 0, row
    done = promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr
    rules.write_text(rules.read_text().replace("for: 5m", "for: 30s"))
    assert promtool("test", "rules", str(tests)).returncode != 0


def test_tests_need_a_run_and_fragsims_names(tmp_path: Path) -> None:
    for args in (["--tests", "t.yaml"], ["--run", "r", "--tests", "t.yaml", "--metrics", "vllm"]):
        result = runner.invoke(app, ["alerts", "export", "-o", str(tmp_path / "r.yaml"), *args])
        assert result.exit_code == 2 and result.stderr.startswith("error: "), result.output
    assert not list(tmp_path.iterdir())


def test_gauge_rules_get_tests_that_promtool_passes(tmp_path: Path) -> None:
    import yaml

    from sim.results.seed_alerts import AlertThresholds
    from sim.telemetry.prometheus import RuleOptions, alert_rules, rules_yaml
    from sim.telemetry.prometheus_tests import rule_tests, tests_file

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
    found, untested = rule_tests(
        rules,
        ts,
        events,
        Summary.from_json_dict(stub_summary()),
        AlertThresholds(),
        30.0,
        3600.0,
        options,
    )
    assert sorted(untested) == sorted(
        ["fragmentation_driven_allocation_failure", "node_uptime_vs_fragmentation_correlation"]
    )
    (tests_path := tmp_path / "t.yaml").write_text(tests_file("r.yaml", found, untested, 30.0))
    (tmp_path / "r.yaml").write_text(rules_yaml(rules, options))
    done = promtool("test", "rules", str(tests_path))
    assert done.returncode == 0, done.stdout + done.stderr
    severe = yaml.safe_load(tests_path.read_text())["tests"][0]
    # the episode starts at scrape 20 (600 s), the test two scrapes earlier; for: 2m is
    # 4 scrapes: active from 1m, pending at 2m30s, firing at 3m, to 10m30s, resolved at
    # 11m (1200 s)
    checks = severe["alert_rule_test"]
    assert [c["eval_time"] for c in checks] == ["30s", "1m", "2m30s", "3m", "10m30s", "11m"]
    assert [bool(c["exp_alerts"]) for c in checks] == [False, False, False, True, True, False]
    (fired,) = checks[3]["exp_alerts"]
    assert fired["exp_labels"] == {"pod": "0", "pool": "default", "severity": "critical"}
    assert (
        "Replica 0: largest_contiguous_free_block_ratio is 0.45 (< 0.5)"
        in (fired["exp_annotations"]["description"])
    )


PROMETHEUS = shutil.which("prometheus")
ORIGIN_S = 1_704_067_200  # export openmetrics' default origin


def _key(metric: dict[str, str]) -> tuple[str, ...]:
    """(replica, alertname, alertstate) of a series ("" where it has none)."""
    return tuple(metric.get(k, "") for k in ("replica", "alertname", "alertstate"))


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package)")
@pytest.mark.parametrize("which", ["fleet_run", "severe_run"])
def test_a_real_prometheus_fires_the_rules_where_fragsim_did(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Backfill the run (its ALERTS included), start the server on 127.0.0.1 with the
    exported rules, and ask it through the HTTP API (a server evaluates rules only on
    its live clock, never over backfilled history): each rule's expression holds at
    exactly the scrapes alerts.parquet says its condition held, on the same replicas
    (the uptime rule reads the exported correlation gauge, the failure rule the counter
    over its 5-minute increase()); the stored ALERTS are pending and firing at exactly
    the instants alerts.parquet says, ALERTS_FOR_STATE holds each episode's activeAt,
    and ALERTS{alertstate="firing"}, counted at its own instants, answers at exactly
    the firing instants. The second run fires every rule, the severe one too."""
    import urllib.parse

    import yaml

    fleet_run: Path = request.getfixturevalue(which)
    metrics, rules, data = tmp_path / "run.om", tmp_path / "rules.yaml", tmp_path / "data"
    assert (
        runner.invoke(app, ["export", "openmetrics", str(fleet_run), "-o", str(metrics)]).exit_code
        == 0
    )
    # the shipped for: and window and the run's thresholds, as the run recorded them
    args = ["-o", str(rules), "--run", str(fleet_run), "--tests", str(tmp_path / "t.yaml")]
    assert runner.invoke(app, ["alerts", "export", *args]).exit_code == 0
    tested = promtool("test", "rules", str(tmp_path / "t.yaml"))  # promtool agrees too
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert (
        promtool("tsdb", "create-blocks-from", "openmetrics", str(metrics), str(data)).returncode
        == 0
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump({"global": {"evaluation_interval": "30s"}, "rule_files": [str(rules)]})
    )
    with serve(data, config) as base:
        loaded = get_json(base + "/api/v1/rules")["data"]
        exprs = {r["name"]: r["query"] for g in loaded["groups"] for r in g["rules"]}
        assert len(exprs) == 4
        alerts = pd.read_parquet(fleet_run / "alerts.parquet")
        last_s = float(scrape_times(pd.read_parquet(fleet_run / "timeseries.parquet"), 30.0)[-1])

        def over_run(query: str) -> dict[tuple[str, ...], list[float]]:
            """Each series' instants (run seconds) where ``query`` answers, every 30 s."""
            args = {"query": query, "start": ORIGIN_S, "end": ORIGIN_S + last_s, "step": "30"}
            found = get_json(f"{base}/api/v1/query_range?{urllib.parse.urlencode(args)}")
            return {
                _key(s["metric"]): [float(t) - ORIGIN_S for t, _ in s["values"]]
                for s in found["data"]["result"]
            }

        def raw(selector: str) -> dict[tuple[str, ...], list[tuple[float, float]]]:
            """Each series' stored samples (run seconds, value)."""
            args = {"query": f"{selector}[{round(last_s) + 60}s]", "time": ORIGIN_S + last_s}
            found = get_json(f"{base}/api/v1/query?{urllib.parse.urlencode(args)}")
            return {
                _key(s["metric"]): [(float(t) - ORIGIN_S, float(v)) for t, v in s["values"]]
                for s in found["data"]["result"]
            }

        stored = raw("ALERTS")
        for_state = raw("ALERTS_FOR_STATE")
        fired: set[str] = set()
        for name, expr in exprs.items():
            ours = alerts[alerts["alert"] == name].sort_values("time_s", kind="stable")
            by_replica = {int(r): g for r, g in ours.groupby("replica")}
            # the rule's expression holds exactly where fragsim says its condition held
            held = {key[0]: t for key, t in over_run(expr).items()}
            assert held == {
                str(r): scrape_instants(g, "pending", last_s) for r, g in by_replica.items()
            }, name
            for replica, rows in by_replica.items():
                active = scrape_instants(rows, "pending", last_s)
                firing = scrape_instants(rows, "firing", last_s)
                pending = sorted(set(active) - set(firing))
                for state, want in (("firing", firing), ("pending", pending)):
                    got = stored.get((str(replica), name, state), [])
                    assert [t for t, _ in got] == want, (name, replica, state)
                    assert all(v == 1.0 for _, v in got)
                # ALERTS_FOR_STATE: activeAt (Unix seconds) at every active instant
                starts = rows.loc[rows["state"] == "pending", "time_s"].tolist()
                got_state = for_state.get((str(replica), name, ""), [])
                assert [t for t, _ in got_state] == active, (name, replica)
                for t, value in got_state:
                    since = max(s for s in starts if s <= t)
                    assert value == ORIGIN_S + since, (name, replica, t)
                fired |= {name} if firing else set()
        # ALERTS{alertstate="firing"} answers at exactly the firing instants once each
        # sample counts only at its own instant (no 5-minute look-back past resolution)
        query = (
            'ALERTS{alertstate="firing"} and timestamp(ALERTS{alertstate="firing"}) > time() - 30'
        )
        answered = over_run(query)
        want_firing = {
            (str(r), name): scrape_instants(
                g.sort_values("time_s", kind="stable"), "firing", last_s
            )
            for (name, r), g in alerts.groupby(["alert", "replica"])
        }
        assert {k[:2]: v for k, v in answered.items()} == {
            k: v for k, v in want_firing.items() if v
        }
        labels = get_json(base + "/api/v1/series?" + urllib.parse.urlencode({"match[]": "ALERTS"}))
        for metric in labels["data"]:
            assert metric["severity"] in ("critical", "warning")
            assert "pool" in metric  # every rule keeps the pool (the failure rule's sum too)
        # the first run fires the failure, approaching-threshold and uptime alerts (not
        # the severe one: its ratio stays above 0.5), the second every one
        unfired = {"severe_fragmentation"} if which == "fleet_run" else set()
        assert fired == set(exprs) - unfired, fired
