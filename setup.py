"""Build script: pure Python by default; an optional compiled build of the engine.

``pip install .`` installs pure Python. With ``FRAGSIM_COMPILE=1`` and mypy installed,
``pip install --no-build-isolation .`` compiles the modules ``sim/build.py`` lists with mypyc
(mypy's compiler for type-annotated Python): the same source and the same results, byte
for byte, about four times the simulated requests per second. The runtime dependencies
must be installed first (mypy loads the pydantic plugin); ``make native`` does it all. ``make native``
builds that into ``.venv-native``; ``make bench`` measures it; ``make test`` runs the
whole suite on both builds. Metadata and the pure build are in ``pyproject.toml``.

Compiled modules are ordinary typed Python with a few rules (mypyc's): no pydantic
models (configs live in ``policies/allocators/config.py`` and ``sim/latency/config.py``),
no monkeypatching of their classes, and annotations that hold at run time (an ``int``
attribute given a float raises TypeError in the compiled build).
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import setup

# The module list lives in sim/build.py (the package reports its own build from it);
# read it without importing the package.
_BUILD_INFO = Path(__file__).resolve().parent / "sim" / "build.py"
COMPILED_MODULES: list[str] = list(runpy.run_path(str(_BUILD_INFO))["COMPILED_MODULES"])


def ext_modules() -> list:  # type: ignore[type-arg]
    if os.environ.get("FRAGSIM_COMPILE", "0") != "1":
        return []
    from mypyc.build import mypycify

    paths = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    return mypycify(paths, opt_level="3")


setup(ext_modules=ext_modules())
