"""The alert thresholds of a scenario (``fragsim alerts ... --scenario``): its metrics
block (and, for the rules file, its KV offload tier kinds), loaded through the scenario schema (which pulls in the engine, so the alerts
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


def tier_kinds(*, scenario: Path) -> tuple[str, ...]:
    """The KV offload tier kinds of ``scenario`` (its ``kv_offload.tiers``; none without
    the block): the tier alerts its rules file gets."""
    source = resolve_scenario(scenario)
    try:
        offload = load_scenario(source).kv_offload
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None
    return () if offload is None else tuple(tier.kind for tier in offload.tiers)
