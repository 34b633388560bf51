"""Atomic trace outputs: a SIGKILL mid-write leaves only a recognisable temporary
(``.NAME.PID.RANDOM.tmp``), which the next write to the same target removes once that
PID is dead; unusable output paths (a name too long, a file used as a folder) are one
TraceError naming the output, never an OSError."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traces
from sim.cli import app
from traces import atomic, writers
from traces.atomic import remove_stale_temporaries

SRC = "request_id,arrival_s,prompt_tokens,output_tokens\n" + "".join(
    f"{i},{i}.0,4,5\n" for i in range(3_000)
)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_sigkill_mid_write_leaves_a_temporary_the_next_run_removes(tmp_path: Path) -> None:
    src, out = tmp_path / "src.csv", tmp_path / "out.csv"
    src.write_text(SRC)
    # the writer kills its own process after its first chunk: a fault injected at a
    # point of the write, not a race with a timer
    script = textwrap.dedent(
        f"""
        import os, signal
        import traces
        from traces import writers

        write = writers._Sink.write
        def write_then_die(self, table):
            write(self, table)
            os.kill(os.getpid(), signal.SIGKILL)
        writers._Sink.write = write_then_die
        traces.convert({str(src)!r}, {str(out)!r}, chunk_rows=1_000)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=False)
    assert proc.returncode == -signal.SIGKILL
    (left,) = _temporaries(tmp_path)
    assert left.startswith(".out.csv.") and not out.exists()
    assert traces.convert(src, out) == 3_000
    assert _temporaries(tmp_path) == [] and len(traces.load(out)) == 3_000


def test_temporaries_of_live_processes_and_other_targets_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    dead = tmp_path / f".out.csv.{_dead_pid()}.abcd1234.tmp"
    live = tmp_path / f".out.csv.{os.getppid()}.abcd1234.tmp"
    other = tmp_path / f".out.csv.bak.{_dead_pid()}.abcd1234.tmp"
    for p in (dead, live, other):
        p.write_text("partial")
    assert remove_stale_temporaries(out) == [dead]
    assert _temporaries(tmp_path) == sorted([live.name, other.name])


def test_long_target_names_get_short_temporaries(tmp_path: Path) -> None:
    out = tmp_path / ("x" * 200 + ".csv")  # a valid name; .NAME.PID.RANDOM.tmp would not be
    assert traces.convert(traces.sample_path("bimodal_200.csv"), out) == 200
    assert out.exists() and _temporaries(tmp_path) == []


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("a" * 300 + ".csv", "File name too long"),
        ("d" * 300 + "/o.csv", "File name too long"),
        ("file.csv/o.csv", "not a folder"),
        ("no/such/o.csv", "does not exist"),
    ],
)
def test_unusable_output_is_one_error_line(tmp_path: Path, target: str, words: str) -> None:
    (tmp_path / "file.csv").write_text("x")
    out = tmp_path / target
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(
        app, ["trace", "convert", str(traces.sample_path("bimodal_200.csv")), str(out)]
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {out}: ") and words in line and ".tmp" not in line
    assert "Traceback" not in result.output and sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("source", ["file.csv/in.csv", "x" * 300 + ".csv"])
def test_unusable_input_path_is_one_error_line(tmp_path: Path, source: str) -> None:
    (tmp_path / "file.csv").write_text("x")
    result = CliRunner().invoke(app, ["trace", "describe", str(tmp_path / source)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / source}: cannot read file")


REPO = Path(__file__).resolve().parents[2]
RENAMES = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}
TEMPORARIES = {("tempfile", "mkstemp"), ("tempfile", "mkdtemp"), ("tempfile", "NamedTemporaryFile")}


def _calls_of(path: Path, wanted: set[tuple[str, str]]) -> list[str]:
    """``module.name`` calls in ``path`` among ``wanted`` (``os.replace``, ...)."""
    return [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.func.value.id}.{node.func.attr}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and (node.func.value.id, node.func.attr) in wanted
    ]


def test_traces_atomic_is_the_one_writer_that_renames_into_place() -> None:
    """One atomic writer: no module but ``traces/atomic.py`` renames a temporary over an
    output or makes its own temporaries (a second writer would not clean stale ones, nor
    refuse devices, nor commit several outputs together)."""
    packages = ("sim", "policies", "traces", "reports", "gpu_backend")
    found = [
        call
        for package in packages
        for path in sorted((REPO / package).rglob("*.py"))
        if path != REPO / "traces" / "atomic.py"
        for call in _calls_of(path, RENAMES | TEMPORARIES)
    ]
    assert not found, "write outputs through traces.atomic: " + "; ".join(found)
    assert _calls_of(REPO / "traces" / "atomic.py", RENAMES), "the writer no longer renames?"


def test_the_writers_module_exports_only_its_own_names() -> None:
    """The atomic writer has one home (``traces.atomic``): ``traces.writers`` exports
    what it defines, not a second path to ``atomic_path`` and its helpers."""
    assert writers.__all__
    for name in writers.__all__:
        value = getattr(writers, name)
        assert getattr(value, "__module__", "traces.writers") == "traces.writers", name
        assert not hasattr(atomic, name), name
