"""``fragsim export grafana``'s dashboard as a user imports it: JSON that Grafana's own
SDK model reads back, every panel titled, described, with a unit and the Prometheus
variable as its data source, unique ids, a grid without overlaps; the same bytes from
the same options (and the shipped ``examples/grafana-dashboard.json`` is exactly what
the command writes without a run); a run's span and thresholds; one-line errors. Its
queries against a real Prometheus: tests/e2e/test_grafana_dashboard.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sim.cli import app

pytest.importorskip("grafana_foundation_sdk", reason="the grafana extra is not installed")

from sim.results.seed_alerts import AlertThresholds
from sim.telemetry.dashboard import DashboardOptions, dashboard_json

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"


def _board(**options: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(dashboard_json(DashboardOptions(**options)))
    return result


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_the_sdk_model_reads_it_back_panel_for_panel() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import prometheus
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    board = _board()
    model = Dashboard.from_json(board)
    back = json.loads(JSONEncoder().encode(model))
    assert back["templating"] == board["templating"] and back["time"] == board["time"]
    for mine, theirs, typed in zip(board["panels"], back["panels"], model.panels, strict=True):
        for key in ("id", "type", "title", "gridPos", "targets", "options", "description"):
            assert theirs.get(key) == mine.get(key), (mine["title"], key)
        for target in getattr(typed, "targets", None) or []:
            assert isinstance(target, prometheus.Dataquery)


def test_every_panel_has_a_title_unit_source_and_a_place_of_its_own() -> None:
    board = _board()
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    assert len(_panels(board)) == 11
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, panel["title"]
        cells |= mine
        if panel["type"] == "row":
            assert pos["w"] == 24 and panel["title"]
            continue
        assert panel["title"] and len(panel["description"]) > 40, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(
            t["datasource"] == panel["datasource"] for t in panel["targets"]
        )
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert all(t["legendFormat"] for t in panel["targets"]), panel["title"]
    # no gap: the grid is filled row by row to its bottom
    bottom = max(y for _, y in cells) + 1
    assert len(cells) == 24 * bottom
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in _panels(board)}
    assert units["Free KV memory vs largest free extent"] == "bytes"
    assert units["Largest free extent / free memory"] == "percentunit"
    assert units["Uptime since last restart"] == "s"


def test_variables_and_the_alert_annotation() -> None:
    board = _board()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "pool", "replica"]
    assert variables["datasource"]["type"] == "datasource"
    for name in ("pool", "replica"):
        assert variables[name]["allValue"] == ".*" and variables[name]["multi"]
        assert variables[name]["includeAll"] and variables[name]["refresh"] == 2
    exprs = [t["expr"] for p in _panels(board) for t in p["targets"]]
    per_replica = [e for e in exprs if "fragsim_fleet_replicas" not in e]
    assert all('replica=~"$replica",pool=~"$pool"' in e for e in per_replica)
    (annotation,) = board["annotations"]["list"]
    assert annotation["expr"] == 'ALERTS{alertstate="firing",replica=~"$replica",pool=~"$pool"}'
    assert annotation["enable"]
    assert annotation["titleFormat"] == "{{alertname}}" and annotation["step"] == "30s"
    assert board["timezone"] == "utc" and board["uid"] == "fragsim-fleet"


def test_same_options_same_bytes_and_the_shipped_example_is_current(tmp_path: Path) -> None:
    assert dashboard_json(DashboardOptions()) == dashboard_json(DashboardOptions())
    out = tmp_path / "d.json"
    result = runner.invoke(app, ["export", "grafana", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out}\n"
    assert out.read_text() == dashboard_json(DashboardOptions())
    assert EXAMPLE.read_text() == out.read_text(), (
        "examples/grafana-dashboard.json is stale: fragsim export grafana -o "
        "examples/grafana-dashboard.json"
    )


def test_origin_span_and_thresholds_show() -> None:
    board = _board(
        origin_s=1_700_000_000.5,
        span_s=3_600.0,
        scrape_interval_s=15.0,
        thresholds=AlertThresholds(ratio_alert=0.7, ratio_severe=0.4, uptime_rho_alert=0.8),
    )
    assert board["time"] == {"from": "2023-11-14T22:13:20.500Z", "to": "2023-11-14T23:13:20.500Z"}
    by_title = {p["title"]: p for p in _panels(board)}
    steps = by_title["Largest free extent / free memory"]["fieldConfig"]["defaults"]["thresholds"]
    assert [s["value"] for s in steps["steps"]] == [None, 0.4, 0.7]
    rho = by_title["Uptime vs fragmentation correlation"]["fieldConfig"]["defaults"]
    assert [s["value"] for s in rho["thresholds"]["steps"]] == [None, 0.8]
    assert {p["interval"] for p in by_title.values()} == {"15s"}


def _run_folder(tmp_path: Path, summary: dict[str, Any]) -> Path:
    """A run folder whose summary holds ``summary`` (and the sections every summary
    has, empty); its tables are empty files (the dashboard reads only the summary)."""
    from support.runfolder import stub_summary

    from sim.results.io import FILES

    run = tmp_path / "run"
    run.mkdir()
    for name in FILES:
        (run / name).write_bytes(b"")
    (run / "summary.json").write_text(json.dumps(stub_summary(**summary)))
    return run


def test_a_runs_span_scrape_interval_and_thresholds(tmp_path: Path) -> None:
    thresholds = {
        "high_free_share": 0.3,
        "ratio_alert": 0.65,
        "ratio_severe": 0.45,
        "uptime_rho_alert": 0.5,
    }
    from support.runfolder import stub_fleet

    alerts = {"scrape_interval_s": 60.0, "trend_window_s": 3600.0, "thresholds": thresholds}
    fleet = stub_fleet([{"name": "a", "count": 1}], alerts=alerts)
    run = _run_folder(tmp_path, {"span_s": 7200.0, "fleet": fleet})
    out = tmp_path / "d.json"
    result = runner.invoke(app, ["export", "grafana", "--run", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    options = DashboardOptions(
        span_s=7200.0, scrape_interval_s=60.0, thresholds=AlertThresholds(**thresholds)
    )
    assert out.read_text() == dashboard_json(options)


@pytest.mark.parametrize(
    ("summary", "expected"),
    [({"span_s": "long"}, "field span_s: expected"), ({"span_s": None}, "field span_s: expected")],
)
def test_a_bad_run_is_one_error_line_and_nothing_written(
    tmp_path: Path, summary: dict[str, Any], expected: str
) -> None:
    run = _run_folder(tmp_path, summary)
    out = tmp_path / "d.json"
    result = runner.invoke(app, ["export", "grafana", "--run", str(run), "-o", str(out)])
    assert result.exit_code == 2 and expected in result.stderr, result.output
    assert len(result.stderr.splitlines()) == 1 and not out.exists()


def test_without_the_sdk_one_error_line_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m.startswith("grafana_foundation_sdk")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk", None)
    out = tmp_path / "d.json"
    result = runner.invoke(app, ["export", "grafana", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: fragsim export grafana needs grafana-foundation-sdk")
    assert "pip install 'fragsim[grafana]'" in result.stderr and not out.exists()
