"""`fragsim trace synth SPEC` reads its spec file with the scenario's bounded YAML loader
(``sim.scenario.yaml_loader``): a duplicate key or an alias bomb is one ``error:`` line
naming the file and the line, exit status 2 and nothing written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traces
from sim.cli import app

runner = CliRunner()

SPEC = (
    "arrival: {kind: poisson, rate_per_s: 3}\n"
    "lengths: {kind: pair, prompt: {kind: fixed, tokens: 64}, output: {kind: fixed, tokens: 8}}\n"
    "duration_s: 10\n"
)

BOMB = """\
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def _synth_fails(tmp_path: Path, spec: Path) -> str:
    """Run ``trace synth`` on ``spec``: exit 2, one ``error:`` line on stderr naming the
    spec, no traceback, no new file; return the line."""
    before = sorted(tmp_path.rglob("*"))
    result = runner.invoke(app, ["trace", "synth", str(spec), "-o", str(tmp_path / "o.csv")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {spec}: not valid YAML: "), line
    assert sorted(tmp_path.rglob("*")) == before
    return line


def test_the_spec_reads_as_before(tmp_path: Path) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "w.csv"
    result = runner.invoke(app, ["trace", "synth", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (traces.load(out)["prompt_tokens"] == 64).all()


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        (SPEC + "duration_s: 20\n", "'duration_s'", 4),
        ("seed: 1\nworkload: {duration_s: 10}\nseed: 2\n", "'seed'", 3),  # beside workload:
        (SPEC.replace("rate_per_s: 3}", "rate_per_s: 3, kind: gamma}"), "'kind'", 1),
        ("workload:\n  duration_s: 10\n  lengths: {}\n  duration_s: 20\n", "'duration_s'", 4),
    ],
    ids=["top", "beside-workload", "nested", "under-workload"],
)
def test_a_duplicate_key_is_one_error_line_with_its_line(
    tmp_path: Path, text: str, key: str, line: int
) -> None:
    spec = tmp_path / "dup.yaml"
    spec.write_text(text)
    message = _synth_fails(tmp_path, spec)
    assert f"duplicate key {key}" in message and f"(line {line}, column " in message


def test_a_duplicate_key_in_a_json_spec_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "dup.json"
    spec.write_text('{"duration_s": 10,\n "duration_s": 20}\n')
    message = _synth_fails(tmp_path, spec)
    assert "duplicate key 'duration_s'" in message and "(line 2, column " in message


@pytest.mark.parametrize("bound_to", ["duration_s: *h", "arrival: {kind: poisson, x: *h}"])
def test_an_alias_bomb_is_one_error_line_at_once(tmp_path: Path, bound_to: str) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_text(BOMB + bound_to + "\n")
    start = time.perf_counter()
    message = _synth_fails(tmp_path, spec)
    assert time.perf_counter() - start < 2.0
    assert "aliases expand the document to more than 100,000 values" in message
    assert "(line " in message
