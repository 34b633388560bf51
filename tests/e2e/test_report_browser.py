"""Reports open in a real browser: headless Chromium (its command line, no Python driver)
loads each report offline, every figure draws (one ``plot-container`` holding its SVG
per ``Plotly.newPlot`` call), each run's answer panel is there, and the console stays
silent (no error, no warning). A control page proves the console capture sees an
uncaught error."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.fleet import synthetic_fleet_data
from support.scenarios import request_frame, scenario_data

import reports
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

BROWSER = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
    None,
)
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="chromium is not installed (the Makefile's dev setup installs it: apt-get install chromium)",
)


def load(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after 10 s of virtual time, and its console lines."""
    assert BROWSER is not None
    proc = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def single_run() -> RunResult:
    rng = np.random.default_rng(3)
    n = 300
    data = scenario_data(
        "best_fit",
        6000,
        name="<b>single</b>",
        sample_interval_s=2.0,
        scheduler={"preemption": "fail"},
    )
    df = request_frame(
        np.sort(rng.uniform(0, 120, n)), rng.integers(50, 1500, n), rng.integers(5, 300, n)
    )
    return run(parse_scenario(data), df)


def fleet_run() -> RunResult:
    data = synthetic_fleet_data(
        duration_s=600.0,
        router={"kind": "fragmentation_aware"},
        faults={"mtbf_s": 600.0, "mttr": {"mean_s": 60.0, "sd_s": 10.0}},
        restart={"kind": "scheduled", "every_s": 200.0, "drain": "redirect"},
        autoscaler={"kind": "queue", "queue_threshold": 2},
    )
    data["name"] = "<script>alert(1)</script>"
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunResult]:
    return {"single": single_run(), "fleet": fleet_run()}


def test_the_console_capture_sees_errors(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    _, console = load(page, tmp_path / "profile")
    assert any("undefinedFunction" in line for line in console)


@pytest.mark.parametrize("which", [["single"], ["fleet"], ["single", "fleet"]])
def test_every_figure_draws_without_console_errors(
    tmp_path: Path, runs: dict[str, RunResult], which: list[str]
) -> None:
    page = tmp_path / "report.html"
    reports.write_html(reports.build_report([(w, runs[w]) for w in which]), page)
    html = page.read_text()
    figures = html.count("Plotly.newPlot(")
    expected = sum(len(reports.run_figures(runs[w])) for w in which) + (len(which) > 1)
    assert figures == expected
    dom, console = load(page, tmp_path / "profile")
    assert console == [], console
    containers = dom.count('class="plot-container plotly"')
    assert containers == figures, f"{containers} of {figures} figures drew"
    assert dom.count('class="main-svg"') >= figures
    assert "<script>alert(1)</script>" not in dom
    assert dom.count('<table class="answer">') == len(which)  # each run's verdict, up front
    assert dom.count('<p class="verdict">') == len(which)
