"""Which build of the engine is running: pure Python or compiled (mypyc).

``setup.py`` compiles :data:`COMPILED_MODULES` when ``FRAGSIM_COMPILE=1`` (``make
native``). The list is derived, never kept by hand: every module of ``sim/engine`` and
``policies/allocators`` unless it says ``# fragsim: pure: <why>`` on a line of its own,
and any other module of ``sim`` or ``policies`` that says ``# fragsim: compiled``. The two builds run the same source and give the same outputs byte for byte;
the compiled one is faster. This module imports nothing of the engine, so ``setup.py``
reads the list from it without importing the package.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The folder holding the ``sim`` and ``policies`` packages (the repo, or site-packages)."""

SEARCHED_PACKAGES: tuple[str, ...] = ("sim", "policies")
"""The packages whose modules may be compiled (searched for markers, recursively)."""

COMPILED_PACKAGES: tuple[str, ...] = ("sim/engine", "policies/allocators")
"""Packages compiled whole: each module directly in them is compiled unless it carries
:data:`PURE_MARK`, so a new hot module there cannot be forgotten."""

COMPILED_MARK = "# fragsim: compiled"
"""A line of its own (column 0) that opts a module elsewhere into the compiled build."""

PURE_MARK = "# fragsim: pure:"
"""A line of its own (column 0), followed by the reason, that keeps a module of a
:data:`COMPILED_PACKAGES` package interpreted (pydantic, subclassed by interpreted code)."""


def module_marks(path: Path) -> tuple[bool, bool]:
    """``(compiled, pure)``: whether the source at ``path`` carries each marker line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return (COMPILED_MARK in lines, any(line.startswith(PURE_MARK) for line in lines))


def derive_compiled_modules(root: Path) -> tuple[str, ...]:
    """The modules to compile under ``root``, sorted by name: every module directly in a
    :data:`COMPILED_PACKAGES` package without :data:`PURE_MARK`, and every module of the
    :data:`SEARCHED_PACKAGES` with :data:`COMPILED_MARK`. Reads sources, imports nothing."""
    out: list[str] = []
    for package in SEARCHED_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).with_suffix("")
            if relative.name == "__init__":
                continue
            compiled, pure = module_marks(path)
            whole = relative.parent.as_posix() in COMPILED_PACKAGES
            if compiled or (whole and not pure):
                out.append(".".join(relative.parts))
    return tuple(sorted(out))


COMPILED_MODULES: tuple[str, ...] = derive_compiled_modules(ROOT)
"""The engine's hot modules, derived from the layout and the markers: plain typed
Python, no pydantic models, no monkeypatching of their classes (mypyc's rules)."""


def compiled_modules() -> dict[str, bool]:
    """Each of :data:`COMPILED_MODULES` -> whether it was imported from a compiled
    extension (imports them)."""
    out: dict[str, bool] = {}
    for name in COMPILED_MODULES:
        path = getattr(importlib.import_module(name), "__file__", None) or ""
        out[name] = path.endswith(tuple(EXTENSION_SUFFIXES))
    return out


def compiled_files() -> dict[str, bool]:
    """Each of :data:`COMPILED_MODULES` -> whether a compiled extension of it sits beside
    its source, without importing it (Python's path finder loads an extension before
    a ``.py`` of the same name, so this is what an import would load)."""
    out: dict[str, bool] = {}
    for name in COMPILED_MODULES:
        top, *inner, last = name.split(".")
        spec = importlib.util.find_spec(top)  # a top-level package: found, not imported
        roots = spec.submodule_search_locations if spec is not None else None
        out[name] = any(
            (Path(root, *inner) / f"{last}{suffix}").is_file()
            for root in roots or []
            for suffix in EXTENSION_SUFFIXES
        )
    return out


def engine_build() -> str:
    """``"compiled"`` when every hot module is compiled, ``"pure"`` when none is,
    ``"mixed"`` otherwise (a stale or partial build). Imports none of them (``fragsim
    version`` starts as fast as ``--help``)."""
    flags = set(compiled_files().values())
    if flags == {True}:
        return "compiled"
    return "pure" if flags == {False} else "mixed"
