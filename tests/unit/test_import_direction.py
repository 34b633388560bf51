"""The import graph of ``sim``, ``policies``, ``traces``, ``reports`` and ``gpu_backend``,
read from the source with :mod:`ast` (nothing is imported): no circle, no arrow up, no
import inside a function but of an optional dependency.

* **No circle.** The modules' run-time imports (at file level and inside functions; not
  those under ``if TYPE_CHECKING:``, which never run) form no cycle; a failure prints
  the cycle's path.
* **No arrow up.** :data:`LAYERS` is the dependency direction, lowest first (the same
  table as ``docs/layout.md``, "Dependency direction"): a module may import its own
  layer's modules and those of lower layers, never a higher layer's (type-only imports
  included). A module belongs to the layer of its longest prefix in the table.
* **No import inside a function** except of an optional dependency (:data:`OPTIONAL`),
  or of a module of ours that imports one at file level (``reports`` needs plotly,
  ``gpu_backend`` torch). The ``fragsim`` command included: it starts light by being
  split, not by deferring imports -- each command's front (``sim/cli/<command>.py``)
  pulls nothing :data:`HEAVY` in at file level, and names its body
  (``sim/cli/bodies/``) as a string that :mod:`sim.cli.lazy` imports when the command
  runs (held at run time by ``tests/e2e/test_cli_output.py``).
* **One dynamic import** per purpose, each named in :data:`DYNAMIC`: nothing else calls
  ``importlib.import_module`` or ``__import__``.

The checker's own tests plant each violation in a tiny package under ``tmp_path``."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "policies", "traces", "reports", "gpu_backend")

#: Lowest first. A module may import its layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("traces", "policies"),  # the request schema; policies never import sim
    ("sim.errors", "sim.field_names", "sim.fields", "sim.build"),  # leaves
    ("sim.models",),  # GPU and model presets, KV bytes
    ("sim.latency",),  # step-time models
    ("sim.results",),  # result frames' schema, the summary, run folders (data only)
    ("sim.engine", "sim.results.frames"),  # the compiled core (frames compiled with it)
    ("sim.scenario",),  # the pydantic schema: builds the engine's configs
    ("sim.simulate",),  # what a replica and a fleet share below the fleet
    ("sim.fleet",),
    ("sim.telemetry",),  # alerts, Prometheus, OpenMetrics, dashboards
    ("sim.outputs",),  # frames + summary + alerts of a run
    ("sim.runner",),  # every way into a run
    ("sim",),  # the public API (sim.run, load_scenario, ...; loaded on first use)
    # the fits to vLLM's spans and Prometheus dumps replay through the runner
    (
        "sim.postmortem",
        "sim.sweep",
        "sim.latency.from_spans",
        "sim.latency.from_prometheus",
        "sim.latency.prom_dump",
        "sim.latency.prom_rebuild",
        "sim.latency.vllm_histograms",
    ),
    ("reports", "gpu_backend"),  # plotly figures; the optional `gpu` extra
    ("sim.cli", "sim.__main__"),  # the fragsim command: its fronts and light helpers
    ("sim.cli.bodies",),  # the commands' bodies, loaded by name (sim.cli.lazy)
)

#: Optional dependencies (extras): imported inside the function that needs them.
OPTIONAL = frozenset(
    {
        "torch",  # extra `gpu`
        "triton",  # extra `gpu`
        "plotly",  # reports
        "dask",  # sweeps on a Dask cluster (dask.distributed)
        "grafana_foundation_sdk",  # extra `grafana`: fragsim export grafana
        "opentelemetry",  # extra `otlp`: OTLP protobuf spans
        "google.protobuf",  # ditto (opentelemetry-proto's runtime)
    }
)

#: Slow to import: no front of the ``fragsim`` command pulls one in at file level.
HEAVY = frozenset({"pandas", "numpy", "pyarrow", "scipy", "plotly", "torch"})

#: The command's fronts: ``sim/cli/`` but its bodies.
FRONTS, BODIES = "sim.cli", "sim.cli.bodies"

#: Modules of ``sim/cli/`` not yet split into a front and a body: they may still defer
#: a heavy import into a function (none left: every command is split).
NOT_YET_SPLIT: frozenset[str] = frozenset()

#: The modules that may import by name (``importlib.import_module``, ``__import__``),
#: and why: each is the one place for its purpose.
DYNAMIC = {
    "sim": "the public API, loaded on first use (PEP 562 __getattr__)",
    "sim.build": "which build runs: imports the compiled modules to read their files",
    "sim.cli.lazy": "the fragsim command: a front loads its body when the command runs",
}


@dataclass(frozen=True)
class Import:
    """One imported name: ``target`` is a module of ours (resolved: ``from a import b``
    is ``a.b`` where that is a module) or an outside module's dotted name."""

    importer: str
    target: str
    line: int
    in_function: bool
    type_only: bool


