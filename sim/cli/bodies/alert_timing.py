"""A run's alert-rule timing, for the bodies of ``fragsim alerts`` and ``fragsim export
openmetrics``: each rule's ``for:`` and the failure window the run's ``alerts.parquet``
was evaluated with (its summary's ``fleet.alerts``), read with the alert engine's types
(:mod:`sim.telemetry.alert_states`)."""

from __future__ import annotations

from pathlib import Path

from sim.cli.common import fail
from sim.errors import clip
from sim.results.summary_model import Summary
from sim.telemetry.alert_states import DEFAULT_FAILURE_WINDOW_S, RuleTiming


def run_timing(summary: Summary | None, path: Path) -> RuleTiming:
    """Each rule's ``for:`` and the failure window a fleet run's ``alerts.parquet`` was
    evaluated with (its summary's ``fleet.alerts.for_s`` / ``failure_window_s``), the
    shipped ones (:data:`sim.telemetry.alert_states.SHIPPED_FOR_S`) where it records none.
    An unknown alert is one error line naming the field (seconds >= 0 were checked as
    the summary was read)."""
    fleet = None if summary is None else summary.fleet
    recorded = fleet.alerts if fleet is not None else None
    if recorded is None:
        return RuleTiming()
    where = f"{clip(str(path))}: field fleet.alerts"
    found = recorded.for_s or {}
    window = recorded.failure_window_s
    try:
        return RuleTiming(
            {str(k): float(v) for k, v in found.items()},
            float(DEFAULT_FAILURE_WINDOW_S if window is None else window),
        )
    except ValueError as e:
        raise fail(f"{where}.for_s: {e}") from None
