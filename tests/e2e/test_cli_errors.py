"""Every way a user can get ``fragsim run`` wrong ends in ``error:`` lines, exit 2.

Contracts checked: usage errors (a missing or unknown option, a value of the wrong
type, a missing command) are one ``error:`` line naming the command, not typer's boxed
panel or the help; ``fragsim hardware``'s option errors are one line per problem naming
the option; paths the file system refuses (a name over 255 bytes, a folder that may not
be searched) are one line naming the path, for the scenario, the output and a scenario
name alike; every line of a scenario with several problems names the scenario file;
Ctrl-C prints ``interrupted; nothing written`` and exits 130, also while the command is
still importing its modules (a program that imports ``sim.cli`` keeps its own Ctrl-C,
and ``import sim`` is light). Never a traceback, never an output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from sim.cli import app

runner = CliRunner()

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 30}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
}


def write_scenario(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def assert_error_lines(result: Result, *words: str, lines: int | None = 1) -> list[str]:
    """Exit 2; stderr is only ``error:`` lines (``lines`` of them, if given), holding
    ``words``; no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    err = result.stderr.splitlines()
    assert err and all(line.startswith("error: ") for line in err), err
    if lines is not None:
        assert len(err) == lines, err
    text = "\n".join(err)
    for word in words:
        assert word in text, (word, text)
    assert "Traceback" not in result.output and "╭" not in result.output
    return err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("run", "x.yaml"), ("fragsim run", "--out")),
        (("run", "x.yaml", "-o", "out", "--bogus"), ("fragsim run", "--bogus")),
        (("run", "x.yaml", "-o", "out", "--seed", "many"), ("fragsim run", "--seed")),
        (("run",), ("fragsim run", "scenario_path")),
        (("nosuchcommand",), ("fragsim", "nosuchcommand")),
        (("trace", "describe"), ("fragsim trace describe",)),
    ],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    assert_error_lines(invoke(*args), *words)


def test_long_output_path_is_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / ("o" * 300)
    assert_error_lines(invoke("run", str(scenario), "-o", str(out), "-q"), "File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize("name", ["s" * 300, "s" * 300 + ".yaml", "d" * 300 + "/s.yaml"])
def test_long_scenario_path_or_name_is_one_line(tmp_path: Path, name: str) -> None:
    result = invoke("run", str(tmp_path / name), "-o", str(tmp_path / "out"), "-q")
    assert_error_lines(result, "File name too long")
    assert list(tmp_path.iterdir()) == []


def test_an_output_name_near_the_limit_still_writes(tmp_path: Path) -> None:
    """A 250-byte output name is legal; the writer's temporary names must be too."""
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / ("o" * 250)
    result = invoke("run", str(scenario), "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tiny.yaml", out.name])


