"""The building blocks of :mod:`sim.telemetry.dashboard`: grafana-foundation-sdk builders
preset for its panels (a Prometheus data source chosen by the ``datasource`` variable,
legends, thresholds) and its template variables. Each imports the SDK when called, so
importing this module needs no SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # the optional `grafana` extra: imported by each builder when called
    from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
    from grafana_foundation_sdk.builders.common import VizLegendOptions
    from grafana_foundation_sdk.builders.dashboard import FieldColor, ThresholdsConfig
    from grafana_foundation_sdk.cog.builder import Builder
    from grafana_foundation_sdk.models.dashboard import (
        DataSourceRef,
        DynamicConfigValue,
        VariableModel,
    )

    Panel: TypeAlias = stat.Panel | timeseries.Panel | statetimeline.Panel
    """A panel of the dashboard's rows (each numbered by its ``id`` when placed)."""

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
"""Every query's data source: the ``datasource`` variable."""
SELECTOR = 'replica=~"$replica",pool=~"$pool"'
"""The label matchers every per-replica query carries."""


def seconds(value_s: float) -> str:
    """A Grafana/Prometheus duration (``30s``), rounded up to a whole second."""
    whole = int(value_s)
    return f"{whole + (whole < value_s)}s"


def source() -> DataSourceRef:
    """:data:`DATASOURCE` as the SDK's reference."""
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    return DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])


def query(expr: str, legend: str, ref_id: str) -> prometheus.Dataquery:
    from grafana_foundation_sdk.builders import prometheus

    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref_id)
        .range()
        .datasource(source())
    )


def dashed() -> DynamicConfigValue:
    """A field override: dashed lines (the second query of a panel)."""
    from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

    return DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})


def thresholds(steps: list[tuple[float | None, str]]) -> ThresholdsConfig:
    from grafana_foundation_sdk.builders.dashboard import ThresholdsConfig
    from grafana_foundation_sdk.models.dashboard import Threshold, ThresholdsMode

    return (
        ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=value, color=color) for value, color in steps])
    )


def legend() -> VizLegendOptions:
    from grafana_foundation_sdk.builders.common import VizLegendOptions
    from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement

    return (
        VizLegendOptions()
        .display_mode(LegendDisplayMode.LIST)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def timeseries_panel(title: str, description: str, unit: str, step_s: float) -> timeseries.Panel:
    """A half-width time series panel over :data:`DATASOURCE`, its minimum step
    ``step_s``, legend below, tooltip of every series."""
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.builders.common import VizTooltipOptions
    from grafana_foundation_sdk.models.common import SortOrder, TooltipDisplayMode

    tooltip = VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING)
    return (
        timeseries.Panel()
        .datasource(source())
        .title(title)
        .description(description)
        .unit(unit)
        .interval(seconds(step_s))
        .legend(legend())
        .tooltip(tooltip)
        .height(9)
        .span(12)
    )


def stat_panel(title: str, description: str, unit: str, calc: str, step_s: float) -> stat.Panel:
    """A third-width stat panel over :data:`DATASOURCE` showing the ``calc`` reduction
    (Grafana's name: ``lastNotNull``, ``min``, ``max``) of its one series."""
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.builders.common import ReduceDataOptions

    return (
        stat.Panel()
        .datasource(source())
        .title(title)
        .description(description)
        .unit(unit)
        .interval(seconds(step_s))
        .reduce_options(ReduceDataOptions().calcs([calc]).values(False))
        .height(4)
        .span(8)
    )


def fixed_red() -> FieldColor:
    from grafana_foundation_sdk.builders.dashboard import FieldColor
    from grafana_foundation_sdk.models.dashboard import FieldColorModeId

    return FieldColor().mode(FieldColorModeId.FIXED).fixed_color("red")


def variables() -> list[Builder[VariableModel]]:
    """``datasource`` (any Prometheus), ``pool`` and ``replica`` (label values over the
    time range, multi-valued, "All" = ``.*``)."""
    from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, QueryVariable
    from grafana_foundation_sdk.models.dashboard import (
        VariableOption,
        VariableRefresh,
        VariableSort,
    )

    ref = source()
    every = VariableOption(selected=True, text="All", value="$__all")
    datasource = DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    pool = (
        QueryVariable("pool")
        .label("pool")
        .datasource(ref)
        .query("label_values(fragsim_kv_capacity_tokens, pool)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(every)
    )
    replica = (
        QueryVariable("replica")
        .label("replica")
        .datasource(ref)
        .query('label_values(fragsim_kv_capacity_tokens{pool=~"$pool"}, replica)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.NUMERICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(every)
    )
    return [datasource, pool, replica]
