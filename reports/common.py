"""What the figure modules share: escaping, the time axis, thresholds, colours, options,
the one-line panel of a figure with nothing to show (:func:`empty_panel`), the HTML note
written below a figure (:func:`with_note`) and a value axis fitted to its data
(:func:`value_axis`)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sim.results.summary_model import Summary

FLEET_EVENT_KINDS = ("restart", "crash", "scale-up", "scale-down")
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
TOP_K = 3
"""Worst replicas a fleet report draws one by one by default (:class:`ReportOptions`)."""
FREE_COLOUR, EXTENT_COLOUR, RATIO_COLOUR = "#1f77b4", "#ff7f0e", "#17becf"
FRAGMENTATION_COLOUR, CAPACITY_COLOUR = "#d62728", "#3f4f75"
RESTART_COLOUR = "#9467bd"
REPLICA_COLOURS = ("#2ca02c", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#393b79")
"""Colours of single replicas drawn over the fleet's bands (none of the bands' own)."""


@dataclass(frozen=True)
class ReportOptions:
    """What a reader can choose about a run's figures."""

    top_k: int = TOP_K
    """Worst replicas (:func:`reports.aggregate.worst_replicas`) drawn one by one over a
    fleet's quantile bands, with their failures; 0 draws none."""

    def __post_init__(self) -> None:
        if not 0 <= self.top_k <= 50:
            raise ValueError(f"top_k must be between 0 and 50, got {self.top_k}")


DEFAULT_OPTIONS = ReportOptions()


def esc(value: object) -> str:
    """Text from a trace or a scenario, safe inside HTML, hover text and annotations
    (plotly renders a few tags in those; escaped, they show as typed)."""
    return html.escape(str(value), quote=True)


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def time_unit(max_s: float) -> tuple[float, str]:
    """``(divisor, label)``: seconds for runs shorter than two hours, else hours."""
    return (1.0, "time (s)") if max_s < 7200 else (3600.0, "time (h)")


def max_time_s(*frames: pd.DataFrame | None) -> float:
    ends = [float(f["time_s"].max()) for f in frames if f is not None and len(f)]
    return max(ends, default=0.0)


def _thresholds(summary: Summary) -> dict[str, float]:
    """The alert thresholds a fleet run recorded (``fleet.alerts.thresholds``); empty
    where it records none (a single replica's run, an older fleet run)."""
    recorded = summary.fleet.alerts if summary.fleet is not None else None
    return dict(recorded.thresholds or {}) if recorded is not None else {}


def ratio_thresholds(summary: Summary) -> tuple[float, float]:
    """``(severe, alert)`` for ``largest_contiguous_free_block_ratio``: the thresholds
    the run recorded, else the seed's 0.5 / 0.6."""
    found = _thresholds(summary)
    return float(found.get("ratio_severe", 0.5)), float(found.get("ratio_alert", 0.6))


def high_free_share(summary: Summary) -> float:
    """The free share above which a failure is "at high free memory": the run's
    recorded threshold, else the seed's 0.25."""
    return float(_thresholds(summary).get("high_free_share", 0.25))


def pools_of(summary: Summary) -> dict[int, str]:
    """Replica id -> pool name, from a fleet summary's ``pools`` (their ``replicas``);
    empty for a single replica or a run written before pools listed their replicas."""
    pools = summary.fleet.pools if summary.fleet is not None else []
    return {int(r): pool.name for pool in pools for r in pool.replicas or ()}


def replica_names(frame: pd.DataFrame) -> dict[int, str]:
    """Replica id -> the name a reader knows it by, where ``frame`` carries one (a
    ``replica_name`` column: a postmortem's runs name nodes as the log does); empty
    otherwise. Label a replica with :func:`replica_label`."""
    if "replica_name" not in frame.columns or not len(frame):
        return {}
    pairs = frame[["replica", "replica_name"]].drop_duplicates("replica")
    return {
        int(r): str(n)
        for r, n in zip(pairs["replica"].tolist(), pairs["replica_name"].tolist(), strict=True)
    }


