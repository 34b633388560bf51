"""The tables of the postmortem report (:mod:`reports.postmortem`): the answer, nodes,
the modelled baseline and the counterfactuals against it, the failures that did not match. Cells are
escaped here (``reports.common.esc``); every table lists at most :data:`MAX_ROWS` rows
and says where the rest are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from reports.common import esc
from sim.postmortem.baseline import BASELINE, ranked
from sim.postmortem.matching import failures_by_replica
from sim.results.compare import delta_text, formatted, usd

if TYPE_CHECKING:
    from reports.postmortem import Postmortem

MAX_ROWS = 200


def html_table(
    header: list[str] | None, rows: list[list[str]], cls: str = "", left: tuple[int, ...] = ()
) -> str:
    """An HTML table of already escaped cells (``header`` None: no header row); the
    columns in ``left`` are aligned left (prose)."""
    head = (
        "" if header is None else "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
    )

    def cell(i: int, c: str) -> str:
        return f'<td style="text-align:left">{c}</td>' if i in left else f"<td>{c}</td>"

    body = "".join(
        "<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f'<table class="{cls}">{head}{body}</table>'


def capped_table(
    header: list[str], body: list[list[str]], total: int, rest: str, left: tuple[int, ...] = ()
) -> str:
    """:func:`html_table` of the first :data:`MAX_ROWS` rows of ``body`` (escaped cells;
    ``total`` rows in all, ``body`` may hold only the first ones) and, where rows are left
    out, a line saying how many and where they are (``N more {rest}``)."""
    shown = body[:MAX_ROWS]
    more = total - len(shown)
    note = f"<p>{more:,} more {rest}</p>" if more else ""
    return html_table(header, shown, left=left) + note


def _score(value: Any) -> str:
    return (
        "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def answer_table(pm: Postmortem) -> str:
    r = pm.record
    rule = r["rule"] + (f" (±{r['tolerance_s']:g} s)" if r.get("tolerance_s") is not None else "")
    span = r.get("span_s") or [0.0, 0.0]
    routed = r.get("router", {})
    rows = [
        (
            "log",
            f"{r['requests']:,} requests over {duration(span[1] - span[0])}, "
            f"{len(r['replicas'])} nodes, {_count(len(r.get('node_events', [])), 'node event')}",
        ),
        ("recorded failures reproduced", f"{r['matched']:,} of {r['recorded_failures']:,}"),
        ("replayed failures", f"{r['simulated_failures']:,}"),
        ("precision (reproduced / replayed failures)", _score(r["precision"])),
        ("recall (reproduced / recorded failures)", _score(r["recall"])),
        ("matching rule", rule),
        ("requests on their recorded node", f"{routed.get('recorded', 0):,}"),
        ("router fallbacks (recorded node not up)", f"{r['router_fallbacks']:,}"),
    ]
    b = r.get("baseline")
    if b:
        rows.append(
            (
                "modelled baseline (the BASE scenario's policies)",
                f"reproduces {b['matched']:,} of {r['recorded_failures']:,} recorded failures "
                f"(precision {_score(b['precision'])}, recall {_score(b['recall'])})",
            )
        )
    best = best_counterfactual(pm)
    if best is not None:
        rows.append(("best counterfactual", best))
    body = [[esc(k), esc(v)] for k, v in rows]
    return html_table(None, body, "summary")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """``45 min``, ``5.5 h``, ``1.0 days``."""
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} days"


def node_table(pm: Postmortem) -> str:
    """Per node: pool, initial uptime, fleet ids in the replay, failures."""
    r = pm.record
    per = failures_by_replica(pm.match).set_index("replica")
    ids: dict[str, list[str]] = {}
    if pm.replicas is not None:
        for fid, name in zip(pm.replicas["fleet_id"], pm.replicas["replica"], strict=True):
            ids.setdefault(str(name), []).append(str(fid))
    pools = r.get("pools") or [""] * len(r["replicas"])
    uptimes = r.get("initial_uptime_s") or [math.nan] * len(r["replicas"])
    rows = []
    for name, pool, up in zip(r["replicas"], pools, uptimes, strict=True):
        got = per.loc[name] if name in per.index else None
        counts = (
            [0, 0, 0] if got is None else [got["recorded"], got["simulated"], got["reproduced"]]
        )
        uptime = "—" if not up else duration(float(up))
        rows.append((sum(counts[:2]), name, pool, uptime, ", ".join(ids.get(name, [])), counts))
    rows.sort(key=lambda row: (-row[0], row[1]))
    body = [
        [esc(name), esc(pool), esc(up), esc(fid), *(f"{c:,}" for c in counts)]
        for _, name, pool, up, fid, counts in rows[:MAX_ROWS]
    ]
    header = [
        "node (log)",
        "pool",
        "up at log start",
        "replay fleet id",
        "recorded",
        "replayed",
        "reproduced",
    ]
    return capped_table(header, body, len(rows), "nodes (none with more failures) in replicas.csv")


# -- counterfactuals --------------------------------------------------------------------------
def deltas(pm: Postmortem) -> pd.DataFrame | None:
    """The replay, the modelled baseline and the counterfactuals against the baseline
    (:func:`sim.postmortem.baseline.ranked`, as the CLI ranks them); None without
    counterfactuals. A folder from before the modelled baseline (no ``role`` column):
    the replay is the baseline."""
    if len(pm.compare) < 2:
        return None
    frame = pm.compare
    if "role" not in frame.columns:
        frame = frame.assign(
            role=[BASELINE] + ["counterfactual"] * (len(frame) - 1),
            change=[""] + [f"{s}" for s in frame["scenario"].tolist()[1:]],
        )
    return ranked(frame)


def best_counterfactual(pm: Postmortem) -> str | None:
    """The verdict of the best-ranked counterfactual (it may rank below the baseline)."""
    table = deltas(pm)
    if table is None:
        return None
    options = table[table["role"] == "counterfactual"]
    return None if options.empty else str(options.iloc[0]["verdict"])


def agreement_table(pm: Postmortem) -> str:
    """The modelled baseline against the log and the replay (``agreement`` of
    ``postmortem.json``); nothing for a folder without it."""
    rows = pm.record.get("agreement") or []
    if not rows:
        return ""

    def num(v: Any, measure: str) -> str:
        if v is None:
            return "—"
        return f"{v:.2f}" if measure in ("precision", "recall") else f"{v:,.0f}"

    body = [
        [esc(r["measure"]), *(num(r[k], r["measure"]) for k in ("log", "replay", "baseline"))]
        for r in rows
    ]
    intro = (
        "<p>The modelled baseline runs the BASE scenario's own policies (router, restart "
        "policy, autoscaler, allocator) on the log's traffic; how close it comes to the "
        "log and to the replay:</p>"
    )
    header = ["measure", "log", "replay", "modelled baseline"]
    return intro + html_table(header, body)


def counterfactual_table(table: pd.DataFrame) -> str:
    """The rows of :func:`deltas` (the replay, the baseline, then by rank) as HTML, with
    an intro."""
    rows = []
    for _, row in table.iterrows():
        option = row["role"] == "counterfactual"
        rank = row["rank"]
        rows.append(
            [
                esc(row["run"]),
                "—" if pd.isna(rank) else f"{int(rank)}",
                formatted("failed_requests", row["failed_requests"]),
                formatted("allocation_failures", row["allocation_failures"]),
                formatted("restarts", row["restarts"]),
                formatted("replicas_mean", row["replicas_mean"]),
                formatted("replica_hours", row["replica_hours"]),
                formatted("cost_usd", row["cost_usd"]),
                money(row["cost_saved_usd"]) if option else "—",
                esc(delta_text("ttft_p99_s", row["ttft_p99_s_delta"], row["ttft_p99_s_delta_pct"]))
                if option
                else formatted("ttft_p99_s", row["ttft_p99_s"]),
                esc(row["verdict"]),
            ]
        )
    header = [
        "run",
        "rank",
        "failed requests",
        "allocation failures",
        "restarts",
        "replicas (mean)",
        "replica-hours",
        "cost ($)",
        "saved vs baseline",
        "TTFT p99 (s)",
        "verdict",
    ]
    intro = (
        "<p>Each counterfactual is the modelled baseline with one change (named in its "
        "verdict), on the log's traffic from its initial fleet (recorded crashes kept, "
        "recorded restarts and scale events left to the policies), and is ranked against "
        "the baseline; the replay is the record and has no rank. TTFT p99 of a "
        "counterfactual is its difference from the baseline's.</p>"
    )
    return intro + html_table(header, rows, left=(len(header) - 1,))


def money(value: float) -> str:
    """Dollars with a true minus sign (``−$4.88``); — when missing."""
    if math.isnan(value):
        return "—"
    return ("−" if value < 0 else "") + esc(usd(abs(value)))


def unmatched_table(pm: Postmortem) -> str:
    """The recorded failures not reproduced and the replayed failures not recorded."""
    m = pm.match[~pm.match["matched"].astype(bool)]
    if m.empty:
        return "<p>every recorded failure was reproduced and every replayed failure recorded</p>"

    def t(v: Any) -> str:
        return "—" if pd.isna(v) else f"{float(v):,.3f}"

    def text(v: Any) -> str:
        return "—" if pd.isna(v) else esc(v)

    body = [
        [
            text(r.request_id),
            text(r.replica),
            text(r.recorded_status),
            t(r.recorded_time_s),
            text(r.simulated_replica),
            text(r.simulated_status),
            t(r.simulated_time_s),
            esc(r.reason),
        ]
        for r in m.head(MAX_ROWS).itertuples(index=False)
    ]
    header = [
        "request",
        "node",
        "recorded status",
        "recorded at (s)",
        "replayed on",
        "replayed status",
        "replayed at (s)",
        "why not matched",
    ]
    return capped_table(header, body, len(m), "rows in match.csv", left=(len(header) - 1,))
