"""``fragsim export grafana``'s dashboard against a real Prometheus: a fleet run with
allocation failures at high free memory is exported (``fragsim export openmetrics``),
backfilled (``promtool tsdb create-blocks-from openmetrics``) and served on 127.0.0.1;
every query of every panel of the dashboard JSON the command wrote -- its template
variables substituted as Grafana does with "All" selected -- returns series over the
run's span, and the variables' label queries list the run's pools and replicas.
Skipped, saying why, where promtool, prometheus or grafana-foundation-sdk is absent."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.prometheus import (
    ALERTING_FLEET,
    MISSING,
    PROMETHEUS,
    PROMTOOL,
    backfill,
    get_json,
    query_range,
    serve,
)
from typer.testing import CliRunner

from sim.cli import app

pytest.importorskip("grafana_foundation_sdk", reason="the grafana extra is not installed")
pytestmark = [
    pytest.mark.skipif(PROMTOOL is None or PROMETHEUS is None, reason=MISSING),
    pytest.mark.slow,
]

runner = CliRunner()
ORIGIN_S = 1_704_067_200  # the default --origin of both exports
ALL = ".*"  # the variables' "All" value


class Served:
    """The run, its OpenMetrics text, its dashboard and the server holding it."""

    def __init__(self, run: Path, metrics_text: str, board: dict[str, Any], base: str) -> None:
        self.run = run
        self.metrics_text = metrics_text
        self.board = board
        self.base = base
        summary = json.loads((run / "summary.json").read_text())
        self.span_s = float(summary["span_s"])
        self.scrape_s = float(summary["fleet"]["alerts"]["scrape_interval_s"])
        self.pools = {p["name"]: [str(r) for r in p["replicas"]] for p in summary["fleet"]["pools"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from sim.runner import run
    from sim.scenario.schema import parse_scenario

    tmp = tmp_path_factory.mktemp("grafana")
    out, metrics, board = tmp / "run", tmp / "run.om", tmp / "dashboard.json"
    run(parse_scenario(ALERTING_FLEET)).write(out)
    done = runner.invoke(app, ["export", "openmetrics", str(out), "-o", str(metrics)])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["export", "grafana", "--run", str(out), "-o", str(board)])
    assert done.exit_code == 0, done.output
    backfill(metrics, tmp / "data")
    (config := tmp / "prometheus.yml").write_text(yaml.safe_dump({"global": {}}))
    with serve(tmp / "data", config) as base:
        yield Served(out, metrics.read_text(), json.loads(board.read_text()), base)


def grafana_expr(expr: str, served: Served, replica: str = ALL, pool: str = ALL) -> str:
    """``expr`` as Grafana sends it over the run's span: ``$replica`` / ``$pool`` their
    selected values' regex ("All": ``.*``), ``$__range`` the range, ``$__rate_interval``
    four scrape intervals (Grafana's, with the data source's scrape interval set to the
    run's and the panels' minimum step)."""
    text = (
        expr.replace("$__rate_interval", f"{4 * served.scrape_s:g}s")
        .replace("$__range", f"{round(served.span_s)}s")
        .replace("$replica", replica)
        .replace("$pool", pool)
    )
    assert "$" not in text, text
    return text


def targets(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every query of every panel."""
    return [
        (p["title"], t["refId"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])
    ]


def _alerts_exported(served: Served) -> bool:
    return "# TYPE ALERTS " in served.metrics_text


def _series(served: Served, expr: str) -> list[dict[str, Any]]:
    return query_range(served.base, expr, ORIGIN_S, ORIGIN_S + served.span_s, served.scrape_s)


def test_every_panel_query_returns_series(served: Served) -> None:
    """Each query but the ALERTS ones (next test) returns at least one series with a
    number in it; the seed's panels are all there."""
    found = targets(served.board)
    titles = {title for title, _, _ in found}
    for seed_panel in (
        "Free KV memory vs largest free extent",
        "Largest free extent / free memory",
        "Allocation failures at high free memory",
        "Uptime since last restart",
        "Replicas by state",
        "Firing alerts by replica",
    ):
        assert seed_panel in titles
    checked = 0
    for title, ref, expr in found:
        if "ALERTS" in expr:
            continue
        series = _series(served, grafana_expr(expr, served))
        assert series, (title, ref, expr)
        values = [float(v) for s in series for _, v in s["values"]]
        assert any(v == v for v in values), (title, ref, "only NaN")
        checked += 1
    assert checked >= 10
    # the failure panel sees the run's failures at high free memory
    (failures,) = (
        e
        for t, _, e in found
        if t == "Allocation failures at high free memory" and "by (replica)" in e
    )
    peak = max(
        float(v) for s in _series(served, grafana_expr(failures, served)) for _, v in s["values"]
    )
    assert peak > 0


