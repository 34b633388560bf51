"""The suite runs twice (``make test``): on the pure build and on the compiled one. This
checks each run tests the build it says it does, module by module, so a compiled run
cannot silently import the source tree, nor a pure run a stale extension module; and
that the list of compiled modules (``sim/build.py``) names real source files, each
importable, and is the list ``setup.py`` hands to mypyc."""

from __future__ import annotations

import ast
import importlib
import os
import runpy
import sys
import types
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import pytest
import setuptools
from support.allocators import small_pool

from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.build import (
    COMPILED_MARK,
    COMPILED_MODULES,
    COMPILED_PACKAGES,
    PURE_MARK,
    SEARCHED_PACKAGES,
    compiled_files,
    compiled_modules,
    derive_compiled_modules,
    engine_build,
)

REPO = Path(__file__).resolve().parents[2]
EXPECTED_BUILD = os.environ.get("FRAGSIM_EXPECT_BUILD")


def source_path(name: str) -> str:
    """``sim.engine.batch`` -> ``sim/engine/batch.py`` (relative to the repo root)."""
    return name.replace(".", "/") + ".py"


def test_the_module_list_names_each_module_once() -> None:
    assert COMPILED_MODULES, "sim.build.COMPILED_MODULES is empty"
    assert len(set(COMPILED_MODULES)) == len(COMPILED_MODULES), COMPILED_MODULES


@pytest.mark.parametrize("name", COMPILED_MODULES)
def test_each_listed_module_is_a_source_file_and_imports(name: str) -> None:
    assert (REPO / source_path(name)).is_file(), f"{name}: no {source_path(name)} in {REPO}"
    module = importlib.import_module(name)
    assert module.__name__ == name


@pytest.mark.parametrize("name", COMPILED_MODULES)
def test_each_module_is_of_the_build_the_suite_expects(name: str) -> None:
    if EXPECTED_BUILD is None:
        pytest.skip("FRAGSIM_EXPECT_BUILD is not set (make test sets it: pure, compiled)")
    path = getattr(importlib.import_module(name), "__file__", None) or ""
    if EXPECTED_BUILD == "compiled":
        assert path.endswith(tuple(EXTENSION_SUFFIXES)), f"{name} is not compiled: {path}"
    elif EXPECTED_BUILD == "pure":
        assert path.endswith(".py"), f"{name} is not pure Python: {path}"
    else:
        pytest.fail(f"FRAGSIM_EXPECT_BUILD is {EXPECTED_BUILD!r}; expected pure or compiled")


def test_the_suite_runs_on_the_build_it_expects() -> None:
    if EXPECTED_BUILD is None:
        pytest.skip("FRAGSIM_EXPECT_BUILD is not set (make test sets it: pure, compiled)")
    assert engine_build() == EXPECTED_BUILD, compiled_modules()


def test_engine_build_reports_every_listed_module() -> None:
    flags = compiled_modules()
    assert list(flags) == list(COMPILED_MODULES)
    assert compiled_files() == flags  # what version reads without importing the engine
    assert engine_build() == {frozenset({True}): "compiled", frozenset({False}): "pure"}.get(
        frozenset(flags.values()), "mixed"
    )


def test_setup_py_hands_mypyc_the_listed_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``setup.py`` with ``FRAGSIM_COMPILE=1``, stand-ins for ``setuptools.setup``
    and ``mypyc.build.mypycify``: it must ask mypyc to compile exactly the source files
    of ``COMPILED_MODULES``, in order."""
    calls: dict[str, Any] = {}

    def mypycify(paths: list[str], **kwargs: Any) -> list[str]:
        calls["paths"] = list(paths)
        return ["<extensions>"]

    def setup(**kwargs: Any) -> None:
        calls["setup"] = kwargs

    fake_mypyc_build = types.ModuleType("mypyc.build")
    fake_mypyc_build.mypycify = mypycify  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mypyc.build", fake_mypyc_build)
    monkeypatch.setattr(setuptools, "setup", setup)
    monkeypatch.setenv("FRAGSIM_COMPILE", "1")
    monkeypatch.chdir(REPO)

    setup_globals = runpy.run_path(str(REPO / "setup.py"), run_name="setup")

    assert list(setup_globals["COMPILED_MODULES"]) == list(COMPILED_MODULES)
    assert calls["paths"] == [source_path(name) for name in COMPILED_MODULES]
    assert calls["setup"] == {"ext_modules": ["<extensions>"]}


def write_module(root: Path, path: str, *lines: str) -> None:
    """A source file at ``root/path``: a docstring, then ``lines``."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text('"""A module."""\n' + "".join(f"{line}\n" for line in lines))


def test_the_compiled_list_is_derived_from_the_layout_and_the_markers(tmp_path: Path) -> None:
    """A new module of ``sim/engine`` is compiled without editing a list; one marked pure
    is not; elsewhere only a marked module is; ``__init__`` never is."""
    write_module(tmp_path, "sim/engine/__init__.py")
    write_module(tmp_path, "sim/engine/new_hot.py", "x = 1")
    write_module(tmp_path, "sim/engine/kept.py", f"{PURE_MARK} subclassed by interpreted code")
    write_module(tmp_path, "policies/allocators/new_fit.py")
    write_module(tmp_path, "sim/latency/fast.py", COMPILED_MARK)
    write_module(tmp_path, "sim/latency/slow.py", f"x = '{COMPILED_MARK}'")
    write_module(tmp_path, "sim/engine/deep/inner.py")  # below the package: not whole
    assert derive_compiled_modules(tmp_path) == (
        "policies.allocators.new_fit",
        "sim.engine.new_hot",
        "sim.latency.fast",
    )


def fragsim_marker_lines() -> list[tuple[str, str]]:
    """``(path, line)`` for every line of ``sim`` and ``policies`` naming a marker."""
    return [
        (path.relative_to(REPO).as_posix(), line)
        for package in SEARCHED_PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.lstrip().startswith("# fragsim:")
    ]


def test_every_marker_is_spelt_right_and_where_it_means_something() -> None:
    """A misspelt marker (``# fragsim: compile``) would leave a hot module pure without a
    word; a pure marker must say why and sit in a package compiled whole; a compiled
    marker there says nothing."""
    seen = fragsim_marker_lines()
    assert seen, "no marker found: the derivation reads nothing"
    for path, line in seen:
        package = path.rsplit("/", 1)[0]
        if line == COMPILED_MARK:
            assert package not in COMPILED_PACKAGES, f"{path}: {package} is compiled whole"
        else:
            assert line.startswith(PURE_MARK), f"{path}: unknown marker {line!r}"
            assert line[len(PURE_MARK) :].strip(), f"{path}: say why it stays pure"
            assert package in COMPILED_PACKAGES, f"{path}: pure is the default in {package}"


@pytest.mark.parametrize("name", COMPILED_MODULES)
def test_no_compiled_module_imports_pydantic(name: str) -> None:
    """mypyc's rule the configs keep apart: pydantic models stay interpreted."""
    tree = ast.parse((REPO / source_path(name)).read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] == "pydantic"}, f"{name} imports pydantic"


@pytest.mark.parametrize("kind", sorted(ALLOCATORS))
def test_every_registered_allocator_is_compiled(kind: str) -> None:
    """The allocators are the engine's hottest calls: each registered kind's class lives
    in a compiled module (a new family in another package would be missed)."""
    allocator = parse_allocator({"kind": kind}).build(small_pool(4096))
    assert type(allocator).__module__ in COMPILED_MODULES, (kind, type(allocator).__module__)
