"""The HTML report of a postmortem folder: ``fragsim postmortem`` writes it as
``OUT/report.html`` and ``fragsim report OUT/`` rebuilds it from the folder.

What it reads (all written by ``fragsim postmortem``): ``postmortem.json`` (the match's
counts and scores, the log's span, nodes and node events), ``match.csv`` (recorded and
simulated failures, with times), ``compare.csv`` (the replay, the modelled baseline and
the counterfactuals), ``replicas.csv`` (the replay's fleet ids and the log's names).

What it shows, nodes always by the log's names: an answer table (precision, recall,
reproduced of recorded, routing, the best counterfactual), recorded vs replayed failures
over time (fleet totals per time bin), the same per node over time (the :data:`TOP_NODES`
nodes with most failures; node events marked; one line instead when nothing failed),
failures per node, the modelled baseline against the log and the replay, the runs ranked
against the baseline (:func:`sim.postmortem.baseline.ranked`, the CLI's ranks),
and the failures that did not match.

Size: plotly.js once (4.8 MB with plotly 6) plus the figures; every figure draws at
most :data:`TOP_NODES` nodes and :data:`MAX_POINTS` failure markers in all (every k-th
failure of each outcome in time order beyond that, said in the title), and tables list
at most ``reports.postmortem_tables.MAX_ROWS`` rows, so a report stays under about 5.5 MB whatever the log's
size (5.2 MB measured on 45,000 failures over 637 nodes and six days).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from reports.common import base_layout, esc, time_unit
from reports.html import STYLE, ReportError, figure_html, write_html
from reports.postmortem_tables import (
    agreement_table,
    answer_table,
    counterfactual_table,
    deltas,
    node_table,
    unmatched_table,
)
from sim.postmortem.matching import failures_by_replica

FILES = ("postmortem.json", "match.csv", "compare.csv")
"""What makes a folder a postmortem's (``replicas.csv`` is optional: older folders)."""
TOP_NODES = 30
MAX_POINTS = 10_000
REPRODUCED, MISSED, EXTRA = "#2ca02c", "#d62728", "#ff7f0e"
RECORDED, REPLAYED, EVENT = "#3f4f75", "#9ecae1", "#7f7f7f"


@dataclass(frozen=True)
class Postmortem:
    """A postmortem folder, read."""

    name: str
    record: dict[str, Any]
    match: pd.DataFrame
    compare: pd.DataFrame
    replicas: pd.DataFrame | None


def is_postmortem_dir(path: str | Path) -> bool:
    """True when ``path`` holds a postmortem's files (:data:`FILES`)."""
    return all((Path(path) / name).is_file() for name in FILES)


def read_postmortem(path: str | Path) -> Postmortem:
    """Read a postmortem folder; :class:`ReportError` naming what is missing or broken."""
    folder = Path(path)
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise ReportError(f"{folder}: not a postmortem folder (no {', '.join(missing)})")
    try:
        record = json.loads((folder / "postmortem.json").read_text(encoding="utf-8"))
        match = pd.read_csv(folder / "match.csv", dtype={"replica": str, "simulated_replica": str})
        compare = pd.read_csv(folder / "compare.csv")
        replicas_csv = folder / "replicas.csv"
        replicas = pd.read_csv(replicas_csv) if replicas_csv.is_file() else None
    except (ValueError, OSError) as e:
        raise ReportError(f"{folder}: cannot read the postmortem ({e})") from None
    if "recorded_time_s" not in match.columns:
        raise ReportError(f"{folder}/match.csv: no recorded_time_s (rerun fragsim postmortem)")
    return Postmortem(folder.resolve().name, record, match, compare, replicas)


def write_postmortem_report(path: str | Path, out: str | Path) -> Path:
    """Read the postmortem folder ``path`` and write its report to ``out`` atomically."""
    return write_html(build_postmortem_report(read_postmortem(path)), out)


