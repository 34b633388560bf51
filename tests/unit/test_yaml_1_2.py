"""Scenario YAML is read by YAML 1.2's core rules, as docs/errors-and-bounds.md says, not PyYAML's 1.1.

Contracts checked (``sim.scenario.yaml_loader``):

* booleans are ``true`` / ``false`` (any of YAML 1.2's spellings) only: ``yes``, ``no``,
  ``on``, ``off``, ``y``, ``n`` are strings, and a flag field refuses them, named;
* integers are decimal digits with an optional sign: ``0x10``, ``0o17``, ``0b11``,
  ``1_000`` and ``1:30`` are strings (a number field refuses them, named); ``010`` is ten;
* floats are YAML 1.2's (``1e9``, ``.5``, ``.inf``), never with underscores; dates stay
  strings;
* an explicit tag with a value of another form (``!!int 0x10``, ``!!bool yes``) is a
  YAML error with its line, never a traceback.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sim.scenario.schema import ScenarioError, load_scenario
from sim.scenario.yaml_loader import load_yaml

BASE = """\
workload: {preset: chat, synth: {num_requests: 20}}
allocator: {kind: best_fit}
"""


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("False", False),
        ("FALSE", False),
        ("yes", "yes"),
        ("No", "No"),
        ("on", "on"),
        ("OFF", "OFF"),
        ("y", "y"),
        ("n", "n"),
        ("0", 0),
        ("-7", -7),
        ("+5", 5),
        ("010", 10),
        ("0x10", "0x10"),
        ("0o17", "0o17"),
        ("0b11", "0b11"),
        ("1_000", "1_000"),
        ("1:30", "1:30"),
        ("1e9", 1e9),
        ("2.5E-3", 2.5e-3),
        (".5", 0.5),
        ("1.", 1.0),
        ("1_000.5", "1_000.5"),
        ("2024-01-01", "2024-01-01"),
        ("~", None),
        ("null", None),
        ("=", "="),
    ],
)
def test_scalars_resolve_as_yaml_1_2(text: str, value: object) -> None:
    for written in (False, True):
        got = load_yaml(f"a: {text}", written=written)["a"]
        assert got == value and type(got) in (type(value), *type(value).__subclasses__()), (
            text,
            got,
        )


def test_special_floats() -> None:
    assert load_yaml("a: .inf")["a"] == math.inf
    assert load_yaml("a: -.Inf")["a"] == -math.inf
    assert math.isnan(load_yaml("a: .NaN")["a"])


@pytest.mark.parametrize("text", ["!!int 0x10", "!!int 1_000", "!!bool yes", "!!float abc"])
def test_an_explicit_tag_on_another_form_is_a_yaml_error(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml(f"a: {text}")
    assert "line 1" in str(info.value)


@pytest.mark.parametrize(
    ("line", "field", "got"),
    [
        ("scheduler: {chunked_prefill: yes}", "scheduler.chunked_prefill", "'yes'"),
        ("scheduler: {head_of_line: off}", "scheduler.head_of_line", "'off'"),
        ("allocator: {kind: paged, prefix_caching: no}", "allocator.prefix_caching", "'no'"),
        ("seed: 0x10", "seed", "'0x10'"),
        ("seed: 0o17", "seed", "'0o17'"),
        ("scheduler: {max_num_seqs: 1_000}", "scheduler.max_num_seqs", "'1_000'"),
        ("duration_s: 1_000.5", "duration_s", "'1_000.5'"),
        ("restart: {every_s: '1:30'}", "restart.every_s", "'1:30'"),
        ("restart: {every_s: 1:30}", "restart.every_s", "'1:30'"),
    ],
)
def test_yaml_1_1_values_are_refused_by_name(
    tmp_path: Path, line: str, field: str, got: str
) -> None:
    path = tmp_path / "s.yaml"
    text = BASE + line + "\n"
    if line.startswith("allocator"):
        text = text.replace("allocator: {kind: best_fit}\n", "")
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}: field {field}: got {got}: "), message
    assert len(message.splitlines()) == 1, message


def test_1_2_spellings_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "seed: 010\nscheduler: {chunked_prefill: True, head_of_line: FALSE}\n")
    scenario = load_scenario(path)
    assert scenario.seed == 10
    assert scenario.scheduler.chunked_prefill is True
    assert scenario.scheduler.head_of_line is False
