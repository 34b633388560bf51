"""fragsim's simulator: trace-driven SimPy runs of LLM-serving replicas and their KV-cache
allocators. Imports no torch and no plotly.

The public API (everything else is internal and may move)::

    import sim
    scenario = sim.load_scenario("seed-bimodal-best-fit")   # a path or a built-in name
    result = sim.run(scenario)                               # the scenario's own workload
    result.summary.failures, result.requests, result.timeseries, result.events
    result.write("out/")                                     # Parquet + JSON, atomically

* :func:`run` -- simulate a :class:`Scenario` (on its own workload, or on a canonical
  request table from ``traces.load``) and return a :class:`RunResult`.
* :func:`load_scenario` / :func:`parse_scenario` -- a scenario from a YAML file (or a
  built-in name) / from a dict; both raise :class:`ScenarioError` naming the field.
* :func:`load_workload` -- the request table a scenario's ``workload`` describes.
* :func:`read_result` -- a :class:`RunResult` back from a run directory.

Packages (``docs/layout.md`` maps them and the direction of their imports):
``sim.engine`` (the compiled core: scheduler, decode ticks, replica, recorder),
``sim.models`` (GPU and model presets), ``sim.latency`` (step-time models),
``sim.scenario`` (schema, workloads, built-ins), ``sim.results`` (frames, summary,
files), ``sim.simulate`` (what a replica and a fleet share), ``sim.fleet`` (the fleet),
``sim.telemetry`` (alerts, Prometheus, OpenMetrics), ``sim.postmortem``, ``sim.sweep``
and ``sim.cli`` (the ``fragsim`` command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.results.io import RunResult
    from sim.results.runfolder import read_result
    from sim.runner import run
    from sim.scenario.schema import Scenario, ScenarioError, load_scenario, parse_scenario
    from sim.scenario.workload import load_workload

# The public API is imported on first use (PEP 562): importing the package, or a light
# module of it, stays cheap -- the ``fragsim`` command guards Ctrl-C during its own heavy
# imports (``sim.cli.interrupt``), which it can only do once ``sim`` itself is imported.
_PUBLIC = {
    "RunResult": "sim.results.io",
    "Scenario": "sim.scenario.schema",
    "ScenarioError": "sim.scenario.schema",
    "load_scenario": "sim.scenario.schema",
    "load_workload": "sim.scenario.workload",
    "parse_scenario": "sim.scenario.schema",
    "read_result": "sim.results.runfolder",
    "run": "sim.runner",
}

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "load_workload",
    "parse_scenario",
    "read_result",
    "run",
]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