# -- the page ---------------------------------------------------------------------------------
def build_postmortem_report(pm: Postmortem) -> str:
    """The report's HTML (module docstring)."""
    log, base = pm.record.get("log") or pm.name, pm.record.get("scenario")
    title = f"postmortem of log {log}/" + (f" on {base}" if base else "")
    numbers = iter(range(1_000_000))
    parts = [
        '<h2 id="answer">answer</h2>',
        answer_table(pm),
        '<h2 id="recorded-vs-replayed-failures-over-time">recorded vs replayed failures over time</h2>',
        *_failure_figures(pm, numbers, (failures_over_time, failures_by_node_over_time)),
        '<h2 id="per-node">per node</h2>',
        *_failure_figures(pm, numbers, (failures_by_node,)),
        node_table(pm),
        '<h2 id="counterfactuals">counterfactuals</h2>',
        _counterfactuals(pm, next(numbers)),
        '<h2 id="failures-that-did-not-match">failures that did not match</h2>',
        unmatched_table(pm),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>'
        f"<h1>{esc(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def _failure_figures(
    pm: Postmortem, numbers: Iterator[int], figures: tuple[Callable[[Postmortem], go.Figure], ...]
) -> list[str]:
    """The failure figures, or one line when neither the log nor the replay failed (a
    panel with nothing to show says so instead of drawing empty axes)."""
    if pm.match.empty:
        return ["<p>no failures to draw: neither the log nor the replay has a failed request</p>"]
    return [figure_html(f(pm), next(numbers)) for f in figures]


