"""The suite runs twice (``make test``): on the pure build and on the compiled one. This
checks each run tests the build it says it does, module by module, so a compiled run
cannot silently import the source tree, nor a pure run a stale extension module; and
that the list of compiled modules (``sim/build.py``) names real source files, each
importable, and is the list ``setup.py`` hands to mypyc."""

from __future__ import annotations

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

from sim.build import COMPILED_MODULES, compiled_files, compiled_modules, engine_build

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
