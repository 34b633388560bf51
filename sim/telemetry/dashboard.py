"""The fleet seed's Grafana dashboard over the series ``fragsim export openmetrics``
writes (:mod:`sim.telemetry.openmetrics`), built with Grafana's own builder library
(``grafana-foundation-sdk``, the ``grafana`` extra) so the JSON is Grafana's schema, not
a hand-kept copy of it.

What it shows (the seed's panels, one row each): the range's allocation failures at
high free memory, lowest largest-free-extent ratio and peak of active replicas; free KV
memory beside the largest free extent per replica, and their ratio against the alert
thresholds; failures at high free memory per replica beside each replica's uptime since
its last restart and the uptime-vs-fragmentation correlation the uptime alert reads;
the fleet's replicas by lifecycle state; and the alerts, from the ``ALERTS`` series
(firing per alert and replica, and how many replicas each alert is pending and firing
on), which also mark the graphs as annotations. Panels read fragsim's names and labels
(``replica``, ``pool``); ``fragsim_fleet_replicas`` is fleet-wide (labelled ``state``
only), so the pool and replica variables do not narrow that panel.

Variables. ``datasource`` (any Prometheus data source), ``pool`` and ``replica``
(label values over the dashboard's time range, multi-valued, "All" = ``.*``: every
query matches ``replica=~"$replica",pool=~"$pool"``, which also matches a series
without the label). Time: the dashboard opens on the run's simulated span at its
origin (Prometheus holds a backfill at those dates, not "now"), in UTC. Thresholds
drawn on the ratio and correlation panels are the run's (:class:`DashboardOptions`).

Bytes. :func:`dashboard_json` is deterministic: the same options give the same text
(keys sorted, two-space indent, a final newline); nothing depends on the clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sim.results.seed_alerts import AlertThresholds
from sim.telemetry import dashboard_parts as parts
from sim.telemetry.dashboard_parts import SELECTOR
from sim.telemetry.openmetrics import DEFAULT_ORIGIN_S

if TYPE_CHECKING:  # the optional `grafana` extra, imported where a dashboard is built
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

    from sim.telemetry.dashboard_parts import Panel

DASHBOARD_UID = "fragsim-fleet"
"""The dashboard's uid: importing it again replaces the same dashboard."""
DEFAULT_SPAN_S = 86_400.0
"""The time range without a run: a day from the origin."""


@dataclass(frozen=True)
class DashboardOptions:
    """What the dashboard is built for: the simulated time 0 (Unix seconds, the
    export's ``--origin``) and the run's span, the scrape interval (the panels' minimum
    step and the annotation's), and the alert thresholds drawn on the panels."""

    origin_s: float = DEFAULT_ORIGIN_S
    """Unix seconds of simulated second 0 (``--origin`` of both exports)."""
    span_s: float = DEFAULT_SPAN_S
    """Simulated seconds the time range spans from the origin (a run's ``span_s``)."""
    scrape_interval_s: float = 30.0
    """The run's alert scrape interval: the panels' minimum step, the annotation's step."""
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    """Drawn on the ratio, correlation and failure panels (a run's recorded ones)."""
    title: str = "fragsim fleet: KV-cache fragmentation"


