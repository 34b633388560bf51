"""A misspelled scenario key gets "did you mean NAME?" and its line, as a misspelled
command gets "Did you mean 'run'?": every key, at every nesting level, of every
built-in scenario and of the shipped template, misspelled in turn."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.field_names import fields_at, unknown_field
from sim.scenario.schema import Scenario, ScenarioError, load_scenario
from sim.scenario.yaml_loader import load_yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = [*sorted((ROOT / "sim/scenario/data").glob("*.yaml")), ROOT / "examples/my-fleet.yaml"]


def _keys(data: object, path: tuple[object, ...] = ()) -> Iterator[tuple[tuple[object, ...], int]]:
    """Every key path of a located YAML document, with the line its key is written on."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*path, key), data.key_lines[key]  # type: ignore[attr-defined]
            yield from _keys(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _keys(value, (*path, i))


def _misspelled(key: str) -> str:
    return key[:-1] if len(key) > 3 else key + "x"  # max_num_seqs -> max_num_seq


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_key_misspelled_is_named_with_its_fix_and_line(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    keys = list(_keys(load_yaml(text, located=True)))
    assert len(keys) > 10
    for where, line in keys:
        key = where[-1]
        assert isinstance(key, str)
        edited = lines.copy()
        edited[line - 1], n = re.subn(
            rf"(?<![\w]){re.escape(key)}(?=\s*:)", _misspelled(key), lines[line - 1], count=1
        )
        assert n == 1, (where, lines[line - 1])
        copy = tmp_path / path.name
        copy.write_text("".join(edited))
        with pytest.raises(ScenarioError) as caught:
            load_scenario(copy)
        message = str(caught.value)
        assert f"did you mean {key}? (line {line})" in message, (where, message)
        assert message.startswith(f"{copy}: field "), message


def test_the_cli_prints_one_line_naming_file_line_and_fix(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "workload: {preset: bimodal-fleet}\nallocator: {kind: paged}\n"
        "scheduler:\n  max_num_seq: 8\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sim", "run", str(scenario), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "80"},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {scenario}: field scheduler.max_num_seq: unknown field; "
        "did you mean max_num_seqs? (line 4)",
    ]
    assert not (tmp_path / "o").exists()


def test_no_close_name_lists_the_fields_allowed_there() -> None:
    names = fields_at(Scenario, ("scheduler", "zzz"))
    assert "max_num_seqs" in names and "name" not in names
    assert unknown_field("zzz", ["b", "a"]) == "unknown field; expected one of a, b"
    assert unknown_field("max_num_seq", names) == "unknown field; did you mean max_num_seqs?"


def test_a_policy_block_is_read_as_the_class_its_kind_names() -> None:
    data = {"fleet": {"router": {"kind": "length_pools"}}}
    names = fields_at(Scenario, ("fleet", "router", "threshold_token"), data)
    assert "threshold_tokens" in names and "long_replicas" in names