def _refuse_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The file system refuses to search ``folder`` (EACCES), as it would for a user
    without its x permission -- whoever runs the test, root included."""
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if (
            isinstance(path, str | Path)
            and Path(path).is_relative_to(folder)
            and Path(path) != folder
        ):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)


def test_unsearchable_scenario_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    scenario = write_scenario(locked / "tiny.yaml", TINY)
    _refuse_under(monkeypatch, locked)
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "-q")
    assert_error_lines(result, "tiny.yaml", "Permission denied")
    assert not (tmp_path / "out").exists()


def test_unsearchable_output_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    locked = tmp_path / "locked"
    locked.mkdir()
    _refuse_under(monkeypatch, locked)
    result = invoke("run", str(scenario), "-o", str(locked / "out"), "-q")
    assert_error_lines(result, "out", "Permission denied")


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root searches any folder; the injected cases cover it"
)
def test_really_unsearchable_folders_are_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    locked = tmp_path / "locked"
    locked.mkdir()
    write_scenario(locked / "inner.yaml", TINY)
    locked.chmod(0)
    try:
        assert_error_lines(invoke("run", str(locked / "inner.yaml"), "-o", str(tmp_path / "o")))
        assert_error_lines(invoke("run", str(scenario), "-o", str(locked / "out")))
    finally:
        locked.chmod(0o700)


def test_every_problem_of_a_scenario_is_a_line_naming_the_file(tmp_path: Path) -> None:
    data = TINY | {
        "seed": -1,
        "scheduler": {"max_num_seqs": 0, "retry_attempts": -2},
        "workload": {"preset": "chat", "synth": {"num_requests": 0, "num_samples": 0}},
    }
    scenario = write_scenario(tmp_path / "multi.yaml", data)
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "-q")
    lines = assert_error_lines(result, "seed", "max_num_seqs", "retry_attempts", lines=None)
    assert len(lines) == 3
    assert all(line.startswith(f"error: {scenario}: field ") for line in lines), lines
    data = TINY | {"workload": {"preset": "chat", "synth": {"num_requests": 0, "num_samples": 0}}}
    write_scenario(scenario, data)
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "-q")
    lines = assert_error_lines(result, "num_requests", "num_samples", lines=2)
    assert all(line.startswith(f"error: {scenario}: field workload.synth.") for line in lines)


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    """SIGINT while the results are being written (the writer's test hook sends it)."""
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    env = os.environ | {"FRAGSIM_FAULT_AT": "partial:INT"}
    done = subprocess.run(
        [sys.executable, "-m", "sim", "run", str(scenario), "-o", str(tmp_path / "out"), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


# -- usage, options, interrupts --------------------------------------------------------


@pytest.mark.parametrize(("args", "command"), [((), "fragsim"), (("trace",), "fragsim trace")])
def test_a_missing_command_is_one_line(args: tuple[str, ...], command: str) -> None:
    """Not the help on stdout and a blank line on stderr."""
    result = invoke(*args)
    assert assert_error_lines(result, f"{command}: missing command", f"see {command} --help")
    assert result.stdout == ""


def test_a_bad_mode_names_the_command_and_the_option(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "--mode", "zzz")
    assert_error_lines(result, "fragsim run: ", "--mode", "'zzz'", "fast or exact")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_a_seed_past_64_bits_is_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "--seed", str(2**64))
    assert_error_lines(result, "fragsim run: ", "--seed")


@pytest.mark.parametrize(
    ("args", "option", "words"),
    [
        (("--memory-utilization", "1e-300"), "--memory-utilization", ("0.01",)),
        (("--memory-utilization", "nan"), "--memory-utilization", ("finite",)),
        (("--max-seq-tokens", "-5"), "--max-seq-tokens", ("-5",)),
        (("--max-seq-tokens", "99999999999999999999"), "--max-seq-tokens", ("1099511627776",)),
        (("--tp", "3", "--model", "llama-3-8b"), "--tp", ("num_kv_heads=8",)),
        (("--tp", "1000"), "--tp", ("64",)),
        (("--model", "llama-9"), "--model", ("llama-2-7b",)),
        (("--gpu", "b200"), "--gpu", ("h100-80gb",)),
        (("--memory-utilization", "0.05"), "--memory-utilization", ("no KV-cache memory",)),
    ],
)
def test_hardware_option_errors_are_one_line_naming_the_option(
    args: tuple[str, ...], option: str, words: tuple[str, ...]
) -> None:
    model = () if "--model" in args else ("--model", "llama-2-7b")
    result = invoke("hardware", *model, *args)
    assert_error_lines(result, "fragsim hardware: ", option, *words)
    assert result.stdout == ""


def test_ctrl_c_while_starting_up_is_one_line(tmp_path: Path) -> None:
    """SIGINT while the command's modules are still being imported (over a second):
    the child reports each import as it completes (``-X importtime``), and the signal
    goes once ``typer`` is in (imported after the guard, long before any command)."""
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "sim", "run", str(scenario), "-o", str(out)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stderr is not None
    lines = []
    for line in child.stderr:
        lines.append(line)
        if line.startswith("import time:") and "typer" in line:
            child.send_signal(signal.SIGINT)
            break
    stdout, rest = child.communicate(timeout=120)
    lines += rest.splitlines(keepends=True)
    said = [line.rstrip("\n") for line in lines if not line.startswith("import time:")]
    assert child.returncode == 130, said
    assert said == ["interrupted; nothing written"]
    assert stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_importing_the_cli_leaves_ctrl_c_to_the_program() -> None:
    """Only the ``fragsim`` command guards its startup; a program importing ``sim.cli``
    (these tests) keeps Python's own handler, and ``import sim`` stays light."""
    code = (
        "import signal, sys\n"
        "import sim\n"
        "assert 'sim.runner' not in sys.modules and 'pandas' not in sys.modules\n"
        "import sim.cli\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "assert sorted(dir(sim)) == sorted(set(dir(sim)) | set(sim.__all__))\n"
        "assert sim.run.__module__ == 'sim.runner'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_help_on_the_package_lists_the_public_api() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sim, pydoc; print(pydoc.render_doc(sim, renderer=pydoc.plaintext))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for name in ("run(", "load_scenario(", "parse_scenario(", "load_workload(", "read_result("):
        assert name in done.stdout, name
    for name in ("class RunResult", "class Scenario(", "class ScenarioError"):
        assert name in done.stdout, name


def test_an_out_of_range_synth_number_is_one_line(tmp_path: Path) -> None:
    fixed = {"kind": "fixed", "tokens": 10}
    synth = {
        "arrival": {"kind": "gamma", "rate_per_s": 1.0, "cv": 5e-324},
        "lengths": {"kind": "pair", "prompt": fixed, "output": fixed},
        "num_requests": 30,
    }
    scenario = write_scenario(tmp_path / "s.yaml", TINY | {"workload": {"synth": synth}})
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"), "-q")
    assert_error_lines(result, "workload.synth.arrival.cv", "0.001", lines=1)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--memory-utilization", "1e-300"), ("--memory-utilization", "only with --model")),
        (("--gpu", "nope", "--max-seq-tokens", "-5"), ("--gpu, --max-seq-tokens", "--model")),
    ],
)
def test_hardware_options_without_a_model_are_refused(
    args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    result = invoke("hardware", *args)
    assert_error_lines(result, "fragsim hardware: ", *words)
    assert result.stdout == ""


def test_an_option_missing_its_value_names_the_command() -> None:
    assert_error_lines(invoke("run", "x.yaml", "-o"), "fragsim run: ", "'-o'", "argument")


def test_a_nul_byte_in_a_scenario_is_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    scenario.write_text(scenario.read_text() + "\0\n")
    result = invoke("run", str(scenario), "-o", str(tmp_path / "out"))
    assert_error_lines(result, str(scenario), "#x0000", "line ")
