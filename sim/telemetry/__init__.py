"""Telemetry: the seed's alerts evaluated as Prometheus evaluates them
(:mod:`~sim.telemetry.alerts`, their states with ``for:`` in
:mod:`~sim.telemetry.alert_states`), the same rules as a Prometheus rules file and its
promtool tests (:mod:`~sim.telemetry.prometheus`, :mod:`~sim.telemetry.prometheus_tests`),
the OpenMetrics export of a run's series and ALERTS (:mod:`~sim.telemetry.openmetrics`,
:mod:`~sim.telemetry.openmetrics_counters`, :mod:`~sim.telemetry.openmetrics_alerts`)
and the Grafana dashboard (:mod:`~sim.telemetry.dashboard`,
:mod:`~sim.telemetry.dashboard_parts`). Reads the results and the scenario; the fleet
never reads it."""
