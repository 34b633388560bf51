"""The scenario's error and warning classes: a leaf every scenario module raises from
(the schema, the workload, run-cost bounds, retention), so none of them imports the
schema to raise. ``sim.scenario.schema`` re-exports both (``sim.ScenarioError``)."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names the file and the field."""


class ScenarioWarning(UserWarning):
    """A scenario field that is valid but has no effect (the CLI prints ``warning: ...``)."""
