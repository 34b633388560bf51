"""``fragsim demo`` (what ``make demo`` runs): the fleet seed's worked example, its
paged counterfactual and the daily-restart mitigation, compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.scenario.builtin import DEMO


@pytest.mark.slow
def test_demo_runs_the_seed_example_and_its_counterfactuals(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "-o", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert "comparison" in result.stdout
    summaries = {n: json.loads((tmp_path / "demo" / n / "summary.json").read_text()) for n in DEMO}
    contiguous = summaries["seed-bimodal-best-fit"]["failures"]
    paged = summaries["seed-bimodal-paged"]["failures"]
    # The seed's signals show on the contiguous replica and vanish on the paged one.
    assert contiguous["at_high_free_memory"] > 0
    assert contiguous["by_cause"].get("fragmentation", 0) > 0
    assert paged["at_high_free_memory"] == 0
    assert paged["allocation_failures"] < 0.2 * contiguous["allocation_failures"]
    assert summaries["seed-bimodal-best-fit-daily-restart"]["failures"]["restarts"] == 5


@pytest.mark.parametrize("stray", ["notes.txt", f"{DEMO[0]}/mine.csv", ".hidden/x"])
def test_the_demo_never_replaces_a_folder_it_did_not_write(tmp_path: Path, stray: str) -> None:
    """Issue 26.3: the demo's folder is swapped in whole, so one holding anything but
    an earlier demo's runs and report is refused -- at once, before six days are
    simulated -- and left as it was."""
    out = tmp_path / "demo"
    (out / stray).parent.mkdir(parents=True, exist_ok=True)
    (out / stray).write_text("mine\n")
    result = CliRunner().invoke(app, ["demo", "-o", str(out), "-q"])
    assert result.exit_code == 2 and "holds other files" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert (out / stray).read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