def _stat_values(served: Served, title: str) -> list[float]:
    (panel,) = (p for p in served.board["panels"] if p["title"] == title and p["type"] == "stat")
    (target,) = panel["targets"]
    return [
        float(v)
        for s in _series(served, grafana_expr(target["expr"], served))
        for _, v in s["values"]
    ]


def test_the_summary_stats_read_what_the_run_recorded(served: Served) -> None:
    """The stats as Grafana reduces them (last, min, max) equal the run's own tables:
    the failures at high free memory in events.parquet, the lowest ratio of the scraped
    samples in timeseries.parquet, the most replicas active in fleet.parquet."""
    import pandas as pd

    summary = json.loads((served.run / "summary.json").read_text())
    share = summary["fleet"]["alerts"]["thresholds"]["high_free_share"]
    events = pd.read_parquet(served.run / "events.parquet")
    failed = events["kind"].isin(["admission_failure", "growth_failure"])
    count = int((failed & (events["free_share"] > share)).sum())
    assert count > 0
    total = _stat_values(served, "Allocation failures at high free memory")[-1]
    assert round(total) == count, (total, count)
    ts = pd.read_parquet(served.run / "timeseries.parquet")
    scraped = ts[ts["trigger"].astype(str) != "failure"]
    lowest = min(v for v in _stat_values(served, "Lowest largest-free-extent ratio") if v == v)
    assert lowest == pytest.approx(scraped["largest_contiguous_free_block_ratio"].min())
    active = max(_stat_values(served, "Peak active replicas"))
    assert active == pd.read_parquet(served.run / "fleet.parquet")["active"].max()


def test_alert_panels_and_annotation_return_firing_series(served: Served) -> None:
    if not _alerts_exported(served):
        pytest.skip("export openmetrics wrote no ALERTS family (issue 25.2's ALERTS export)")
    exprs = [(title, ref, expr) for title, ref, expr in targets(served.board) if "ALERTS" in expr]
    annotations = served.board["annotations"]["list"]
    exprs += [(a["name"], "annotation", a["expr"]) for a in annotations if "expr" in a]
    assert len(exprs) >= 4
    for title, ref, expr in exprs:
        assert _series(served, grafana_expr(expr, served)), (title, ref, expr)


def test_selecting_one_replica_narrows_every_per_replica_panel(served: Served) -> None:
    pool, replicas = next((p, r) for p, r in served.pools.items() if len(r) > 1)
    chosen = replicas[-1]
    for title, ref, expr in targets(served.board):
        if "$replica" not in expr:
            continue
        series = _series(served, grafana_expr(expr, served, replica=chosen, pool=pool))
        assert {s["metric"].get("replica", chosen) for s in series} <= {chosen}, (title, ref)


def test_variables_list_the_runs_pools_and_replicas(served: Served) -> None:
    """A ``label_values(METRIC{...}, LABEL)`` variable is what Grafana's Prometheus data
    source asks ``/api/v1/label/LABEL/values`` with ``match[]`` over the time range."""
    variables = {v["name"]: v for v in served.board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for name, expected in (
        ("pool", set(served.pools)),
        ("replica", {r for rs in served.pools.values() for r in rs}),
    ):
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variables[name]["query"])
        assert match is not None and match.group(2) == name, variables[name]["query"]
        query = urllib.parse.urlencode(
            {
                "match[]": grafana_expr(match.group(1), served),
                "start": ORIGIN_S,
                "end": ORIGIN_S + served.span_s,
            }
        )
        answer = get_json(f"{served.base}/api/v1/label/{name}/values?{query}")
        assert set(answer["data"]) == expected, name
