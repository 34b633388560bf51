"""The body of ``fragsim postmortem`` (its front, ``sim.cli.postmortem``, states the
contract): load the log and the scenarios, replay, run the baseline and the
counterfactuals with progress, write OUT whole (staged, then swapped in) and print the
tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import pandas as pd
import typer

from sim.cli import interrupt
from sim.cli.bodies.run_folder import check_output_dir
from sim.cli.common import fail
from sim.cli.compare import unique_names
from sim.cli.output import Cell, TableData, print_tables
from sim.cli.postmortem import DEFAULT_COUNTERFACTUALS
from sim.cli.progress import progress, sim_time_amounts
from sim.errors import clip
from sim.postmortem.baseline import BASELINE, REPLAY, Change, change_text, ranked
from sim.postmortem.log import LogError, PostmortemLog, load_postmortem_log
from sim.postmortem.matching import MatchReport, Rule, failures_by_replica
from sim.postmortem.otlp_log import is_otlp_log, load_otlp_log
from sim.postmortem.record import PostmortemRecord, postmortem_record
from sim.postmortem.replay import (
    Progress,
    Replay,
    changes_against,
    match_run,
    replay,
    run_counterfactual,
)
from sim.results.compare import compare_frame, usd
from sim.results.io import RunResult, check_owned_folder, undefined_as_null
from sim.scenario.schema import Scenario, ScenarioError, load_scenario
from traces.atomic import staged
from traces.errors import TraceError

TERMINAL_NODES = 20
"""Nodes the ``table`` format lists in "failures per node" (most failures first)."""


def _load(name: str) -> Scenario:
    try:
        return load_scenario(name)
    except ScenarioError as e:
        raise fail(str(e)) from None


def postmortem(
    *,
    log_dir: Path,
    out: Path,
    scenario: str,
    counterfactual: list[str] | None,
    no_counterfactuals: bool,
    rule: Literal["by_request", "by_window"],
    tolerance_s: float,
    no_report: bool,
    fmt: str,
    quiet: bool,
) -> None:
    """The work of ``sim.cli.postmortem.postmortem_command``, on the options it parsed."""
    try:
        log = load_otlp_log(log_dir) if is_otlp_log(log_dir) else load_postmortem_log(log_dir)
    except LogError as e:
        raise fail(str(e)) from None
    base = _load(scenario)
    chosen = [] if no_counterfactuals else (counterfactual or list(DEFAULT_COUNTERFACTUALS))
    cfs = [_load(name) for name in chosen]
    names = unique_names([REPLAY, BASELINE, *(cf.name for cf in cfs)])[2:]
    _check_out(out)
    try:
        changes = {n: changes_against(base, cf, log) for n, cf in zip(names, cfs, strict=True)}
        done, runs = _simulate(base, cfs, names, log, rule, tolerance_s, quiet)
    except ScenarioError as e:
        raise fail(str(e)) from None
    base_match = None if not runs else match_run(log, runs[0], rule=rule, tolerance_s=tolerance_s)
    base_summary = None if not runs else runs[0].summary
    record = postmortem_record(
        done,
        log,
        names,
        log_name=log_dir.resolve().name,
        scenario=base.name,
        baseline=base_match,
        baseline_summary=base_summary,
        changes={n: [c.text for c in cs] for n, cs in changes.items()},
    )
    frame = _write_all(out, done, runs, names, changes, record, report=not no_report)
    for name, cs in changes.items():
        if len(cs) > 1:
            typer.echo(
                f"note: counterfactual {name} changes {len(cs)} things against the modelled "
                f"baseline ({'; '.join(c.text for c in cs)}): its saving is not one policy's",
                err=True,
            )
    if not quiet:
        print_tables(_tables(done, frame, record), fmt)
    files = "replay/, " + ("baseline/, counterfactuals/, " if names else "")
    files += "match.csv, compare.csv, replicas.csv, postmortem.json"
    files += "" if no_report else ", report.html"
    typer.echo(f"wrote {out}/ ({files})", err=True)


def _simulate(
    base: Scenario,
    cfs: list[Scenario],
    names: list[str],
    log: PostmortemLog,
    rule: Rule,
    tolerance_s: float,
    quiet: bool,
) -> tuple[Replay, list[RunResult]]:
    """The replay, then (with counterfactuals) the modelled baseline and each
    counterfactual, with progress on stderr in simulated time over all runs
    (:mod:`sim.cli.progress`). The runs after the replay: the baseline first."""
    span_s = max(1.0, float(log.requests["arrival_s"].max()))
    runs: list[RunResult] = []
    todo = [(base, "baseline"), *zip(cfs, names, strict=True)] if cfs else []
    label = f"postmortem ({1 + len(todo)} runs)"
    total_s = span_s * (1 + len(todo))
    with progress(
        label, total_s, what="simulated time", amounts=sim_time_amounts, quiet=quiet
    ) as p:

        def at(k: int, name: str) -> Progress:
            note = f"{name} ({k + 1} of {1 + len(todo)})"
            p.update(k * span_s, note=note)
            return lambda now_s, end_s: p.update(k * span_s + min(now_s, span_s))

        done = replay(base, log, rule=rule, tolerance_s=tolerance_s, progress=at(0, "replay"))
        for k, (cf, name) in enumerate(todo, start=1):
            runs.append(run_counterfactual(cf, log, progress=at(k, name)))
        p.update(total_s)
    return done, runs


def _write_all(
    out: Path,
    done: Replay,
    runs: list[RunResult],
    names: list[str],
    changes: dict[str, list[Change]],
    record: PostmortemRecord,
    *,
    report: bool,
) -> pd.DataFrame:
    """Write every output (module docstring); returns the ranked compare frame
    (:func:`sim.postmortem.baseline.ranked`)."""
    frame = compare_frame([done.result.summary, *(r.summary for r in runs)])
    frame["scenario"] = [REPLAY, *([BASELINE] if runs else []), *names]  # the folder names
    frame["role"] = [REPLAY, *([BASELINE] if runs else []), *(["counterfactual"] * len(names))]
    frame["change"] = ["", *([""] if runs else []), *(change_text(changes[n]) for n in names)]
    frame["rank"] = math.nan
    if runs:
        table = ranked(frame).set_index("run")
        frame["rank"] = [table.loc[n, "rank"] for n in frame["scenario"]]
        frame["verdict"] = [table.loc[n, "verdict"] for n in frame["scenario"]]

    text = json.dumps(undefined_as_null(record), indent=2, allow_nan=False) + "\n"
    stage = out  # errors name OUT, never the hidden folder it is staged in
    try:
        with staged() as outputs:  # all of OUT, swapped in whole, or nothing
            stage = outputs.folder(out, check_postmortem_dir)
            done.result.write(stage / "replay")
            if runs:
                runs[0].write(stage / BASELINE)
            for name, result in zip(names, runs[1:], strict=True):
                result.write(stage / "counterfactuals" / name)
            done.match.table.to_csv(stage / "match.csv", index=False)
            frame.to_csv(stage / "compare.csv", index=False)
            done.replicas.to_csv(stage / "replicas.csv", index=False)
            (stage / "postmortem.json").write_text(text)
            if report:
                from reports.html import ReportError
                from reports.postmortem import write_postmortem_report

                try:
                    write_postmortem_report(stage, stage / "report.html")
                except ReportError as e:
                    raise fail(clip(str(e).replace(str(stage), str(out)))) from None
            outputs.commit(on_commit=lambda: interrupt.note_written(str(out)))
    except (TraceError, FileExistsError) as e:
        raise fail(str(e).replace(str(stage), str(out))) from None
    except OSError as e:
        raise fail(f"{out}: cannot write results: {e.strerror or e}") from None
    return frame


POSTMORTEM_FILES = frozenset(
    {"match.csv", "compare.csv", "replicas.csv", "postmortem.json", "report.html"}
)
"""What a postmortem folder holds besides its run folders."""


def check_postmortem_dir(out: Path) -> None:
    """Raise (FileExistsError) unless ``out`` is absent, empty, or an earlier
    postmortem's folder (``postmortem.json``, :data:`POSTMORTEM_FILES`, ``replay/``,
    ``baseline/`` and ``counterfactuals/NAME/`` holding only a run's files): it is
    replaced whole, so nothing fragsim did not write there is ever lost."""
    check_owned_folder(
        out,
        "postmortem",
        files=POSTMORTEM_FILES,
        marker=frozenset({"postmortem.json"}),
        run_dirs=frozenset({"replay", "baseline"}),
        nested=frozenset({"counterfactuals"}),
    )


def _check_out(out: Path) -> None:
    """Fail before simulating when ``out`` may not become (or be replaced by) a
    postmortem folder."""
    try:
        check_postmortem_dir(out)
    except FileExistsError as e:
        raise fail(str(e)) from None
    check_output_dir(out / "replay")  # the folder's parents and file system accept it


def _score(value: float | None) -> Cell:
    return Cell(value, "—" if value is None else f"{value:.2f}")


def _tables(done: Replay, frame: pd.DataFrame, record: PostmortemRecord) -> list[TableData]:
    tables = [_match_table(done.match, done.router), _node_table(done.match, fmt="table")]
    if len(frame) > 1:
        table = ranked(frame)
        tables += [_agreement_table(record), _runs_table(table), _verdict_table(table)]
    return tables


def _agreement_table(record: PostmortemRecord) -> TableData:
    """How the modelled baseline models the log, beside the replay (``agreement`` of
    ``postmortem.json``)."""
    rows = [
        [r["measure"], *(_value(v, r["measure"]) for v in (r["log"], r["replay"], r["baseline"]))]
        for r in record["agreement"]
    ]
    return TableData(
        "the modelled baseline against the log and the replay",
        ["measure", "log", "replay", "modelled baseline"],
        rows,
    )


def _value(value: float | None, measure: str) -> Cell:
    if value is None:
        return Cell(None, "—")
    return Cell(value, f"{value:.2f}" if measure in ("precision", "recall") else f"{value:,.0f}")


def _match_table(m: MatchReport, router: dict[str, int]) -> TableData:
    rule = m.rule + (f" (±{m.tolerance_s:g} s)" if m.tolerance_s is not None else "")
    rows: list[list[object]] = [
        ["rule", rule],
        ["recorded failures", m.recorded_failures],
        ["replayed failures", m.simulated_failures],
        ["reproduced", m.matched],
        ["precision (reproduced / replayed)", _score(m.precision)],
        ["recall (reproduced / recorded)", _score(m.recall)],
        ["requests on their recorded node", router["recorded"]],
        ["router fallbacks (recorded node not up)", router["fallbacks"]],
    ]
    return TableData("match", ["measure", "value"], rows)


def _node_table(m: MatchReport, fmt: str) -> TableData:
    per = failures_by_replica(m.table)
    columns = ["node", "recorded", "replayed", "reproduced", "missed", "extra"]
    rows = [
        [r.replica, r.recorded, r.simulated, r.reproduced, r.missed, r.extra]
        for r in per.itertuples(index=False)
    ]
    title = "failures per node"
    if fmt in ("table", "markdown") and len(rows) > TERMINAL_NODES:
        title += f" ({TERMINAL_NODES} of {len(rows)} with failures; all in match.csv)"
        rows = rows[:TERMINAL_NODES]
    return TableData(title, columns, rows)


def _money(value: float) -> Cell:
    """Dollars without the sign (the column says $), a true minus sign on a negative
    amount; — when missing."""
    if math.isnan(value):
        return Cell(None, "—")
    return Cell(value, ("−" if value < 0 else "") + usd(abs(value)).lstrip("$"))


def _rank(value: float) -> Cell:
    """A run's rank; — for the replay (not ranked)."""
    return Cell(None, "—") if math.isnan(value) else Cell(int(value), str(int(value)))


