"""The alert thresholds of a scenario (``fragsim alerts ... --scenario``): its metrics
block, loaded through the scenario schema (which pulls in the engine, so the alerts
body loads this module only when a scenario is given). A scenario that cannot be read
is one ``error:`` line naming its file, and exit status 2."""

from __future__ import annotations

from pathlib import Path

from sim.cli.common import fail
from sim.errors import os_error_line
from sim.results.seed_alerts import AlertThresholds
from sim.scenario.builtin import resolve_scenario
from sim.scenario.schema import ScenarioError, load_scenario


def thresholds(*, scenario: Path) -> AlertThresholds:
    """The thresholds of ``scenario`` (a file or a built-in name)."""
    source = resolve_scenario(scenario)
    try:
        return load_scenario(source).metrics.thresholds()
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None
