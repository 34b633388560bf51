"""``fragsim postmortem LOG_DIR -o OUT/``: replay a production log (requests and node
events) on the simulated fleet with the recorded routing and node events, report which
recorded failures the replay reproduces (precision and recall: the rule is
:mod:`sim.fleet.matching`'s), then run counterfactual policies on the same traffic
(:mod:`sim.fleet.postmortem` says how each run is built).

Writes, under OUT/: ``replay/`` (the replay's run directory), ``counterfactuals/NAME/``
(one run directory each), ``match.csv`` (one row per recorded failure, then one per
unmatched simulated failure, with times), ``postmortem.json`` (rule, tolerance, counts,
precision, recall, the recorded router's fallbacks, the scripted node actions, the log's
nodes and node events), ``compare.csv`` (the replay and the counterfactuals, one row
each), ``replicas.csv`` (the replay's fleet ids and the log's names) and ``report.html``
(:mod:`reports.postmortem`; not with ``--no-report``). Nodes carry the log's names
everywhere a user reads them (tables, report, a ``replica_name`` column beside every
``replica`` id in the run folders). Everything is simulated before anything is written;
each piece is written atomically.

Prints (``--format``, :mod:`sim.cli.output`): the match, failures per node and the
replay against the counterfactuals, runs as rows; then the output path (on stderr for
csv/json/markdown, so stdout stays one document; also with ``--quiet``). Module-level
imports stay light: the simulator, pandas and plotly are imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from sim.cli.output import Cell, FormatOption, TableData, print_tables

if TYPE_CHECKING:
    import pandas as pd

    from sim.fleet.matching import MatchReport
    from sim.fleet.postmortem import Replay
    from sim.scenario.schema import Scenario

DEFAULT_BASE = "seed-postmortem"
DEFAULT_COUNTERFACTUALS = (
    "seed-postmortem-frag-restart",
    "seed-postmortem-paged",
    "seed-postmortem-length-routing",
    "seed-postmortem-frag-routing",
    "seed-postmortem-runbook",
)
TERMINAL_NODES = 20
"""Nodes the ``table`` format lists in "failures per node" (most failures first)."""


def _load(name: str) -> Scenario:
    from sim.cli.run import fail
    from sim.scenario.schema import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as e:
        raise fail(str(e)) from None


def postmortem_command(
    log_dir: Annotated[
        Path,
        typer.Argument(
            help="Folder with requests.csv|parquet and nodes.csv|parquet, or OTLP JSON "
            "spans: a *.json/*.jsonl file or a folder of them (docs/postmortem.md)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    scenario: Annotated[
        str, typer.Option("--scenario", help="BASE scenario: the stack's model (file or built-in).")
    ] = DEFAULT_BASE,
    counterfactual: Annotated[
        list[str] | None,
        typer.Option(
            "--counterfactual",
            help="A counterfactual scenario (file or built-in); repeat for several. "
            "Default: the seed-postmortem-* set.",
        ),
    ] = None,
    no_counterfactuals: Annotated[
        bool, typer.Option("--no-counterfactuals", help="Replay and match only.")
    ] = False,
    rule: Annotated[
        Literal["by_request", "by_window"], typer.Option(help="How failures are matched.")
    ] = "by_request",
    tolerance_s: Annotated[
        float, typer.Option("--tolerance-s", min=0, max=86400, help="by_window: ± seconds.")
    ] = 30.0,
    no_report: Annotated[bool, typer.Option("--no-report", help="No OUT/report.html.")] = False,
    fmt: FormatOption = "table",
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the output path.")
    ] = False,
) -> None:
    """Replay LOG_DIR's traffic and node events, match its failures, run counterfactuals."""
    from sim.cli.compare import unique_names
    from sim.cli.run import check_output_dir, fail
    from sim.fleet.otlp_log import is_otlp_log, load_otlp_log
    from sim.fleet.postmortem import postmortem_record
    from sim.fleet.postmortem_log import LogError, load_postmortem_log
    from sim.scenario.schema import ScenarioError

    if no_counterfactuals and counterfactual:
        raise fail("--no-counterfactuals and --counterfactual: choose one")
    try:
        log = load_otlp_log(log_dir) if is_otlp_log(log_dir) else load_postmortem_log(log_dir)
    except LogError as e:
        raise fail(str(e)) from None
    base = _load(scenario)
    chosen = [] if no_counterfactuals else (counterfactual or list(DEFAULT_COUNTERFACTUALS))
    cfs = [_load(name) for name in chosen]
    names = unique_names([cf.name for cf in cfs])
    check_output_dir(out / "replay")
    for name in names:
        check_output_dir(out / "counterfactuals" / name)
    try:
        done, runs = _simulate(base, cfs, names, log, rule, tolerance_s, quiet)
    except ScenarioError as e:
        raise fail(str(e)) from None
    record = postmortem_record(
        done, log, names, log_name=log_dir.resolve().name, scenario=base.name
    )
    frame = _write_all(out, done, runs, names, record, report=not no_report)
    if not quiet:
        print_tables(_tables(done, frame, fmt), fmt)
    files = "replay/, " + ("counterfactuals/, " if names else "")
    files += "match.csv, compare.csv, replicas.csv, postmortem.json"
    files += "" if no_report else ", report.html"
    typer.echo(f"wrote {out}/ ({files})", err=fmt != "table")


