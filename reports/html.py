"""One self-contained HTML report over one or more runs (``fragsim report``).

Layout: the title is the scenario's name (``summary.scenario``; the run folders' names
where several runs share one). For several runs the comparison table and its bar charts
come first. Then, per run: the answer panel (:mod:`reports.answer`: the verdict with its
definitions, the seed's alerts), the figures (:data:`FIGURES`), and every number of the
summary in a collapsed table. plotly.js is embedded once, in the head
(``plotly.offline.get_plotlyjs()``), and every figure is a ``<div>`` with its own
``Plotly.newPlot`` call, so the file opens offline. Every string that came from a trace
or a scenario is escaped (``html.escape``); div ids are numbered, so the same runs give
the same bytes.

Size bound. Whatever the run's size, each figure is bounded by construction
(:mod:`reports.downsample`, :mod:`reports.aggregate`): at most
:data:`MAX_FIGURE_VALUES` plotted values per figure, so a one-run report is at most
plotly.js (about 4.8 MB with plotly 7, once) plus about 3 MB; a six-day, 637-replica
fleet report is about 6 MB (``tests/unit/test_report_bounds.py`` holds a synthetic 600-replica,
six-day run under both bounds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from reports.answer import COMPARE_COLUMNS, answer_html, find_out_sentence, fix_sentence
from reports.common import DEFAULT_OPTIONS, ReportOptions, empty_reason, esc, figure_note
from reports.comparison import comparison_bars, comparison_frame, comparison_table
from reports.disagg import pd_memory
from reports.fleet import cost_over_time, replicas_over_time
from reports.kv_manager import kv_manager_waste
from reports.memory import replica_memory
from reports.offload import offload_tiers
from reports.timeline import alert_timeline, failures_over_time
from reports.uptime import ratio_vs_uptime
from reports.usage import latency_cdfs, waste_breakdown
from sim.results.io import RunResult
from sim.results.labels import WASTE_LABELS
from sim.results.offload_rows import offload_rows
from sim.results.runfolder import RunFolderError, check_run_folder, read_result
from sim.results.summary import alert_lines
from sim.results.summary_model import Disagg, Summary
from traces.atomic import atomic_path

FIGURES: tuple[Callable[[RunResult, ReportOptions], go.Figure | None], ...] = (
    replica_memory,
    pd_memory,
    ratio_vs_uptime,
    failures_over_time,
    waste_breakdown,
    kv_manager_waste,
    offload_tiers,
    alert_timeline,
    replicas_over_time,
    cost_over_time,
    latency_cdfs,
)
"""A run's figures, in report order; one returning None (a fleet figure of a single
replica) is skipped; one with nothing to show returns :func:`reports.common.empty_panel`,
written as one line."""
MAX_FIGURE_VALUES = 60_000
"""Most plotted values (x and y counted apart) any run figure holds, whatever the run."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.alerts li.high { color: #b00; } .alerts li.medium { color: #a60; }
.figure { margin: 1em 0; }
td.sub { padding-left: 1.8em; color: #555; }
table.answer td, table.answer th { vertical-align: top; text-align: left; }
table.answer td.def, p.def { text-align: left; color: #555; font-size: 0.92em; max-width: 60em; }
table.alerts-table td, table.alerts-table th { text-align: left; }
p.verdict { font-size: 1.05em; max-width: 70em; line-height: 1.4; } tr.high td:first-child { color: #b00; }
tr.medium td:first-child { color: #a60; } .run-folder { color: #777; font-size: 0.8em; }
p.empty-panel { color: #555; margin: 1.2em 0 1.2em 0.8em; }
details { margin: 1em 0; } summary { cursor: pointer; color: #444; }
"""


def run_panels(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> list[go.Figure]:
    """The panels of one run in report order (:data:`FIGURES`, skipping those that do
    not apply to it): drawn figures and the one-line :func:`~reports.common.empty_panel`
    of those with nothing to show."""
    return [fig for make in FIGURES if (fig := make(result, options)) is not None]


def run_figures(result: RunResult, options: ReportOptions = DEFAULT_OPTIONS) -> list[go.Figure]:
    """The figures of one run that draw something (:func:`run_panels` without its empty
    panels): one ``Plotly.newPlot`` each in the report."""
    return [fig for fig in run_panels(result, options) if empty_reason(fig) is None]


def figure_values(fig: go.Figure) -> int:
    """The plotted values ``fig`` holds: every element of its traces' ``x``, ``y``, ``z``,
    ``customdata`` and ``text`` arrays (what its size in the page grows with)."""
    total = 0
    for trace in fig.data:
        for key in ("x", "y", "z", "customdata", "text"):
            value = getattr(trace, key, None)
            if value is not None and not isinstance(value, str):
                total += int(np.asarray(value, dtype=object).size)
    return total


def run_titles(runs: Sequence[tuple[str, RunResult]]) -> list[str]:
    """Each run's title: its scenario's name, or its folder's name where the summary has
    none or several runs share one."""
    scenarios = [r.summary.scenario for _, r in runs]
    return [
        s if s and scenarios.count(s) == 1 else name
        for s, (name, _) in zip(scenarios, runs, strict=True)
    ]


def build_report(
    runs: Sequence[tuple[str, RunResult]],
    title: str | None = None,
    options: ReportOptions = DEFAULT_OPTIONS,
    beside: pd.DataFrame | None = None,
) -> str:
    """The HTML of a report over ``runs`` (name, result), in the order given. Its first
    paragraph names the fix that pays: for several runs, from their comparison (first
    run the baseline); for one, from ``beside`` (the ``compare.csv`` of a comparison
    the run belongs to, :func:`compare_beside`) where given, else the command that
    finds it (:func:`~reports.answer.find_out_sentence`)."""
    if not runs:
        raise ValueError("a report needs at least one run")
    counter = iter(range(1_000_000))
    parts: list[str] = []
    names = [name for name, _ in runs]
    summaries = [r.summary for _, r in runs]
    next_step: str | None = None
    ranks: dict[str, int] = {}
    if len(runs) == 1:
        next_step = fix_sentence(beside) if beside is not None else None
        if next_step is not None:
            next_step = next_step.removesuffix(".") + ", in the compare.csv beside this run."
        else:
            next_step = find_out_sentence(runs[0][1], runs[0][0])
    if len(runs) > 1:
        parts.append("<h2>comparison</h2>")
        frame = comparison_frame(summaries, names)
        ranks = {str(r): int(k) for r, k in zip(frame["run"], frame["rank"], strict=True)}
        fix = fix_sentence(frame)
        if fix is not None:
            parts.append(f'<p class="verdict fix">{esc(fix)}</p>')
        parts.append(comparison_table(summaries, names))
        parts.append(figure_html(comparison_bars(summaries, names), next(counter)))
        for name, result in runs:
            parts.append(f"<h3>{esc(name)}: alerts</h3>{_alerts_html(result.summary)}")
    titles = run_titles(runs)
    for run_title, (name, result) in zip(titles, runs, strict=True):
        folder = f' <span class="run-folder">(run {esc(name)})</span>' if name != run_title else ""
        if name in ranks:  # the comparison's rank, as its table and verdicts give it
            folder += f' <span class="run-folder">rank {ranks[name]} of {len(ranks)}</span>'
        parts.append(f"<h2>{esc(run_title)}{folder}</h2>")
        parts.append(answer_html(result, next_step))
        parts.extend(figure_html(fig, next(counter)) for fig in run_panels(result, options))
        parts.append(
            "<details><summary>every number of the summary</summary>"
            f"{_summary_table(result.summary)}{_alerts_html(result.summary)}</details>"
        )
    heading = title or (titles[0] if len(runs) == 1 else "fragsim report: " + ", ".join(titles))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(heading)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>'
        f"<h1>{esc(heading)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def figure_html(fig: go.Figure, number: int) -> str:
    """``fig`` as a ``<div>`` with its own ``Plotly.newPlot`` call (plotly.js not
    included: the page's head holds it once), its id ``figure-NUMBER``; an
    :func:`~reports.common.empty_panel` is one line of text, its title and why it is
    empty, instead of a blank plot."""
    reason = empty_reason(fig)
    if reason is not None:
        title = fig.layout.title.text or ""  # already escaped by base_layout
        return f'<p class="empty-panel" id="figure-{number}"><b>{title}</b>: {esc(reason)}</p>'
    note = figure_note(fig)
    if note is not None:  # written below the figure, not into its JSON
        fig = go.Figure(fig).update_layout(meta=None)
    height = fig.layout.height or 450
    div = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"figure-{number}",
        default_height=f"{height}px",
        config={"displaylogo": False, "responsive": True},
    )
    return f'<div class="figure">{div}{note or ""}</div>'


def _f(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def summary_rows(summary: Summary) -> list[tuple[str, str]]:
    """The headline numbers of a run, (label, value) as ``fragsim run`` prints them."""
    req, fails, mem = summary.requests, summary.failures, summary.memory
    rows = [("scenario", summary.scenario), ("allocator", summary.allocator)]
    rows.append(("requests", f"{req.total:,}"))
    rows += [(f"  {status}", f"{n:,}") for status, n in req.by_status.items()]
    rows.append(("allocation failures", f"{fails.allocation_failures:,}"))
    rows += [(f"  {cause}", f"{n:,}") for cause, n in fails.by_cause.items()]
    rows.append(("  of which at > 25 % free (any cause)", f"{fails.at_high_free_memory:,}"))
    rows.append(("preemptions / restarts", f"{fails.preemptions:,} / {fails.restarts:,}"))
    ratio = mem.largest_contiguous_free_block_ratio
    rows.append(("largest / free ratio min / mean", f"{_f(ratio.min)} / {_f(ratio.mean)}"))
    for name, share in mem.waste_breakdown.items():
        rows.append((f"waste: {WASTE_LABELS.get(name, name)}", _f(share, ".1%")))
    latency = summary.latency_s
    for name, p in (("ttft", latency.ttft), ("tpot", latency.tpot), ("e2e", latency.e2e)):
        rows.append((f"{name} p50 / p99 (s)", f"{_f(p.p50)} / {_f(p.p99)}"))
    rows.append(("output tokens/s", f"{summary.throughput.output_tokens_per_s:.1f}"))
    if summary.offload is not None:
        rows += [
            (label, f"{v:,}" if isinstance(v, int) else str(v))
            for label, v in offload_rows(summary.offload)
        ]
    fleet = summary.fleet
    if fleet is not None:
        r = fleet.replicas
        rows.append(("replicas initial / mean / peak", f"{r.initial} / {r.mean:.2f} / {r.peak}"))
        rows.append(
            (
                "replica-hours / avoidable",
                f"{fleet.replica_hours:,.1f} / {fleet.avoidable_replica_hours:,.1f}",
            )
        )
        rows.append(
            ("cost $ / avoidable $", f"{fleet.cost_usd:,.2f} / {fleet.avoidable_cost_usd:,.2f}")
        )
        rows.append(("$ per 1M output tokens", _f(fleet.cost_per_million_output_tokens_usd, ".2f")))
        rows.append(("scale-ups / scale-downs", f"{fleet.scale_ups:,} / {fleet.scale_downs:,}"))
        restarts = ", ".join(f"{k} {v:,}" for k, v in fleet.restarts.items()) or "none"
        rows.append(("restarts by cause / crashes", f"{restarts} / {fleet.crashes:,}"))
        if fleet.disagg is not None:
            rows += disagg_rows(fleet.disagg)
    return rows


def disagg_rows(disagg: Disagg) -> list[tuple[str, str]]:
    """A disaggregated fleet's transfers, refusals and each role's memory."""
    t = disagg.transfers
    rows = [
        ("KV transfers started / landed", f"{t.started:,} / {t.landed:,}"),
        ("  KV bytes sent (GB)", f"{t.kv_bytes / 1e9:,.1f}"),
        ("  transfer mean / p99 (s)", f"{_f(t.mean_s)} / {_f(t.p99_s)}"),
        ("hand-offs refused", f"{sum(disagg.refusals.values()):,}"),
    ]
    rows += [(f"  {cause}", f"{n:,}") for cause, n in disagg.refusals.items()]
    rows += [(f"  fate {fate}", f"{n:,}") for fate, n in disagg.fates.items()]
    for role, mem in (("prefill", disagg.prefill), ("decode", disagg.decode)):
        ratio = mem.largest_contiguous_free_block_ratio
        rows.append((f"{role} replicas", ", ".join(map(str, mem.replicas))))
        rows.append(("  KV used share (mean)", _f(mem.mean_used_share, ".1%")))
        rows.append(("  largest / free ratio min / mean", f"{_f(ratio.min)} / {_f(ratio.mean)}"))
        rows.append(("  allocation failures", f"{mem.allocation_failures:,}"))
        fired = ", ".join(f"{a} {n:,}" for a, n in mem.alerts_fired.items()) or "none"
        rows.append(("  alerts fired", fired))
    return rows


def _summary_table(summary: Summary) -> str:
    rows = []
    for label, value in summary_rows(summary):
        cls = ' class="sub"' if label.startswith(" ") else ""
        rows.append(f"<tr><td{cls}>{esc(label.strip())}</td><td>{esc(value)}</td></tr>")
    body = "".join(rows)
    return f'<table class="summary">{body}</table>'


def _alerts_html(summary: Summary) -> str:
    items = [
        f'<li class="{esc(a.severity)}">{esc(line)}</li>'
        for a, line in zip(summary.alerts, alert_lines(summary), strict=True)
    ]
    if not items:
        return '<p class="alerts">no alerts</p>'
    return f'<ul class="alerts">{"".join(items)}</ul>'


def read_runs(
    run_dirs: Sequence[str | Path], names: Sequence[str] | None = None
) -> list[tuple[str, RunResult]]:
    """Each run directory read by the one reader of a run folder (``read_result``),
    named by ``names`` (default: :func:`run_names`); :class:`ReportError` naming the file
    and what is wrong."""
    if names is None:
        names = run_names(run_dirs)
    if len(names) != len(run_dirs):
        raise ValueError(f"{len(names)} names for {len(run_dirs)} runs")
    try:
        return [(name, read_result(d)) for name, d in zip(names, run_dirs, strict=True)]
    except RunFolderError as e:
        raise ReportError(str(e)) from None


def run_names(run_dirs: Sequence[str | Path]) -> list[str]:
    """Each run's folder name; where runs share one, with as many of its parent folders as
    tell it from the others (``a/run``, ``b/run``); the same folder given again gets
    `` (2)``, `` (3)``..."""
    paths = [Path(d).resolve() for d in run_dirs]

    def tail(path: Path, depth: int) -> str:
        return "/".join(path.parts[-depth:]) if path.name else str(path)

    names = []
    for path in paths:
        others = {p for p in paths if p != path}
        depth = 1
        while depth < len(path.parts) and tail(path, depth) in {tail(p, depth) for p in others}:
            depth += 1
        names.append(tail(path, depth))
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[i] = f"{name} ({seen[name]})"
    return names


class ReportError(Exception):
    """A run directory that cannot be reported on (missing, or not a run)."""


def check_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a Path when it holds a run (``sim.results.io.FILES``); else
    :class:`ReportError` naming it and what is wrong."""
    try:
        return check_run_folder(run_dir)
    except RunFolderError as e:
        raise ReportError(str(e)) from None


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    options: ReportOptions = DEFAULT_OPTIONS,
    names: Sequence[str] | None = None,
) -> Path:
    """Read the runs in ``run_dirs`` and write their report to ``out`` atomically (a
    temporary beside it, moved into place when complete); ``names``: the runs' names
    (default: :func:`run_names`). Raises :class:`ReportError` for a directory that is
    not a run, ``traces.TraceError`` when ``out`` cannot be written."""
    folders = [check_run_dir(d) for d in run_dirs]
    runs = read_runs(folders, names)
    beside = compare_beside(folders[0]) if len(folders) == 1 else None
    return write_html(build_report(runs, options=options, beside=beside), out)


def compare_beside(run_dir: str | Path) -> pd.DataFrame | None:
    """The comparison ``run_dir`` is part of: the ``compare.csv`` in its parent folder
    (``fragsim compare -o OUT`` writes ``OUT/NAME/`` beside ``OUT/compare.csv``;
    ``fragsim postmortem`` its ``replay/``), or in its grandparent for a folder under
    ``counterfactuals/``, when that file lists the run by its folder's name and has
    :data:`~reports.answer.COMPARE_COLUMNS`; else None (unreadable included: a report
    does not fail over a file it only borrows a sentence from)."""
    folder = Path(run_dir).resolve()
    parent = folder.parent.parent if folder.parent.name == "counterfactuals" else folder.parent
    path = parent / "compare.csv"
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError):
        return None
    if not set(COMPARE_COLUMNS) <= set(frame.columns):
        return None
    if folder.name not in set(frame["run"].astype(str)):
        return None
    return frame


def write_html(text: str, out: str | Path) -> Path:
    """Write ``text`` to ``out`` atomically (``traces.atomic.atomic_path``)."""
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(out)