def module_names(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> its file, for every ``.py`` under ``root/<package>``."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _ours(name: str, modules: Mapping[str, Path]) -> str:
    """``name`` or its longest prefix that is a module of ours; ``name`` if none is."""
    probe = name
    while probe and probe not in modules:
        probe = probe.rpartition(".")[0]
    return probe or name


def _targets(
    module: str, node: ast.Import | ast.ImportFrom, modules: Mapping[str, Path]
) -> list[str]:
    if isinstance(node, ast.Import):
        return [_ours(alias.name, modules) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if modules[module].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else _ours(base, modules)
        for alias in node.names
    ]


def scan(root: Path, packages: Iterable[str]) -> list[Import]:
    """Every import statement of every module under ``root``'s ``packages``."""
    modules = module_names(root, packages)
    found: list[Import] = []

    def visit(module: str, node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(module, child, modules):
                    found.append(Import(module, target, child.lineno, in_function, type_only))
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for part in child.body:
                    visit(module, ast.Module(body=[part], type_ignores=[]), inner, True)
                for part in child.orelse:
                    visit(module, ast.Module(body=[part], type_ignores=[]), inner, type_only)
                continue
            visit(module, child, inner, type_only)

    for module, path in modules.items():
        visit(module, ast.parse(path.read_text(encoding="utf-8"), str(path)), False, False)
    return found


def cycles(imports: Iterable[Import], modules: Iterable[str]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected group
    of modules that import each other at run time."""
    names = set(modules)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for imp in imports:
        if not imp.type_only and imp.target in names and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path: list[str] = [start]
        state[start] = 1
        stack = [iter(sorted(graph[start]))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                state[path.pop()] = 2
            elif state.get(step) == 1:
                found.append([*path[path.index(step) :], step])
            elif step not in state:
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph[step])))
    return found


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The layer of ``module``'s longest prefix in ``layers``; None if it has none."""
    best: tuple[int, int] | None = None
    for rank, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (
                best is None or len(name) > best[0]
            ):
                best = (len(name), rank)
    return None if best is None else best[1]


def arrows_up(
    imports: Iterable[Import], modules: Iterable[str], layers: tuple[tuple[str, ...], ...]
) -> list[str]:
    """``importer:line -> target`` for each import of a higher layer (or of a module the
    table does not place)."""
    names = set(modules)
    out = []
    for imp in imports:
        if imp.target not in names:
            continue
        low, high = layer_of(imp.importer, layers), layer_of(imp.target, layers)
        if low is None or high is None or high > low:
            out.append(f"{imp.importer}:{imp.line} -> {imp.target}")
    return out


def _top(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _file_level(imports: Iterable[Import], names: set[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {name: set() for name in names}
    for imp in imports:
        if not imp.in_function and not imp.type_only:
            out[imp.importer].add(imp.target)
    return out


def pulled(
    target: str, outside: frozenset[str], file_level: Mapping[str, set[str]]
) -> list[str] | None:
    """The chain of file-level imports by which importing ``target`` loads one of
    ``outside`` (``target`` first, the outside module last); None if it loads none.
    Importing a module runs its packages' ``__init__`` too."""
    came_from: dict[str, str | None] = {target: None}
    todo = [target]
    while todo:
        name = todo.pop(0)
        if _top(name) & outside:
            chain = [name]
            while (parent := came_from[chain[-1]]) is not None:
                chain.append(parent)
            return chain[::-1]
        if name in file_level:
            for step in sorted(file_level[name] | {p for p in _top(name) if p != name}):
                if step not in came_from:
                    came_from[step] = name
                    todo.append(step)
    return None


def deferred_imports(
    imports: list[Import],
    modules: Iterable[str],
    optional: frozenset[str],
    heavy: frozenset[str],
    exempt: frozenset[str],
) -> list[str]:
    """``importer:line -> target`` for each import inside a function that is not
    allowed there: allowed are an optional dependency and a module of ours that imports
    one at file level (transitively); in the ``exempt`` modules (not yet split) the
    same for ``heavy`` ones."""
    file_level = _file_level(imports, set(modules))
    out = []
    for imp in imports:
        if not imp.in_function or imp.type_only:
            continue
        allowed = optional | heavy if imp.importer in exempt else optional
        if pulled(imp.target, allowed, file_level) is None:
            out.append(f"{imp.importer}:{imp.line} -> {imp.target}")
    return out


def heavy_fronts(
    imports: list[Import], modules: Iterable[str], heavy: frozenset[str], fronts: str, bodies: str
) -> list[str]:
    """``module: a -> b -> ... -> heavy`` for each module under ``fronts`` (not under
    ``bodies``) whose file-level imports load a ``heavy`` one."""
    names = set(modules)
    file_level = _file_level(imports, names)
    out = []
    for name in sorted(names):
        if (name == fronts or name.startswith(fronts + ".")) and not (
            name == bodies or name.startswith(bodies + ".")
        ):
            chain = pulled(name, heavy, file_level)
            if chain is not None:
                out.append(f"{name}: {' -> '.join(chain)}")
    return out


_BY_NAME = {"import_module", "__import__"}


def dynamic_imports(root: Path, packages: Iterable[str]) -> list[str]:
    """``module:line`` for each call of ``importlib.import_module`` or ``__import__``
    (by any spelling: ``importlib.import_module(...)``, ``import_module(...)``)."""
    out = []
    for module, path in module_names(root, packages).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in _BY_NAME:
                    out.append(f"{module}:{node.lineno}")
    return out


# -- the project ------------------------------------------------------------------


def _project() -> tuple[list[Import], dict[str, Path]]:
    packages = [p for p in PACKAGES if (REPO / p).is_dir()]
    return scan(REPO, packages), module_names(REPO, packages)


def test_no_import_circle() -> None:
    imports, modules = _project()
    assert cycles(imports, modules) == []


def test_no_arrow_up() -> None:
    imports, modules = _project()
    assert arrows_up(imports, modules, LAYERS) == []


def test_no_import_inside_a_function_but_an_optional_dependency() -> None:
    imports, modules = _project()
    assert deferred_imports(imports, modules, OPTIONAL, HEAVY, NOT_YET_SPLIT) == []


def test_no_front_of_the_command_pulls_in_anything_heavy() -> None:
    """What ``--help`` and a usage error load: every module of ``sim/cli/`` but the
    bodies, through its file-level imports (a failure prints the chain)."""
    imports, modules = _project()
    assert heavy_fronts(imports, modules, HEAVY, FRONTS, BODIES) == []


def test_the_only_imports_by_name_are_the_ones_named() -> None:
    packages = [p for p in PACKAGES if (REPO / p).is_dir()]
    found = {site.partition(":")[0] for site in dynamic_imports(REPO, packages)}
    assert sorted(found) == sorted(DYNAMIC)


def test_every_module_not_yet_split_is_still_there() -> None:
    """A module split (or gone) leaves :data:`NOT_YET_SPLIT`, so the exemption shrinks."""
    imports, modules = _project()
    assert sorted(NOT_YET_SPLIT - set(modules)) == []
    deferring = {imp.importer for imp in imports if imp.in_function and not imp.type_only}
    assert sorted(NOT_YET_SPLIT - deferring) == []


def test_every_optional_dependency_named_is_deferred_somewhere() -> None:
    """A name left in :data:`OPTIONAL` after its last use would allow an import nobody
    needs."""
    imports, _ = _project()
    used = {name for imp in imports if imp.in_function for name in _top(imp.target)}
    assert sorted(OPTIONAL - used) == []


def test_the_layout_doc_states_the_same_direction() -> None:
    doc = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    section = doc.split("## Dependency direction", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    table = [tuple(part.strip("` ") for part in row.split("|")[2].split(",")) for row in rows]
    assert table == [tuple(names) for names in LAYERS]


# -- the checker, on planted violations ------------------------------------------


def _package(root: Path, files: dict[str, str]) -> list[Import]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return scan(root, ["pkg"])


def test_a_planted_circle_is_reported_with_its_path(tmp_path: Path) -> None:
    imports = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "from . import c\n",
            "pkg/c.py": "def f():\n    import pkg.a\n",
            "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.e\n",
            "pkg/e.py": "import pkg.d\n",
        },
    )
    modules = module_names(tmp_path, ["pkg"])
    assert cycles(imports, modules) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_a_planted_arrow_up_is_reported(tmp_path: Path) -> None:
    imports = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/x.py": "from pkg.high.y import Y\n",
            "pkg/low/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import y\n",
            "pkg/high/__init__.py": "",
            "pkg/high/y.py": "from pkg.low import x\nY = 1\n",
            "pkg/stray.py": "",
            "pkg/high/w.py": "import pkg.stray\n",
        },
    )
    modules = module_names(tmp_path, ["pkg"])
    layers = (("pkg.low", "pkg"), ("pkg.high",))
    assert arrows_up(imports, modules, layers) == [
        "pkg.low.x:1 -> pkg.high.y",
        "pkg.low.z:3 -> pkg.high.y",
    ]
    assert arrows_up(imports, modules, (("pkg.low",), ("pkg.high",))) == [
        "pkg.high.w:1 -> pkg.stray",  # a module the table does not place
        "pkg.low.x:1 -> pkg.high.y",
        "pkg.low.z:3 -> pkg.high.y",
    ]


def test_a_planted_import_inside_a_function_is_reported(tmp_path: Path) -> None:
    imports = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/plots.py": "import plotly\n",
            "pkg/uses.py": (
                "def a():\n    import json\n"
                "def b():\n    import plotly.graph_objects\n"
                "def c():\n    from pkg import plots\n"
                "def d():\n    import pandas\n"
                "class K:\n    def e(self):\n        from pkg.cli import x\n"
            ),
            "pkg/cli/__init__.py": "",
            "pkg/cli/x.py": "def f():\n    import pandas\n    from pkg import uses\n",
            "pkg/cli/y.py": "def f():\n    import pandas\n",
        },
    )
    modules = module_names(tmp_path, ["pkg"])
    found = deferred_imports(
        imports, modules, frozenset({"plotly"}), frozenset({"pandas"}), frozenset({"pkg.cli.x"})
    )
    assert found == [
        "pkg.cli.x:3 -> pkg.uses",
        "pkg.cli.y:2 -> pandas",  # not exempt: split it
        "pkg.uses:2 -> json",
        "pkg.uses:8 -> pandas",
        "pkg.uses:11 -> pkg.cli.x",
    ]


def test_a_planted_heavy_front_is_reported_with_its_chain(tmp_path: Path) -> None:
    imports = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/frames.py": "import pandas\n",
            "pkg/data/__init__.py": "from pkg import frames\n",
            "pkg/data/leaf.py": "X = 1\n",
            "pkg/cli/__init__.py": "",
            "pkg/cli/light.py": "import json\ndef f():\n    import pandas\n",
            "pkg/cli/front.py": "from pkg.data.leaf import X\n",  # its package pulls pandas
            "pkg/cli/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n",
            "pkg/cli/bodies/__init__.py": "",
            "pkg/cli/bodies/run.py": "import pandas\n",
        },
    )
    modules = module_names(tmp_path, ["pkg"])
    found = heavy_fronts(imports, modules, frozenset({"pandas"}), "pkg.cli", "pkg.cli.bodies")
    assert found == [
        "pkg.cli.front: pkg.cli.front -> pkg.data.leaf -> pkg.data -> pkg.frames -> pandas"
    ]


def test_a_planted_import_by_name_is_reported(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "import importlib\nM = importlib.import_module('json')\n",
            "pkg/a.py": "from importlib import import_module\ndef f():\n    import_module('x')\n",
            "pkg/b.py": "X = __import__('os')\n",
            "pkg/c.py": "import importlib.util\nS = importlib.util.find_spec('os')\n",
        },
    )
    assert sorted(dynamic_imports(tmp_path, ["pkg"])) == ["pkg.a:3", "pkg.b:1", "pkg:2"]
