"""The README's recipes (and the docs' and the template's copies of them) write nothing
into the repository: every file a command line writes -- ``-o``, ``--output``,
``--tests``, a shell redirect, promtool's backfill folder -- lies under ``out/`` or
``/tmp``, and recipe 1's ``sed`` gives a scenario that loads from there."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.scenario.schema import load_scenario

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TEMPLATE = ROOT / "examples/my-fleet.yaml"
OUTPUT_OPTIONS = ("-o", "--output", "--tests")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*/?$")  # OUT/, FILE: a reader's own path


def _sh_blocks(path: Path) -> list[str]:
    """The ``sh`` blocks of a Markdown file, or a YAML file's indented comment block."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S)
    return ["\n".join(m[4:] for m in text.splitlines() if m.startswith("#   "))]


def _commands(block: str) -> Iterator[list[str]]:
    """Each command line of ``block`` (continuations joined, comments dropped) as words."""
    for line in block.replace("\\\n", " ").splitlines():
        for part in re.split(r"\s(?:&&|\|\||;|\|)\s", line):
            words = shlex.split(part, comments=True)
            if words:
                yield words


def output_paths(block: str) -> list[str]:
    """The paths the commands of ``block`` write."""
    paths = []
    for words in _commands(block):
        for before, word in itertools.pairwise(words):
            if before in OUTPUT_OPTIONS or before in (">", ">>"):
                paths.append(word)
        paths += [w[1:] for w in words if w.startswith(">") and len(w) > 1 and w[1] != ">"]
        if words[:3] == ["promtool", "tsdb", "create-blocks-from"]:
            paths.append(words[-1])
    return paths


DOCUMENTS = [README, TEMPLATE, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_every_command_writes_under_out_or_tmp(path: Path) -> None:
    written = [p for block in _sh_blocks(path) for p in output_paths(block)]
    inside = [p for p in written if not (p.startswith(("out/", "/tmp/")) or PLACEHOLDER.match(p))]
    assert not inside, f"{path.name}: commands write into the repository: {inside}"


def test_the_readme_recipes_write_what_they_say() -> None:
    written = [p for block in _sh_blocks(README) for p in output_paths(block)]
    for expected in ("out/my-fleet-paged.yaml", "out/data/", "out/rules.yaml"):
        assert expected in written
    assert "out/rules_test.yaml" in written


def test_output_paths_reads_options_redirects_and_promtool() -> None:
    block = (
        "sed x a.yaml > b.yaml\nfragsim run s -o out/r  # -o nope\n"
        "promtool tsdb create-blocks-from openmetrics r.om data/\n"
        "fragsim alerts export --output r.yaml \\\n    --tests t.yaml\n"
    )
    assert output_paths(block) == ["b.yaml", "out/r", "data/", "r.yaml", "t.yaml"]


def test_the_template_shows_the_readmes_compare_command() -> None:
    readme = "\n".join(_sh_blocks(README))
    header = _sh_blocks(TEMPLATE)[0]
    compare = [c for c in _commands(header) if "compare" in c or c[0] == "sed"]
    assert len(compare) == 2
    for words in compare:
        assert words in list(_commands(readme)), words


def test_recipe_1s_sed_writes_a_scenario_that_loads_from_out(tmp_path: Path) -> None:
    """Run the README's sed line where the repository is the working folder."""
    (sed,) = [c for b in _sh_blocks(README) for c in _commands(b) if c[0] == "sed"]
    for name in ("examples", "traces"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "out").mkdir()
    words = sed[: sed.index(">")]
    target = sed[sed.index(">") + 1]
    assert target.startswith("out/")  # else it would write through the symlinks
    with (tmp_path / target).open("w") as out:
        subprocess.run(words, cwd=tmp_path, stdout=out, check=True)
    scenario = load_scenario(tmp_path / target)
    assert scenario.name == "my-fleet-paged"
    assert scenario.allocator.kind == "paged"


def test_the_docs_index_counts_the_readmes_recipes() -> None:
    recipes = re.findall(r"^## Recipe (\d+):", README.read_text(encoding="utf-8"), re.M)
    assert recipes == [str(i) for i in range(1, len(recipes) + 1)]
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    index = " ".join((ROOT / "docs/index.md").read_text(encoding="utf-8").split())
    assert f"{words[len(recipes)]} recipes" in index