# -- failures ---------------------------------------------------------------------------------
def failure_points(match: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``(time_s, replica, request_id)`` per failure, by outcome: ``reproduced`` (recorded
    and replayed), ``missed`` (recorded, not replayed) and ``extra`` (replayed, not
    recorded); the first two at the recorded time and node, ``extra`` at the replay's."""
    recorded = match[match["recorded_time_s"].notna()]
    matched = recorded["matched"].astype(bool)
    extra = match[match["recorded_time_s"].isna()]

    def points(frame: pd.DataFrame, time: str, replica: str, rid: str) -> pd.DataFrame:
        out = pd.DataFrame(
            {
                "time_s": frame[time].astype(float).to_numpy(),
                "replica": frame[replica].astype(str).to_numpy(),
                "request_id": frame[rid].to_numpy(),
            }
        )
        return out.sort_values(["time_s", "replica"], kind="stable").reset_index(drop=True)

    return {
        "reproduced": points(recorded[matched], "recorded_time_s", "replica", "request_id"),
        "missed": points(recorded[~matched], "recorded_time_s", "replica", "request_id"),
        "extra": points(extra, "simulated_time_s", "simulated_replica", "simulated_request_id"),
    }


def _thin_by(rows: int) -> int:
    """k such that every k-th of ``rows`` markers is at most :data:`MAX_POINTS`."""
    return max(1, math.ceil(rows / MAX_POINTS))


def _bins(end_s: float) -> tuple[float, str]:
    """A time bin width (s) giving about 40-120 bins over ``end_s``, and its name."""
    for width, name in (
        (60, "1 min"),
        (300, "5 min"),
        (900, "15 min"),
        (3600, "1 h"),
        (4 * 3600, "4 h"),
        (86400, "1 day"),
    ):
        if end_s / width <= 120:
            return float(width), name
    return 7 * 86400.0, "1 week"


def failures_over_time(pm: Postmortem) -> go.Figure:
    """Fleet totals per time bin, the log above the axis and the replay below it: the
    log's failures (reproduced, missed) up, the replay's (reproduced, extra) down, so a
    reproduced failure shows on both sides at the same time; node events as lines."""
    pts = failure_points(pm.match)
    end_s = _end_s(pm, pts)
    width, name = _bins(end_s)
    div, label = time_unit(end_s)
    edges = np.arange(0.0, end_s + width, width)
    centers = (edges[:-1] + width / 2) / div
    fig = go.Figure()
    for key, series, colour, sign in (
        ("reproduced", "log: reproduced", REPRODUCED, 1),
        ("missed", "log: not reproduced", MISSED, 1),
        ("reproduced", "replay: recorded in the log", REPRODUCED, -1),
        ("extra", "replay: not in the log", EXTRA, -1),
    ):
        counts, _ = np.histogram(pts[key]["time_s"].to_numpy(), bins=edges)
        fig.add_trace(
            go.Bar(
                x=centers,
                y=sign * counts,
                width=width / div,
                name=series,
                marker={"color": colour, "opacity": 1.0 if sign > 0 else 0.6},
                customdata=counts,
                hovertemplate="%{x:.4g}: %{customdata}<extra>" + series + "</extra>",
            )
        )
    _event_lines(fig, pm, div)
    title = f"failures per {name}, whole fleet: the log above the axis, the replay below"
    fig.update_layout(**base_layout(title, 420), barmode="relative", bargap=0.1)
    fig.update_xaxes(title=label, range=[0, end_s / div])
    top = max(1, *(abs(int(v)) for t in fig.data for v in t.y))
    ticks = _mirror_ticks(top)
    fig.update_yaxes(
        title=f"failed requests per {name}",
        zeroline=True,
        zerolinecolor="#444",
        range=[-top * 1.1, top * 1.1],
        tickvals=ticks,
        ticktext=[f"{abs(v):,}" for v in ticks],
    )
    return fig


def _mirror_ticks(top: int) -> list[int]:
    """Ticks from -top to top on a 1-2-5 step (at most 4 each side), shown unsigned."""
    steps = (m * 10**e for e in range(12) for m in (1, 2, 5))
    step = next(st for st in steps if top / st <= 4)
    ups = list(range(0, top + 1, step))
    return [-v for v in reversed(ups[1:])] + ups


def _end_s(pm: Postmortem, pts: dict[str, pd.DataFrame]) -> float:
    span = pm.record.get("span_s") or [0.0, 0.0]
    ends = [float(span[1])] + [float(p["time_s"].max()) for p in pts.values() if len(p)]
    return max(1.0, *ends)


def _event_lines(fig: go.Figure, pm: Postmortem, div: float) -> None:
    events = pm.record.get("node_events", [])
    if len(events) > 50:  # a scaling fleet: too many to read as lines
        return
    for ev in events:
        fig.add_vline(x=ev["time_s"] / div, line={"color": EVENT, "dash": "dot", "width": 1})
        fig.add_annotation(
            x=ev["time_s"] / div,
            y=1.0,
            yref="paper",
            text=esc(f"{ev['replica']} {ev['event']}"),
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"size": 10, "color": EVENT},
        )


def top_nodes(pm: Postmortem) -> tuple[list[str], int]:
    """The nodes with most failures (recorded + replayed; ties by name), at most
    :data:`TOP_NODES`, and how many nodes had any."""
    per = failures_by_replica(pm.match)
    per = per[(per["recorded"] + per["simulated"]) > 0]
    total = per["recorded"] + per["simulated"]
    per = per.assign(total=total).sort_values(
        ["total", "replica"], ascending=[False, True], kind="stable"
    )
    return per["replica"].head(TOP_NODES).tolist(), len(per)


