"""Hostile outputs, third round (issue 26.3 and 26.4): writers replace only what they
own, a command's outputs are committed together, and a plan is bounded before it runs.

Every refusal is one ``error:`` line, exit status 2, and nothing left behind: the target
keeps its kind (a device stays a device, a FIFO a FIFO), no temporaries beside it.
Devices are ``mknod`` copies of ``/dev/full`` and ``/dev/null`` in the test's folder (the
same kernel drivers; the real ``/dev`` is never put at risk); skipped where mknod is not
allowed. FIFOs are never opened in a way that blocks.
"""

from __future__ import annotations

import copy
import errno
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.hostile import refused
from typer.testing import CliRunner, Result

import traces
from sim.cli import app

SCENARIO: dict[str, Any] = {
    "name": "round3",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 12}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def write(folder: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def listing(folder: Path) -> list[tuple[str, int]]:
    return sorted(
        (str(p.relative_to(folder)), stat.S_IFMT(p.lstat().st_mode)) for p in folder.rglob("*")
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    out = folder / "run"
    result = invoke("run", write(folder, SCENARIO), "-o", out, "-q", "--no-report")
    assert result.exit_code == 0, result.output
    return out


def commands(run: Path, target: Path) -> dict[str, list[object]]:
    return {
        "trace convert": ["trace", "convert", traces.sample_path("bimodal_200.csv"), target],
        "export openmetrics": ["export", "openmetrics", run, "-o", target],
        "alerts export": ["alerts", "export", "-o", target],
    }


COMMANDS = ["trace convert", "export openmetrics", "alerts export"]


def _device(path: Path, minor: int) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except OSError:
        pytest.skip("mknod is not allowed here")


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "link loop":
        path.symlink_to(path)
    elif kind == "full":
        _device(path, 7)


REFUSED = {
    "fifo": "is a FIFO (named pipe) that nothing reads",
    "socket": "is a socket; refusing to replace it",
    "folder": "is a folder; refusing to replace it",
    "dangling link": "a symbolic link to nothing",
    "link loop": "a loop of symbolic links",
    "full": "cannot write file (No space left on device)",
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_target_that_is_not_a_regular_file_is_never_replaced(
    tmp_path: Path, run: Path, command: str, kind: str
) -> None:
    target = tmp_path / "out.csv"
    _special(kind, target)
    before = listing(tmp_path)
    line = refused(invoke(*commands(run, target)[command]), f"{target}: ")
    assert REFUSED[kind] in line, line
    assert listing(tmp_path) == before  # same kinds, no temporaries


@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_written_through(tmp_path: Path, run: Path, command: str) -> None:
    target = tmp_path / "out.csv"
    _device(target, 3)  # /dev/null
    result = invoke(*commands(run, target)[command])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(target.lstat().st_mode) and listing(tmp_path) == [("out.csv", stat.S_IFCHR)]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_being_read_is_written_through(tmp_path: Path, run: Path, command: str) -> None:
    target = tmp_path / "out.csv"
    os.mkfifo(target)
    reader = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = invoke(*commands(run, target)[command])
        assert result.exit_code == 0, result.output
        data = b""
        while True:
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(reader)
    assert len(data) > 100 and stat.S_ISFIFO(target.lstat().st_mode)


def test_a_link_to_a_file_is_followed_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert invoke("alerts", "export", "-o", link).exit_code == 0
    assert link.is_symlink() and "groups:" in real.read_text()


# -- outputs committed together ---------------------------------------------------------


@pytest.mark.parametrize(
    "tests_at", ["file/t.yaml", "missing/t.yaml", "same", "./same", "link", "sub/../same"]
)
def test_alerts_export_writes_both_files_or_neither(
    tmp_path: Path, run: Path, tests_at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "same"
    rules.write_text("earlier rules\n")
    (tmp_path / "file").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(rules)
    before = listing(tmp_path)
    tests = Path(tests_at) if tests_at.startswith("./") else tmp_path / tests_at
    result = invoke("alerts", "export", "-o", rules, "--run", run, "--tests", tests)
    refused(result, "")
    assert rules.read_text() == "earlier rules\n" and listing(tmp_path) == before


def test_a_full_disk_while_writing_the_tests_keeps_the_rules(
    tmp_path: Path, run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules, tests = tmp_path / "rules.yaml", tmp_path / "t.yaml"
    rules.write_text("earlier rules\n")
    write_text = Path.write_text

    def full(self: Path, text: str, *args: Any, **kwargs: Any) -> int:
        if ".t.yaml." in self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    line = refused(invoke("alerts", "export", "-o", rules, "--run", run, "--tests", tests), "")
    assert "No space left on device" in line
    assert rules.read_text() == "earlier rules\n" and sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["rules.yaml"]


def test_compare_on_a_full_disk_leaves_nothing(
    tmp_path: Path, run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    out = tmp_path / "cmp"
    line = refused(
        invoke("compare", run, run, "-o", out, "--no-report"), f"{out}/compare.parquet: "
    )
    assert "No space left on device" in line
    assert list(tmp_path.iterdir()) == []


def test_compare_refuses_an_out_it_does_not_own(tmp_path: Path, run: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    refused(
        invoke("compare", run, run, "-o", out, "--no-report"),
        f"{out} exists and holds other files (notes.txt)",
    )
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("where", ["itself", "inside", "around", "link"])
def test_compare_never_writes_into_a_run_it_reads(tmp_path: Path, run: Path, where: str) -> None:
    import shutil

    given = tmp_path / "runs" / "a"
    shutil.copytree(run, given)
    (tmp_path / "link").symlink_to(given)
    out = {
        "itself": given,
        "inside": given / "cmp",
        "around": tmp_path / "runs",
        "link": tmp_path / "link",
    }[where]
    before = listing(tmp_path)
    refused(invoke("compare", given, run, "-o", out, "--no-report"), f"{out}: -o ")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("name", [".", "..", ".hidden"])
def test_a_scenario_name_that_is_no_folder_name_is_refused(
    tmp_path: Path, run: Path, name: str
) -> None:
    scenario = write(tmp_path, copy.deepcopy(SCENARIO) | {"name": name})
    out = tmp_path / "out"
    line = refused(invoke("compare", run, scenario, "-o", out), f"{scenario}: field name: ")
    assert repr(name) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("given", ["scenario", "folder"])
def test_compare_with_one_run_is_one_line(tmp_path: Path, run: Path, given: str) -> None:
    arg = write(tmp_path, SCENARIO) if given == "scenario" else run
    out = tmp_path / "out"
    refused(invoke("compare", arg, "-o", out), f"compare: got one run ({arg}); give two or more")
    assert not out.exists()


# -- plans without bounds ------------------------------------------------------------------

PLAN_REFUSED: dict[str, tuple[list[str], str]] = {
    "axis twice": (
        ["--vary", "allocator.kind=paged", "--vary", "allocator.kind=best_fit"],
        "--vary allocator.kind: given twice",
    ),
    "axis twice, written otherwise": (
        ["--vary", "fleet.pools.0.name=a", "--vary", "fleet.pools.00.name=b"],
        "given twice (as fleet.pools.0.name)",
    ),
    "the count": (
        ["--vary", "fleet.pools.0.count=1,2"],
        "--vary fleet.pools.0.count: the plan sets it",
    ),
    "the floor": (
        ["--vary", "fleet.min_replicas=1,2"],
        "--vary fleet.min_replicas: the plan sets it",
    ),
    "overlapping axes": (
        ["--vary", "fleet.router={kind: round_robin}", "--vary", "fleet.router.kind=random"],
        "overlaps --vary fleet.router",
    ),
    "a value twice": (["--vary", "seed=1,2,1"], "--vary seed: the value 1 is given twice"),
    "2,000 values": (
        ["--vary", "seed=" + ",".join(map(str, range(2000)))],
        "make up to 24,000 runs; a plan runs at most 10,000",
    ),
    "many replications": (
        ["--replicas", "1..4096", "--replications", "100", "--vary", "seed=1,2,3,4,5"],
        "a plan runs at most 10,000",
    ),
    "latency at most 0": (
        ["--slo", "e2e_p99<=0ms"],
        "'e2e_p99<=0ms': no run can meet it: e2e_p99 is more than 0",
    ),
    "count below 0": (["--slo", "restarts<0"], "no run can meet it: restarts is at least 0"),
    "share above 1": (["--slo", "failure_rate>1"], "no run can meet it: failure_rate is at most 1"),
    "apart": (["--slo", "ttft_p99>=5s"], "'ttft_p99<=2s' and 'ttft_p99>=5s': no run can meet both"),
    "strictly apart": (["--slo", "ttft_p99>2000ms"], "no run can meet both"),
    "unit sec": (
        ["--slo", "ttft_p99<=5sec"],
        "unknown unit 'sec'; ttft_p50, ttft_p99, tpot_p50, tpot_p99, e2e_p50, e2e_p99 in s or ms; failure_rate, failed_requests, allocation_failures, fragmentation_failures, at_high_free_failures, restarts, output_tokens_per_s unitless",
    ),
    "unit h": (["--slo", "e2e_p50<3h"], "unknown unit 'h'; "),
    "unit on a count": (["--slo", "restarts<=2x"], "unknown unit 'x'; "),
}


@pytest.mark.parametrize("case", list(PLAN_REFUSED))
def test_a_plan_that_cannot_or_should_not_run_is_refused_before_anything(
    tmp_path: Path, case: str
) -> None:
    extra, says = PLAN_REFUSED[case]
    scenario = write(tmp_path, SCENARIO)
    out = tmp_path / "out"
    args = ["plan", scenario, "--slo", "ttft_p99<=2s", "-o", out, *extra]
    if "--replicas" not in extra:
        args += ["--replicas", "1..64"]
    line = refused(invoke(*args), "")
    assert says in line, line
    assert not line.endswith("..."), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
