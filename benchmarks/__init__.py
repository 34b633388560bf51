"""Benchmarks, run by ``make bench`` (``python -m benchmarks``), never by pytest.

Each ``bench_*.py`` module has a ``main()`` that prints one JSON object per line:
``{"bench": name, ...measurements...}``. Pass a module stem to run only that one:
``python -m benchmarks bench_traces``.

With ``FRAGSIM_BENCH_INSTALLED=1`` (``make bench`` sets it and runs the compiled build in
``.venv-native``) the engine is imported from the installed package, not from the source
tree that ``python -m`` puts first on ``sys.path``: the tree moves to the end, where only
``benchmarks`` itself is found. Every result line says which build it measured
(``"engine_build"``: ``compiled`` or ``pure``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if os.environ.get("FRAGSIM_BENCH_INSTALLED") == "1":
    _tree = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _tree] + [_tree]