def replica_label(names: dict[int, str], replica: int) -> str:
    """``replica gpu-03`` (its name in ``names``, :func:`replica_names`) or ``replica 3``."""
    return f"replica {names.get(int(replica), replica)}"


def replicas_of(*frames: pd.DataFrame | None) -> list[int]:
    seen: set[int] = set()
    for f in frames:
        if f is not None and len(f):
            seen.update(int(r) for r in f["replica"].unique() if r >= 0)
    return sorted(seen)


def base_layout(title: str, height: int = 450) -> dict[str, Any]:
    return {
        "title": {"text": esc(title), "x": 0.01, "xanchor": "left"},
        "height": height,
        "margin": {"l": 70, "r": 30, "t": 60, "b": 50},
        "legend": {"orientation": "v", "x": 1.01, "y": 1.0},
        "template": "plotly_white",
        "hovermode": "closest",
    }


EMPTY_META = "empty_panel"
"""The ``layout.meta`` key under which :func:`empty_panel` keeps its one line."""
EMPTY_HEIGHT = 120
"""Height (px) of an empty panel drawn on its own (the report writes one line instead)."""


def empty_panel(title: str, reason: str) -> go.Figure:
    """The panel ``title`` of a run that has nothing for it to show, saying why in one
    line (``reason``): a figure without traces or axes whose ``layout.meta`` carries
    the line (:func:`empty_reason`), which the report writes as one line of text
    instead of drawing a blank plot (``reports.html.figure_html``). Shown on its own
    (``fig.show()``) it is the title over the same line."""
    fig = go.Figure()
    fig.update_layout(**base_layout(title, EMPTY_HEIGHT))
    fig.update_layout(meta={EMPTY_META: reason})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(
        text=esc(reason),
        showarrow=False,
        x=0.0,
        y=0.5,
        xref="paper",
        yref="paper",
        xanchor="left",
    )
    return fig


def empty_reason(fig: go.Figure) -> str | None:
    """The one line of an :func:`empty_panel`; None for a figure that draws something."""
    meta = fig.layout.meta
    if isinstance(meta, dict) and isinstance(meta.get(EMPTY_META), str):
        return str(meta[EMPTY_META])
    return None


NOTE_META = "html_note"
"""The ``layout.meta`` key under which :func:`with_note` keeps a figure's note."""


def with_note(fig: go.Figure, note_html: str) -> go.Figure:
    """``fig`` with ``note_html`` (HTML, its text already escaped) to be written below it
    in the report (``reports.html.figure_html``); kept in ``layout.meta``."""
    fig.update_layout(meta={NOTE_META: note_html})
    return fig


def figure_note(fig: go.Figure) -> str | None:
    """The note of :func:`with_note`; None for a figure without one."""
    meta = fig.layout.meta
    if isinstance(meta, dict) and isinstance(meta.get(NOTE_META), str):
        return str(meta[NOTE_META])
    return None


LOG_DECADES = 1.0
"""A value axis spanning more than this many decades (max / min > 10) is logarithmic."""


def value_axis(values: np.ndarray, pad: float = 0.03) -> dict[str, Any]:
    """Plotly axis settings (``type``, ``range``) fitted to ``values`` (NaN ignored): a
    log axis where the positive values span more than :data:`LOG_DECADES` decades,
    else a linear one; the range from the smallest to the largest value, widened by
    ``pad`` of the span on each side (in log10 units on a log axis), so no part of the
    axis is empty of data. Empty or constant data: ``{}`` (plotly's own range)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v) or float(v.max()) == float(v.min()):
        return {}
    low, high = float(v.min()), float(v.max())
    positive = v[v > 0]
    if low > 0 and np.log10(high / low) > LOG_DECADES:
        lo, hi = np.log10(float(positive.min())), np.log10(high)
        margin = pad * (hi - lo)
        return {"type": "log", "range": [lo - margin, hi + margin]}
    margin = pad * (high - low)
    return {
        "type": "linear",
        "range": [max(low - margin, 0.0) if low >= 0 else low - margin, high + margin],
    }


def as_float(values: pd.Series) -> np.ndarray:
    return np.asarray(values.to_numpy(dtype=float, na_value=np.nan), dtype=float)
