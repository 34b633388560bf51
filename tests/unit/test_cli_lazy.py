"""The one lazy import of the ``fragsim`` command (:mod:`sim.cli.lazy`): every body a
front names exists, lives in ``sim.cli.bodies`` and accepts the arguments the front
passes (read from the fronts' source: each ``lazy.call("module:function", ...)``), and
every body module is named by some front."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest

import sim.cli
from sim.cli import lazy

CLI = Path(sim.cli.__file__).parent


@dataclass(frozen=True)
class Handover:
    """One ``lazy.call`` in a front: where, what it names, what it passes."""

    where: str
    target: str
    positional: int
    keywords: tuple[str, ...]
    starred: bool


def handovers() -> list[Handover]:
    """Every ``lazy.call(...)`` in ``sim/cli/`` (its first argument a string literal)."""
    found = []
    for path in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "call"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "lazy"
            ):
                continue
            where = f"{path.relative_to(CLI.parent.parent)}:{node.lineno}"
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{where}: lazy.call's target is a string literal"
            )
            rest = node.args[1:]
            found.append(
                Handover(
                    where,
                    first.value,
                    len(rest),
                    tuple(k.arg for k in node.keywords if k.arg is not None),
                    any(isinstance(a, ast.Starred) for a in rest)
                    or any(k.arg is None for k in node.keywords),
                )
            )
    return found


HANDOVERS = handovers()


def test_the_fronts_hand_over_to_bodies() -> None:
    assert HANDOVERS, "no front calls lazy.call"


@pytest.mark.parametrize("handover", HANDOVERS, ids=lambda h: h.where)
def test_each_named_body_exists_and_takes_what_is_passed(handover: Handover) -> None:
    assert handover.target.startswith(lazy.BODIES + "."), handover
    body = lazy.resolve(handover.target)
    assert callable(body), handover
    assert not handover.starred, f"{handover.where}: pass arguments by name, not * or **"
    assert handover.positional == 0, f"{handover.where}: pass the options by name"
    signature = inspect.signature(body)
    kinds = {p.kind for p in signature.parameters.values()}
    assert kinds <= {inspect.Parameter.KEYWORD_ONLY}, f"{handover.target}: keyword-only"
    signature.bind(*range(handover.positional), **dict.fromkeys(handover.keywords))


def test_every_body_module_is_named_by_a_front() -> None:
    named = {h.target.partition(":")[0] for h in HANDOVERS}
    bodies = {
        f"{lazy.BODIES}.{p.stem}" for p in (CLI / "bodies").glob("*.py") if p.stem != "__init__"
    }
    helpers = {f"{lazy.BODIES}.{name}" for name in BODY_HELPERS}
    assert sorted(bodies - named - helpers) == []


BODY_HELPERS = frozenset({"run_folder", "export_grafana", "alert_timing"})
"""Body modules that other bodies import (shared work), not named by a front."""


def test_a_target_outside_the_bodies_or_malformed_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sim\.cli\.bodies"):
        lazy.call("sim.cli.output:print_table")
    for target in ("sim.cli.bodies.run", "sim.cli.bodies.run:", ":run"):
        with pytest.raises(ValueError, match=r"expected .package\.module:attribute."):
            lazy.resolve(target)