def _simulate(
    base: Scenario,
    cfs: list[Scenario],
    names: list[str],
    log: Any,
    rule: Any,
    tolerance_s: float,
    quiet: bool,
) -> tuple[Replay, list[Any]]:
    """The replay, then each counterfactual, with progress on stderr in simulated time
    over all runs (:mod:`sim.cli.progress`)."""
    from sim.cli.progress import progress, sim_time_amounts
    from sim.fleet.postmortem import replay, run_counterfactual

    span_s = max(1.0, float(log.requests["arrival_s"].max()))
    runs: list[Any] = []
    label = f"postmortem ({1 + len(cfs)} runs)"
    total_s = span_s * (1 + len(cfs))
    with progress(
        label, total_s, what="simulated time", amounts=sim_time_amounts, quiet=quiet
    ) as p:

        def at(k: int, name: str) -> Any:
            note = f"{name} ({k + 1} of {1 + len(cfs)})"
            p.update(k * span_s, note=note)
            return lambda now_s, end_s: p.update(k * span_s + min(now_s, span_s))

        done = replay(base, log, rule=rule, tolerance_s=tolerance_s, progress=at(0, "replay"))
        for k, (cf, name) in enumerate(zip(cfs, names, strict=True), start=1):
            runs.append(run_counterfactual(cf, log, progress=at(k, name)))
        p.update(total_s)
    return done, runs


def _write_all(
    out: Path,
    done: Replay,
    runs: list[Any],
    names: list[str],
    record: dict[str, Any],
    *,
    report: bool,
) -> pd.DataFrame:
    """Write every output (module docstring); returns the compare frame."""
    import json

    from sim.cli.report import write_postmortem_report_of
    from sim.cli.run import fail
    from sim.fleet.compare import compare_frame
    from traces.errors import TraceError

    frame = compare_frame([done.result.summary, *(r.summary for r in runs)])
    frame.loc[1:, "scenario"] = names  # the folder names (repeats get -2, -3, ...)
    try:
        done.result.write(out / "replay")
        for name, result in zip(names, runs, strict=True):
            result.write(out / "counterfactuals" / name)
        _write(out / "match.csv", lambda p: done.match.table.to_csv(p, index=False))
        _write(out / "compare.csv", lambda p: frame.to_csv(p, index=False))
        _write(out / "replicas.csv", lambda p: done.replicas.to_csv(p, index=False))
        from sim.results.io import undefined_as_null  # undefined statistics: null

        text = json.dumps(undefined_as_null(record), indent=2, allow_nan=False) + "\n"
        _write(out / "postmortem.json", lambda p: p.write_text(text))
    except (TraceError, FileExistsError) as e:
        raise fail(str(e)) from None
    if report:
        write_postmortem_report_of(out, out / "report.html")
    return frame


def _write(path: Path, write: Any) -> None:
    from traces.writers import atomic_path

    with atomic_path(path) as tmp:
        write(tmp)


def _score(value: float | None) -> Cell:
    return Cell(value, "—" if value is None else f"{value:.2f}")


def _tables(done: Replay, frame: pd.DataFrame, fmt: str) -> list[TableData]:
    tables = [_match_table(done.match, done.router), _node_table(done.match, fmt)]
    if len(frame) > 1:
        from sim.fleet.compare import with_deltas

        ranked = with_deltas(frame, [str(s) for s in frame["scenario"]], baseline=0)
        tables += [_runs_table(ranked), _verdict_table(ranked)]
    return tables


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
    from sim.fleet.matching import failures_by_replica

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
    import math

    from sim.fleet.compare import usd

    if math.isnan(value):
        return Cell(None, "—")
    return Cell(value, ("−" if value < 0 else "") + usd(abs(value)).lstrip("$"))


def _runs_table(ranked: pd.DataFrame) -> TableData:
    """The replay (the baseline, first) and the counterfactuals, best first."""
    columns = ["run", "failed", "alloc fails", "restarts", "replica-h", "cost $", "saved $"]
    columns += ["TTFT p99 s", "e2e p99 s"]
    rows: list[list[object]] = []
    for i, r in enumerate(ranked.to_dict("records")):
        rows.append(
            [
                r["run"],
                int(r["failed_requests"]),
                int(r["allocation_failures"]),
                int(r["restarts"]),
                Cell(float(r["replica_hours"]), f"{r['replica_hours']:,.1f}"),
                _money(float(r["cost_usd"])),
                Cell(None, "—") if i == 0 else _money(float(r["cost_saved_usd"])),
                Cell(float(r["ttft_p99_s"]), f"{r['ttft_p99_s']:.3f}"),
                Cell(float(r["e2e_p99_s"]), f"{r['e2e_p99_s']:.3f}"),
            ]
        )
    return TableData("replay (baseline) and counterfactuals", columns, rows)


def _verdict_table(ranked: pd.DataFrame) -> TableData:
    """Every run by rank (most saved first) with its verdict against the replay."""
    rows: list[list[object]] = []
    for r in ranked.sort_values("rank", kind="stable").to_dict("records"):
        verdict = r["verdict"]
        text = "the replay: what the log's fleet did" if verdict == "baseline" else verdict
        rows.append([int(r["rank"]), r["run"], text])
    return TableData("which fix pays (against the replay)", ["rank", "run", "verdict"], rows)
