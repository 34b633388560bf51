"""A disaggregated fleet's two sides, apart (:func:`pd_memory`): over time, per role
(``prefill``, ``decode``: the summary's ``fleet.pools[].role``), the mean share of KV
memory used and the mean ``largest_contiguous_free_block_ratio`` over the role's
replicas up at each periodic sample. Prefill replicas churn short-lived prompt KV (held
for the prefill and its transfer); decode replicas hold long-lived KV that grows token
by token: their fragmentation differs, and one fleet-wide mean would hide the side that
fails. Each line keeps at most :data:`~reports.downsample.MAX_SERIES_POINTS` points
(min/max buckets). A colocated run has no such figure (None).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from reports.common import DEFAULT_OPTIONS, ReportOptions, base_layout, time_unit
from reports.downsample import minmax_indices
from sim.results.io import RunResult

TITLE = "prefill vs decode replicas: KV used share and largest / free ratio"
ROLE_COLOURS = {"prefill": "#1f77b4", "decode": "#d62728"}


def roles_by_replica(result: RunResult) -> dict[int, str]:
    """Replica id -> role, from the summary's pools (empty: a colocated run)."""
    fleet = result.summary.fleet
    if fleet is None or fleet.disagg is None:
        return {}
    return {r: p.role for p in fleet.pools if p.role for r in p.replicas or []}


def role_means(ts: pd.DataFrame, replicas: list[int]) -> pd.DataFrame:
    """Per periodic sample time, the mean used share and ratio of ``replicas`` up."""
    rows = ts[(ts["trigger"] == "periodic") & ts["up"] & ts["replica"].isin(replicas)]
    used = rows["used_tokens"] / rows["capacity_tokens"]
    frame = pd.DataFrame(
        {
            "time_s": rows["time_s"].to_numpy(),
            "used": used.to_numpy(),
            "ratio": rows["largest_contiguous_free_block_ratio"].to_numpy(),
        }
    )
    return frame.groupby("time_s", sort=True).mean().reset_index()


def pd_memory(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> go.Figure | None:
    """See the module docstring."""
    roles = roles_by_replica(result)
    if not roles:
        return None
    ts = result.timeseries
    div, unit = time_unit(float(ts["time_s"].max()) if len(ts) else 0.0)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for role in ("prefill", "decode"):
        means = role_means(ts, [r for r, x in roles.items() if x == role])
        for row, column in ((1, "used"), (2, "ratio")):
            values = means[column].to_numpy(dtype=float)
            keep = minmax_indices(np.nan_to_num(values, nan=1.0))
            fig.add_trace(
                go.Scatter(
                    x=means["time_s"].to_numpy(dtype=float)[keep] / div,
                    y=values[keep],
                    mode="lines",
                    name=f"{role} ({column})",
                    line={"color": ROLE_COLOURS[role], "dash": "solid" if row == 1 else "dot"},
                ),
                row=row,
                col=1,
            )
    fig.update_layout(**base_layout(TITLE, height=520))
    fig.update_yaxes(title_text="KV used share", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title_text="largest / free", range=[0, 1.02], row=2, col=1)
    fig.update_xaxes(title_text=unit, row=2, col=1)
    return fig