def failures_by_node_over_time(pm: Postmortem) -> go.Figure:
    """One row per node (:func:`top_nodes`): each failure a marker at its time, by
    outcome; the node's recorded events as grey triangles."""
    pts = failure_points(pm.match)
    nodes, with_failures = top_nodes(pm)
    end_s = _end_s(pm, pts)
    div, label = time_unit(end_s)
    fig = go.Figure()
    shown = {key: p[p["replica"].isin(nodes)] for key, p in pts.items()}
    thinned = _thin_by(sum(len(p) for p in shown.values()))
    styles = {
        "reproduced": ("reproduced (recorded and replayed)", REPRODUCED, "circle"),
        "missed": ("recorded, not replayed", MISSED, "x"),
        "extra": ("replayed, not recorded", EXTRA, "circle-open"),
    }
    for key, (series, colour, symbol) in styles.items():
        frame = shown[key].iloc[::thinned]
        fig.add_trace(
            go.Scatter(
                x=frame["time_s"] / div,
                y=frame["replica"].map(esc),
                mode="markers",
                name=series,
                marker={"color": colour, "symbol": symbol, "size": 9, "line": {"width": 1.5}},
                text=[f"request {r}" for r in frame["request_id"].tolist()],
                hovertemplate="%{y} at %{x:.4g}: %{text}<extra>" + series + "</extra>",
            )
        )
    events = [e for e in pm.record.get("node_events", []) if e["replica"] in nodes]
    if events:
        fig.add_trace(
            go.Scatter(
                x=[e["time_s"] / div for e in events],
                y=[esc(e["replica"]) for e in events],
                mode="markers",
                name="node event (log)",
                marker={"color": EVENT, "symbol": "triangle-down", "size": 12},
                text=[esc(f"{e['event']} {e.get('detail') or ''}".strip()) for e in events],
                hovertemplate="%{y} at %{x:.4g}: %{text}<extra></extra>",
            )
        )
    which = f"{len(nodes)} of {with_failures} nodes with failures"
    note = f"; 1 in {thinned} failures drawn" if thinned > 1 else ""
    height = 170 + 26 * max(3, len(nodes))
    fig.update_layout(**base_layout(f"failures per node over time ({which}{note})", height))
    fig.update_xaxes(title=label, range=[0, end_s / div])
    order = [esc(n) for n in reversed(nodes)]
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=order)
    return fig


def failures_by_node(pm: Postmortem) -> go.Figure:
    """Recorded, replayed and reproduced failures per node (:func:`top_nodes`)."""
    nodes, with_failures = top_nodes(pm)
    per = failures_by_replica(pm.match).set_index("replica").reindex(nodes)
    fig = go.Figure()
    for column, name, colour in (
        ("recorded", "recorded failures", RECORDED),
        ("simulated", "replayed failures", REPLAYED),
        ("reproduced", "reproduced", REPRODUCED),
    ):
        fig.add_trace(
            go.Bar(
                y=[esc(n) for n in nodes],
                x=per[column].tolist(),
                name=name,
                orientation="h",
                marker={"color": colour},
            )
        )
    height = 170 + 20 * 3 * max(2, len(nodes)) // 2
    title = f"failures per node ({len(nodes)} of {with_failures} nodes with failures)"
    fig.update_layout(**base_layout(title, height), barmode="group")
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(title="failed requests", rangemode="tozero")
    return fig


def _counterfactuals(pm: Postmortem, number: int) -> str:
    """The modelled baseline against the log and the replay, then the counterfactuals
    against the baseline: a table and their bars."""
    table = deltas(pm)
    if table is None:
        return "<p>no counterfactuals were run (fragsim postmortem --counterfactual NAME)</p>"
    bars = figure_html(_counterfactual_bars(table), number)
    return agreement_table(pm) + counterfactual_table(table) + bars


def _counterfactual_bars(table: pd.DataFrame) -> go.Figure:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("failed requests", "cost ($)"))
    runs = [esc(r) for r in table["run"]]
    colours = [{"replay": RECORDED, "baseline": EVENT}.get(str(r), REPLAYED) for r in table["role"]]
    fig.add_trace(go.Bar(x=runs, y=table["failed_requests"], marker={"color": colours}), 1, 1)
    fig.add_trace(go.Bar(x=runs, y=table["cost_usd"], marker={"color": colours}), 1, 2)
    fig.update_layout(
        **base_layout("replay (dark), modelled baseline (grey) and counterfactuals", 380),
        showlegend=False,
    )
    return fig
