"""Nothing lost: ``fragsim run`` killed or interrupted at each step of writing its results.

The writer's test-only hook ``FRAGSIM_FAULT_AT=POINT[:SIGNAL]`` (``sim.results.io``)
makes the process signal itself at a named point -- no sleeping, no races. For every
point and for SIGKILL and SIGINT, into a target that already holds a complete run:

* the target holds one complete run afterwards, the old one or the new one, never a mix
  and never nothing;
* a SIGINT exits 130 with one line, ``interrupted; nothing written`` (unless it came
  while the swap was under way: that is ignored, and the write completes; once the new
  run is in place the line is ``interrupted; results written to OUT``);
* the next run to the same target leaves no temporaries beside it and writes the new
  run; a killed writer's temporaries are removed because its process is gone.

The fallback without an atomic swap (rename aside, then rename in) is exercised the
same way, with the swap disabled. The stopped run is a subprocess (it must die); the
earlier and the next run are in-process, to keep the test quick.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.results import io
from sim.results.io import FILES
from sim.results.runfolder import read_result
from traces import atomic

SCENARIO: dict[str, Any] = {
    "name": "faults",
    "workload": {"preset": "chat", "synth": {"num_requests": 30}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
}


def stopped_run(
    scenario: Path, out: Path, fault: str, *, swap: bool = True
) -> subprocess.CompletedProcess[str]:
    """``fragsim run --seed 2`` in a subprocess, signalled at ``fault``; ``swap=False``
    disables the atomic swap (the rename-aside fallback runs)."""
    env = {k: v for k, v in os.environ.items() if k != "FRAGSIM_FAULT_AT"}
    env["FRAGSIM_FAULT_AT"] = fault
    code = "import sys\nfrom traces import atomic\n"
    if not swap:
        code += "atomic.exchange = lambda a, b: False\n"
    code += "from sim.cli import main\nsys.argv = ['fragsim', *sys.argv[1:]]\nmain()\n"
    args = ["run", str(scenario), "-o", str(out), "-q", "--no-report", "--seed", "2"]
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )


def next_run(scenario: Path, out: Path) -> None:
    """The next ``fragsim run --seed 3`` to the same target, in-process."""
    result = CliRunner().invoke(
        app, ["run", str(scenario), "-o", str(out), "-q", "--no-report", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output


def run_seed(out: Path) -> int:
    """The seed of the complete run at ``out`` (every file present and readable; these
    runs write no report: the run folder's own write is under test)."""
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    read_result(out)
    seed = json.loads((out / "summary.json").read_text())["seed"]
    assert isinstance(seed, int)
    return seed


def siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir())


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, scenario: Path) -> Path:
    """A complete earlier run (seed 1), copied to each test's target."""
    out = tmp_path_factory.mktemp("first") / "out"
    result = CliRunner().invoke(
        app, ["run", str(scenario), "-o", str(out), "-q", "--no-report", "--seed", "1"]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(
    "fault", ["partial:KILL", "written:KILL", "swapped:KILL", "partial:INT", "swapped:INT"]
)
def test_a_write_stopped_at_any_point_loses_nothing(
    tmp_path: Path, scenario: Path, first_run: Path, fault: str
) -> None:
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    stopped = stopped_run(scenario, out, fault)
    if fault.endswith("KILL"):
        assert stopped.returncode == -signal.SIGKILL
    elif fault == "swapped:INT":  # Ctrl-C is ignored while the swap is under way
        assert stopped.returncode == 0, stopped.stderr
    else:
        assert stopped.returncode == 130, stopped.stderr
        assert stopped.stderr.splitlines() == ["interrupted; nothing written"]
    assert run_seed(out) == (2 if fault.startswith("swapped") else 1)
    if fault.endswith("INT"):
        assert siblings(out) == ["out"]  # an interrupted writer cleans up after itself
    next_run(scenario, out)
    assert run_seed(out) == 3
    assert siblings(out) == ["out"]


def test_ctrl_c_after_the_write_says_the_run_was_written(
    tmp_path: Path, scenario: Path, first_run: Path
) -> None:
    """Once the new run is in place, an interrupt (here as the writer returns; the same
    for the summary printout after it) says where the results are, not ``nothing
    written``."""
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    stopped = stopped_run(scenario, out, "done:INT")
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.splitlines() == [f"interrupted; results written to {out}"]
    assert run_seed(out) == 2 and siblings(out) == ["out"]


def test_a_first_write_killed_leaves_no_run_and_is_cleaned(tmp_path: Path, scenario: Path) -> None:
    out = tmp_path / "out"
    assert stopped_run(scenario, out, "written").returncode == -signal.SIGKILL
    assert not out.exists()
    assert len(siblings(out)) == 1 and siblings(out)[0].startswith(".out.tmp-")
    next_run(scenario, out)
    assert run_seed(out) == 3 and siblings(out) == ["out"]


def test_temporaries_of_live_writers_and_other_targets_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    mine = tmp_path / f".out.tmp-{os.getpid()}-abcd1234"  # this process: alive
    other = tmp_path / ".outer.tmp-999999999-abcd1234"  # another target
    for folder in (mine, other):
        folder.mkdir()
    io.clean_stale(out)
    assert mine.exists() and other.exists()


@pytest.mark.parametrize("point", ["aside", "replaced"])
def test_without_a_swap_a_kill_loses_nothing(
    tmp_path: Path,
    scenario: Path,
    first_run: Path,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback where the file system cannot swap: rename aside, rename in."""
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    assert stopped_run(scenario, out, point, swap=False).returncode == -signal.SIGKILL
    if point == "aside":  # killed between the renames: the old run waits aside, complete
        assert not out.exists()
        aside = [p for p in tmp_path.iterdir() if p.name.startswith(".out.old-")]
        assert len(aside) == 1 and run_seed(aside[0]) == 1
    else:
        assert run_seed(out) == 2
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    io.clean_stale(out)  # what the next write does first: the old run is back
    assert run_seed(out) == (1 if point == "aside" else 2)
    next_run(scenario, out)
    assert run_seed(out) == 3 and siblings(out) == ["out"]
