"""Which build of the engine is running: pure Python or compiled (mypyc).

``setup.py`` compiles :data:`COMPILED_MODULES` when ``FRAGSIM_COMPILE=1`` (``make
native``). The two builds run the same source and give the same outputs byte for byte;
the compiled one is faster. This module imports nothing of the engine, so ``setup.py``
reads the list from it without importing the package.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

COMPILED_MODULES: tuple[str, ...] = (
    "sim.engine.batch",
    "sim.engine.ticks",
    "sim.engine.scheduler",
    "sim.engine.running",
    "sim.engine.admission",
    "sim.engine.growth",
    "sim.latency.search",
    "sim.latency.decode_runs",
    "sim.latency.base",
    "sim.latency.models",
    "sim.engine.simpy_adapter",
    "sim.engine.events",
    "sim.engine.feed",
    "sim.engine.replica",
    "sim.engine.driven",
    "sim.engine.view",
    "sim.engine.recorder",
    "sim.results.frames",
    "sim.fleet.loop",
    "sim.fleet.routeviews",
    "policies.routing.base",
    "policies.routing.load",
    "policies.routing.simple",
    "policies.allocators.base",
    "policies.allocators.pooled",
    "policies.allocators.extents",
    "policies.allocators.contiguous",
    "policies.allocators.buddy",
    "policies.allocators.static",
    "policies.allocators.compaction",
    "policies.allocators.paged",
    "policies.allocators.paged_keys",
    "policies.allocators.vm_paged",
    "policies.allocators.caching",
)
"""The engine's hot modules: plain typed Python, no pydantic models, no monkeypatching
of their classes (mypyc's rules)."""


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