def _runs_table(ranked: pd.DataFrame) -> TableData:
    """The replay, the modelled baseline and the counterfactuals by rank
    (:func:`sim.postmortem.baseline.ranked`)."""
    columns = ["rank", "run", "failed", "alloc fails", "restarts", "replica-h", "cost $"]
    columns += ["saved $", "TTFT p99 s", "e2e p99 s"]
    rows: list[list[object]] = []
    for r in ranked.to_dict("records"):
        rows.append(
            [
                _rank(float(r["rank"])),
                r["run"],
                int(r["failed_requests"]),
                int(r["allocation_failures"]),
                int(r["restarts"]),
                Cell(float(r["replica_hours"]), f"{r['replica_hours']:,.1f}"),
                _money(float(r["cost_usd"])),
                Cell(None, "—")
                if r["role"] != "counterfactual"
                else _money(float(r["cost_saved_usd"])),
                Cell(float(r["ttft_p99_s"]), f"{r['ttft_p99_s']:.3f}"),
                Cell(float(r["e2e_p99_s"]), f"{r['e2e_p99_s']:.3f}"),
            ]
        )
    return TableData("replay, modelled baseline and counterfactuals", columns, rows)


def _verdict_table(ranked: pd.DataFrame) -> TableData:
    """Every run in display order with its rank and its verdict against the modelled
    baseline."""
    rows: list[list[object]] = [
        [_rank(float(r["rank"])), r["run"], r["verdict"]] for r in ranked.to_dict("records")
    ]
    return TableData(
        "which fix pays (each change against the modelled baseline)",
        ["rank", "run", "verdict"],
        rows,
    )
