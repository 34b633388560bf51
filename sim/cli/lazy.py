"""The one lazy import of the ``fragsim`` command: a command's front names its body as a
string, and :func:`call` imports the body when the command runs.

Each command is split in two. Its *front* (``sim/cli/<command>.py``) is what ``--help``,
a usage error and a light command load: the typer signature, the help text, the checks
made before anything heavy (a scenario file that exists, an option out of range), and
only light imports (standard library, typer, rich, pydantic, the leaves of ``sim``). Its
*body* (``sim/cli/bodies/<command>.py``) does the work and imports what it needs --
pandas, numpy, pyarrow, the engine, ``traces`` -- at file level, like any other module.
The front hands over with one line::

    lazy.call("sim.cli.bodies.run:run", scenario_path=scenario_path, out=out, ...)

which imports ``sim.cli.bodies.run`` (once: Python keeps it in ``sys.modules``) and
calls its ``run`` (a body takes the front's options by name: keyword-only parameters,
plain types). :data:`sim.cli.COMMANDS` loads the fronts themselves through
:func:`resolve`. Nothing else in ``sim/cli/`` imports by name, and no function imports
anything but an optional dependency where it is used (plotly's ``reports`` when a report
is asked for, torch's ``gpu_backend``): ``tests/unit/test_import_direction.py`` holds
that, and ``tests/unit/test_cli_lazy.py`` that every target named in a front exists and
takes the arguments passed.

A body may hand over the same way to a part of its work that pulls in much more and is
not always needed (``alerts``: a scenario's thresholds, only with ``--scenario``).

A front never imports a body (``sim.cli.bodies`` is the layer above ``sim.cli``); a
body may import fronts and the light helpers (``common``, ``output``, ``progress``).
"""

from __future__ import annotations

import importlib
from typing import Any

BODIES = "sim.cli.bodies"
"""The package every body lives in (a target outside it is refused)."""


def resolve(target: str) -> Any:
    """The object ``module:attribute`` names, importing ``module`` if it is not yet
    loaded. A target without both parts is a ``ValueError`` (a programming error, not
    a user's)."""
    module, sep, attribute = target.partition(":")
    if not (module and sep and attribute):
        raise ValueError(f"lazy target {target!r}: expected 'package.module:attribute'")
    return getattr(importlib.import_module(module), attribute)


def call(target: str, /, *args: Any, **kwargs: Any) -> Any:
    """Run the command body ``target`` (``sim.cli.bodies.<module>:<function>``) with the
    arguments the front parsed, and return what it returns."""
    if not target.startswith(BODIES + "."):
        raise ValueError(f"lazy target {target!r}: a command body lives in {BODIES}")
    return resolve(target)(*args, **kwargs)
