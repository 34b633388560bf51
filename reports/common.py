"""What the figure modules share: escaping, the time axis, thresholds, colours."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

FAILURE_KINDS = ("admission_failure", "growth_failure")
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
VISIBLE_REPLICAS = 4
"""Replicas drawn at first in a per-replica figure; the rest start hidden in the legend
(a click shows them), so a 64-node fleet stays readable."""
FIGURE_WIDTH_PX = None  # figures fill the page's width


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


def ratio_thresholds(summary: dict[str, Any]) -> tuple[float, float]:
    """``(severe, alert)`` for ``largest_contiguous_free_block_ratio``: the scenario's
    metrics thresholds when the summary carries them, else the seed's 0.5 / 0.6."""
    found: dict[str, Any] = {}
    for where in (summary.get("thresholds"), (summary.get("metrics") or {}).get("thresholds")):
        if isinstance(where, dict):
            found = where
            break
    return float(found.get("ratio_severe", 0.5)), float(found.get("ratio_alert", 0.6))


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


def as_float(values: pd.Series) -> np.ndarray:
    return np.asarray(values.to_numpy(dtype=float, na_value=np.nan), dtype=float)