def instant(unix_s: float) -> str:
    """Unix seconds as the ISO 8601 UTC instant a dashboard's time range takes."""
    moment = datetime.fromtimestamp(unix_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _summary_row(options: DashboardOptions) -> list[Panel]:
    t = options.thresholds
    failures = (
        parts.stat_panel(
            "Allocation failures at high free memory",
            f"Allocation failures while more than {t.high_free_share:.0%} of KV memory was "
            "free, over the dashboard's range: fragmentation, not exhaustion (the seed's "
            "first alert fires on any).",
            "short",
            "lastNotNull",
            options.scrape_interval_s,
        )
        .decimals(0)
        .thresholds(parts.thresholds([(None, "green"), (1, "red")]))
        .with_target(
            parts.query(
                "sum(increase(fragsim_allocation_failures_at_high_free_memory_total"
                f"{{{SELECTOR}}}[$__range]))",
                "failures",
                "A",
            )
        )
    )
    lowest = (
        parts.stat_panel(
            "Lowest largest-free-extent ratio",
            "The lowest largest free extent / free KV memory of any replica shown, over the "
            f"range (alerts below {t.ratio_alert:g}; severe below {t.ratio_severe:g}).",
            "percentunit",
            "min",
            options.scrape_interval_s,
        )
        .thresholds(
            parts.thresholds([(None, "red"), (t.ratio_severe, "orange"), (t.ratio_alert, "green")])
        )
        .with_target(
            parts.query(
                f"min(fragsim_largest_contiguous_free_block_ratio{{{SELECTOR}}})", "ratio", "A"
            )
        )
    )
    active = (
        parts.stat_panel(
            "Peak active replicas",
            "The most replicas active (serving) at once over the range, fleet-wide (a "
            "single replica's run has no fleet states: none).",
            "short",
            "max",
            options.scrape_interval_s,
        )
        .decimals(0)
        .no_value("none")
        .thresholds(parts.thresholds([(None, "blue")]))
        .with_target(parts.query('sum(fragsim_fleet_replicas{state="active"})', "active", "A"))
    )
    return [failures, lowest, active]


def _memory_row(options: DashboardOptions) -> list[Panel]:
    from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig
    from grafana_foundation_sdk.models.common import GraphTresholdsStyleMode

    t = options.thresholds
    memory = (
        parts.timeseries_panel(
            "Free KV memory vs largest free extent",
            "Per replica: all free KV memory (solid) and the largest free extent a new "
            "request can use (dashed). A wide gap is memory free but unusable. Written in "
            "bytes when the run records its KV bytes per token (fragsim export openmetrics "
            "--kv-bytes-per-token otherwise).",
            "bytes",
            options.scrape_interval_s,
        )
        .min(0)
        .with_target(parts.query(f"fragsim_kv_free_bytes{{{SELECTOR}}}", "free · {{replica}}", "A"))
        .with_target(
            parts.query(
                f"fragsim_kv_largest_free_extent_bytes{{{SELECTOR}}}",
                "largest free extent · {{replica}}",
                "B",
            )
        )
        .override_by_query("B", [parts.dashed()])
    )
    ratio = (
        parts.timeseries_panel(
            "Largest free extent / free memory",
            "fragsim_largest_contiguous_free_block_ratio per replica. Dashed lines: "
            f"high_fragmentation_approaching_threshold below {t.ratio_alert:g}, "
            f"severe_fragmentation below {t.ratio_severe:g}. No value while nothing is free.",
            "percentunit",
            options.scrape_interval_s,
        )
        .min(0)
        .max(1)
        .thresholds(
            parts.thresholds([(None, "red"), (t.ratio_severe, "orange"), (t.ratio_alert, "green")])
        )
        .thresholds_style(GraphThresholdsStyleConfig().mode(GraphTresholdsStyleMode.DASHED))
        .with_target(
            parts.query(
                f"fragsim_largest_contiguous_free_block_ratio{{{SELECTOR}}}", "{{replica}}", "A"
            )
        )
    )
    return [memory, ratio]


def _failure_row(options: DashboardOptions) -> list[Panel]:
    from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig
    from grafana_foundation_sdk.models.common import GraphDrawStyle, GraphTresholdsStyleMode

    t = options.thresholds
    failures = (
        parts.timeseries_panel(
            "Allocation failures at high free memory",
            "Per replica, in each $__rate_interval: allocation failures while more than "
            f"{t.high_free_share:.0%} of its KV memory was free "
            "(fragmentation_driven_allocation_failure).",
            "short",
            options.scrape_interval_s,
        )
        .draw_style(GraphDrawStyle.BARS)
        .fill_opacity(80)
        .min(0)
        .with_target(
            parts.query(
                "sum by (replica) (increase(fragsim_allocation_failures_at_high_free_memory"
                f"_total{{{SELECTOR}}}[$__rate_interval]))",
                "{{replica}}",
                "A",
            )
        )
    )
    uptime = (
        parts.timeseries_panel(
            "Uptime since last restart",
            "Per replica: time since its last (re)start. Fragmentation grows with it and a "
            "restart resets both.",
            "s",
            options.scrape_interval_s,
        )
        .min(0)
        .with_target(parts.query(f"fragsim_node_uptime_seconds{{{SELECTOR}}}", "{{replica}}", "A"))
    )
    correlation = (
        parts.timeseries_panel(
            "Uptime vs fragmentation correlation",
            "Per replica: Spearman's rho of (uptime, 1 - ratio) over the trend window "
            "(node_uptime_vs_fragmentation_correlation fires at or above "
            f"{t.uptime_rho_alert:g}, dashed).",
            "none",
            options.scrape_interval_s,
        )
        .min(-1)
        .max(1)
        .thresholds(parts.thresholds([(None, "green"), (t.uptime_rho_alert, "red")]))
        .thresholds_style(GraphThresholdsStyleConfig().mode(GraphTresholdsStyleMode.DASHED))
        .with_target(
            parts.query(
                f"fragsim_node_uptime_vs_fragmentation_correlation{{{SELECTOR}}}",
                "{{replica}}",
                "A",
            )
        )
    )
    return [failures, uptime, correlation, _states_panel(options)]


def _states_panel(options: DashboardOptions) -> timeseries.Panel:
    from grafana_foundation_sdk.builders.common import StackingConfig
    from grafana_foundation_sdk.models.common import StackingMode

    return (
        parts.timeseries_panel(
            "Replicas by state",
            "The fleet's replicas in each lifecycle state (provisioning, loading, warming, "
            "active, draining, down), stacked. Fleet-wide: the pool and replica variables "
            "do not narrow it.",
            "short",
            options.scrape_interval_s,
        )
        .decimals(0)
        .min(0)
        .stacking(StackingConfig().mode(StackingMode.NORMAL))
        .fill_opacity(40)
        .with_target(parts.query("sum by (state) (fragsim_fleet_replicas)", "{{state}}", "A"))
    )


def _alert_row(options: DashboardOptions) -> list[Panel]:
    from grafana_foundation_sdk.builders import statetimeline
    from grafana_foundation_sdk.models.common import VisibilityMode

    counts = (
        parts.timeseries_panel(
            "Replicas per alert: pending and firing",
            "How many replicas each alert is firing on (solid), and pending on (dashed: "
            "its condition holds, its for: not yet elapsed), from Prometheus's ALERTS series.",
            "short",
            options.scrape_interval_s,
        )
        .decimals(0)
        .min(0)
        .with_target(
            parts.query(
                f'count by (alertname) (ALERTS{{alertstate="firing",{SELECTOR}}})',
                "{{alertname}} firing",
                "A",
            )
        )
        .with_target(
            parts.query(
                f'count by (alertname) (ALERTS{{alertstate="pending",{SELECTOR}}})',
                "{{alertname}} pending",
                "B",
            )
        )
    )
    counts = counts.override_by_query("B", [parts.dashed()])
    firing = (
        statetimeline.Panel()
        .datasource(parts.source())
        .title("Firing alerts by replica")
        .description(
            "One row per alert and replica: coloured while Prometheus's ALERTS series has it "
            "firing."
        )
        .unit("none")
        .interval(parts.seconds(options.scrape_interval_s))
        .show_value(VisibilityMode.NEVER)
        .merge_values(True)
        .color_scheme(parts.fixed_red())
        .height(9)
        .span(12)
        .with_target(
            parts.query(
                f'max by (alertname, replica) (ALERTS{{alertstate="firing",{SELECTOR}}})',
                "{{alertname}} · {{replica}}",
                "A",
            )
        )
    )
    return [firing, counts]


def build_dashboard(options: DashboardOptions) -> DashboardModel:
    """The dashboard as the SDK's model (``grafana_foundation_sdk.models.dashboard
    .Dashboard``), panels numbered 1, 2, ... top to bottom; raises ``ImportError``
    where the SDK is not installed."""
    from grafana_foundation_sdk.builders.dashboard import AnnotationQuery, Dashboard, Row
    from grafana_foundation_sdk.models.dashboard import DashboardCursorSync

    firing = (
        AnnotationQuery()
        .name("Firing alerts")
        .datasource(parts.source())
        .enable(True)
        .icon_color("red")
        .expr(f'ALERTS{{alertstate="firing",{SELECTOR}}}')
    )
    board = (
        Dashboard(options.title)
        .uid(DASHBOARD_UID)
        .description(
            "A fragsim run backfilled into Prometheus (fragsim export openmetrics): free "
            "memory vs the largest free extent, failures at high free memory, uptime, "
            "replicas by state and the seed's alerts."
        )
        .tags(["fragsim", "kv-cache", "fragmentation"])
        .timezone("utc")
        .time(instant(options.origin_s), instant(options.origin_s + options.span_s))
        .refresh(False)
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
        .variables(parts.variables())
        .annotation(firing)
    )
    rows: list[tuple[str, list[Panel]]] = [
        ("Summary over the range", _summary_row(options)),
        ("KV memory per replica", _memory_row(options)),
        ("Failures, uptime and replicas", _failure_row(options)),
        ("Alerts", _alert_row(options)),
    ]
    panel_id = 0
    for title, panels in rows:
        panel_id += 1
        board = board.with_row(Row(title).id(panel_id))
        for panel in panels:
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))
    return board.build()


def dashboard_json(options: DashboardOptions) -> str:
    """The dashboard as Grafana's JSON (module docstring: deterministic text). The
    Prometheus annotation also gets the fields Grafana's Prometheus data source reads
    and the SDK's annotation model does not carry (``step``, ``titleFormat``,
    ``textFormat``, ``tagKeys``)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    data = json.loads(JSONEncoder().encode(build_dashboard(options)))
    for annotation in data["annotations"]["list"]:
        annotation.update(
            {
                "step": parts.seconds(options.scrape_interval_s),
                "titleFormat": "{{alertname}}",
                "textFormat": "replica {{replica}} (pool {{pool}}, {{severity}})",
                "tagKeys": "alertname,severity",
                "useValueForTime": False,
            }
        )
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
