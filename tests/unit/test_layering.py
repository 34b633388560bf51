"""The dependency direction of DESIGN.md: ``traces`` <- ``policies`` <- ``sim`` <-
``reports``. Nothing under ``policies/`` imports ``sim`` (nor ``reports`` or
``gpu_backend``): the contracts policies implement (routing, restart, autoscaling, the
fleet view) live in ``policies`` and the engine implements them.

Checked twice: every import statement in the source (at any depth: an import inside a
function counts), and by importing every ``policies`` module in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
UPSTREAM = ("sim", "reports", "gpu_backend")


def _modules() -> list[str]:
    names = []
    for path in sorted(POLICIES.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _imported(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


def test_no_policies_source_imports_the_engine_reports_or_the_gpu_backend() -> None:
    offending = []
    for path in sorted(POLICIES.rglob("*.py")):
        for name in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if name.split(".")[0] in UPSTREAM:
                offending.append(f"{path.relative_to(REPO)}: {name}")
    assert offending == []


def test_importing_every_policies_module_loads_no_sim_module() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        f"up = sorted(m for m in sys.modules if m.split('.')[0] in {UPSTREAM!r})\n"
        "print(up)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def _sim_imports() -> dict[str, set[str]]:
    """Module -> the ``sim`` modules it imports (at any depth of its source)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((REPO / "sim").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {m for m in _imported(tree) if m.split(".")[0] == "sim"}
    return graph


def test_the_run_driver_and_the_fleet_import_each_other_one_way() -> None:
    """``sim.runner`` uses the driver, the parts, the outputs and the fleet; none of the
    modules it reaches imports it back (the old cycle: ``sim.fleet.run`` importing the
    runner's pieces, ``sim.fleet.fleet`` taking ``GroupColumns`` from it)."""
    graph = _sim_imports()
    reached, todo = set(), list(graph["sim.runner"])
    while todo:
        name = todo.pop()
        if name in reached or name not in graph:
            continue
        reached.add(name)
        todo.extend(graph[name])
    assert "sim.runner" not in reached
    assert {
        "sim.simulate.driver",
        "sim.fleet.fleet",
        "sim.outputs",
        "sim.simulate.parts",
    } <= reached
