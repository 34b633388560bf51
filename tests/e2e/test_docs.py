"""The documentation holds together: the MkDocs site under docs/ builds in strict mode
(every link and anchor resolves), the README stays a front door (at most 400 lines)
whose links reach existing pages and headings, and the template the README's first
recipe copies (examples/my-fleet.yaml) runs as shipped, here cut to a quarter of an
hour of its trace, and writes the fleet tables docs/fleet.md lists."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim
from sim.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TEMPLATE = ROOT / "examples" / "my-fleet.yaml"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _mkdocs_missing() -> bool:
    return (
        importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None
    )


@pytest.mark.skipif(_mkdocs_missing(), reason="mkdocs or mkdocs-material is not installed")
def test_the_site_builds_strict(tmp_path: Path) -> None:
    # No --quiet: MkDocs 1.6 does not count warnings it does not log, so -q would let a
    # broken link through strict mode.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert sorted(p.stem for p in (tmp_path / "site").glob("*.html") if p.stem != "404") == pages


def _anchors(page: Path) -> set[str]:
    from markdown.extensions.toc import slugify

    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    headings = re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)
    return {slugify(h.replace("`", ""), "-") for h in headings}


def test_the_readme_is_a_front_door_whose_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    links = [link for link in LINK.findall(text) if not link.startswith(("http", "#"))]
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor and not _mkdocs_missing():
            assert anchor in _anchors(target), link


def test_the_fleet_template_runs_as_shipped(tmp_path: Path) -> None:
    template = sim.load_scenario(TEMPLATE)  # as shipped: its relative trace path resolves
    assert template.fleet is not None
    data = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    data["workload"]["trace"] = str((TEMPLATE.parent / data["workload"]["trace"]).resolve())
    data["duration_s"] = 900.0
    short = tmp_path / "my-fleet.yaml"
    short.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(short), "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) > 300 and requests["arrival_s"].max() <= 900.0
    fleet = pd.read_parquet(out / "fleet.parquet")
    assert fleet["replicas"].iloc[0] == data["fleet"]["pools"][0]["count"]
    documented = _fleet_output_columns()
    assert tuple(fleet.columns) == documented["fleet"]
    assert tuple(pd.read_parquet(out / "alerts.parquet").columns) == documented["alerts"]


def _fleet_output_columns() -> dict[str, tuple[str, ...]]:
    """docs/fleet.md's Fleet outputs table: the files it gives a column list of."""
    text = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Fleet outputs") :]
    rows = re.findall(r"^\| `(\w+)\.parquet` \|[^|]*\| `([^`]*)`[^|]*\|", section, re.MULTILINE)
    return {name: tuple(c.strip() for c in cols.split(",")) for name, cols in rows if "," in cols}


def _metric_names(text: str, after: str) -> set[str]:
    """The metric names in the first Markdown table after the line starting ``after``:
    every `fragsim_...` name in its first column (labels such as ``{state=...}`` dropped)."""
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| metric"))
    names: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names |= set(re.findall(r"`(fragsim_[a-z_]+)", line.split("|")[1]))
    return names


def test_the_readme_and_the_reference_list_the_metrics_the_export_writes() -> None:
    """The README's metric table (recipe 4) and docs/alerts.md's hold exactly the
    families ``fragsim export openmetrics`` writes (counters with ``_total``)."""
    from sim.telemetry import openmetrics as om

    families = (
        *om.REPLICA_METRICS,
        *om.BYTE_METRICS,
        om.UPTIME_CORRELATION,
        om.FAILURES,
        om.REPLICAS_BY_STATE,
    )
    written = {f.name + ("_total" if f.kind == "counter" else "") for f in families}
    readme = _metric_names(README.read_text(encoding="utf-8"), "## Recipe 4")
    reference = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    assert readme == written
    assert _metric_names(reference, "The metrics, once") == written
