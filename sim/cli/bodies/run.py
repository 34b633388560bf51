"""The body of ``fragsim run`` (its front: ``sim.cli.run``), and the pieces other
commands' bodies share: :func:`prepare` (everything that can refuse a scenario, before
simulating), :func:`simulate` (with progress), :func:`write_results`,
:func:`print_summary`.

What goes where: stdout carries the answer (the summary table, in ``--format``);
stderr carries progress (``sim.cli.progress``), warnings, errors and where the results
went (``wrote OUT/ (...)``, ``report: OUT/report.html``) -- printed also with
``--quiet``, so ``-f csv > file`` stays clean and the output path is always shown.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import pandas as pd
import typer

from sim.cli import interrupt
from sim.cli.bodies.run_folder import check_output_dir
from sim.cli.bodies.trace import show_trace_warnings
from sim.cli.common import check_scenario_exists, err, fail, say_written
from sim.cli.output import Cell, echo_prose, number_cell, print_table
from sim.cli.progress import progress, sim_time_amounts
from sim.errors import clip, os_error_line
from sim.results.disagg_rows import disagg_rows
from sim.results.io import RunResult
from sim.results.labels import WASTE_LABELS
from sim.results.offload_rows import offload_rows
from sim.results.runfolder import read_result
from sim.results.summary import alert_lines
from sim.results.summary_model import Fleet as FleetSection
from sim.results.summary_model import Summary
from sim.runner import run as run_scenario
from sim.scenario.builtin import resolve_scenario
from sim.scenario.cost import check_run_cost
from sim.scenario.retention import warn_unused_retention
from sim.scenario.schema import Scenario, ScenarioError, ScenarioWarning, load_scenario
from sim.scenario.workload import load_workload
from sim.simulate.parts import Parts, run_parts
from traces import TraceError


def simulate(
    scenario: Scenario, requests: pd.DataFrame, *, quiet: bool, parts: list[Parts] | None = None
) -> RunResult:
    """Run, showing progress over simulated time on stderr (``sim.cli.progress``: a bar
    on a terminal, a line every 10 s elsewhere; nothing with ``quiet``). The total is
    the simulated time the run was given (its duration, else its last arrival) and
    never changes: past it, the run drains the requests still in flight (said in the
    line's note) and stays at 100 %. The run's scenario warnings are not repeated:
    :func:`prepare` printed them."""
    with (
        warnings.catch_warnings(),
        progress(
            f"run {scenario.name}",
            what="simulated time",
            amounts=sim_time_amounts,
            quiet=quiet,
            transient=True,
        ) as p,
    ):
        warnings.simplefilter("ignore", ScenarioWarning)

        def report(now_s: float, end_s: float) -> None:
            total = p.total or end_s  # the first one, kept
            draining = now_s > total  # past its last arrival, requests still in flight
            p.update(min(now_s, total), total, "draining requests in flight" if draining else "")

        result = run_scenario(scenario, requests, progress=report, parts=parts)
        p.update(p.total or p.done, note="")  # every request ended: the run is whole
        return result


SUMMARY_COLUMNS = ("metric", "value")


def summary_rows(summary: Summary) -> list[tuple[object, object]]:
    """The headline numbers of a run, one value per row (``metric``, ``value``). A row
    indented under another (``  fragmentation`` under ``allocation failures``) names
    its parent in ``csv`` and ``json``: ``allocation failures / fragmentation``
    (:func:`nested`)."""
    return nested(_flat_rows(summary))


def nested(rows: list[tuple[str, object]]) -> list[tuple[object, object]]:
    """``rows`` with each indented label a ``Cell`` whose value names the row above it
    that is not indented (``fleet: replicas initial`` names ``fleet``)."""
    out: list[tuple[object, object]] = []
    parent = ""
    for label, value in rows:
        if label.startswith(" "):
            out.append((Cell(f"{parent} / {label.strip()}", label), value))
        else:
            parent = label.split(":")[0] if ":" in label else label
            out.append((label, value))
    return out


def _flat_rows(summary: Summary) -> list[tuple[str, object]]:
    req, fails, mem = summary.requests, summary.failures, summary.memory
    rows: list[tuple[str, object]] = [("requests", req.total)]
    rows += [(f"  {status}", n) for status, n in req.by_status.items()]
    rows.append(("allocation failures", fails.allocation_failures))
    rows += [(f"  {cause}", n) for cause, n in fails.by_cause.items()]
    rows.append(("  of which at > 25 % free (any cause)", fails.at_high_free_memory))
    rows += [("preemptions", fails.preemptions), ("restarts", fails.restarts)]
    ratio = mem.largest_contiguous_free_block_ratio
    for stat, value in (("min", ratio.min), ("mean", ratio.mean)):
        rows.append((f"largest_contiguous_free_block_ratio {stat}", _num(value, ".3f")))
    for name, share in mem.waste_breakdown.items():
        rows.append((f"waste: {WASTE_LABELS.get(name, name)}", _num(share, ".1%")))
    for name, share in (mem.kv_manager_waste or {}).items():  # a KV manager's causes
        rows.append((f"  KV manager: {name.replace('_', ' ')}", _num(share, ".1%")))
    latency = summary.latency_s
    for name, p in (("ttft", latency.ttft), ("tpot", latency.tpot), ("e2e", latency.e2e)):
        rows += [(f"{name} {q} (s)", _num(v, ".3f")) for q, v in (("p50", p.p50), ("p99", p.p99))]
    rows.append(("output tokens/s", _num(summary.throughput.output_tokens_per_s, ",.1f")))
    cache = summary.prefix_cache
    if cache.cached_prompt_tokens:
        rows.append(("prefix cache: prompt tokens hit", _num(cache.share_of_prompt_tokens, ".1%")))
        rows.append(("prefix cache: requests with hits", cache.requests_with_hits))
    if summary.offload is not None:
        rows += offload_rows(summary.offload)
    if summary.fleet is not None:
        rows += _fleet_rows(summary.fleet)
        if summary.fleet.disagg is not None:
            rows += disagg_rows(summary.fleet.disagg, _num)
    return rows


def _fleet_rows(fleet: FleetSection) -> list[tuple[str, object]]:
    r = fleet.replicas
    rows: list[tuple[str, object]] = [
        ("fleet: replicas initial", r.initial),
        ("  replicas mean", _num(r.mean, ".2f")),
        ("  replicas peak", r.peak),
        ("  replica-hours", _num(fleet.replica_hours, ",.1f")),
        ("  avoidable replica-hours", _num(fleet.avoidable_replica_hours, ",.1f")),
        ("  cost ($)", _num(fleet.cost_usd, ",.2f")),
        ("  avoidable cost ($)", _num(fleet.avoidable_cost_usd, ",.2f")),
        ("  $ per 1M output tokens", _num(fleet.cost_per_million_output_tokens_usd, ".2f")),
        ("  scale-ups", fleet.scale_ups),
        ("  scale-downs", fleet.scale_downs),
    ]
    rows += [(f"  restarts: {cause}", n) for cause, n in fleet.restarts.items()]
    rows.append(("  crashes", fleet.crashes))
    return rows


def _num(value: float | None, spec: str) -> Cell:
    """A number shown with ``spec`` (``None`` and NaN as a dash), written as is
    (``sim.cli.output.number_cell``)."""
    return number_cell(value, spec)


def print_summary(summary: Summary, fmt: str = "table") -> None:
    """The headline numbers of a run as a table on stdout, then (``table`` and
    ``markdown``) its alerts, one line each."""
    title = f"{summary.scenario} — allocator {summary.allocator}"
    print_table(title, SUMMARY_COLUMNS, summary_rows(summary), fmt)
    if fmt in ("table", "markdown"):
        for line in alert_lines(summary):
            echo_prose(line, fmt=fmt)


def run(
    *,
    scenario_path: Path,
    out: Path,
    seed: int | None,
    mode: str | None,
    quiet: bool,
    fmt: str,
    json_out: bool,
    report: bool,
) -> None:
    """``fragsim run``, its options checked by the front: prepare, check OUT, simulate,
    write, then print the summary (or summary.json) and where the results went."""
    scenario, requests, parts, source = prepare(scenario_path, seed=seed, mode=mode)
    check_output_dir(out)
    try:
        result = simulate(scenario, requests, quiet=quiet, parts=parts)
    except ScenarioError as e:  # a cost bound met while simulating
        raise fail(str(e), source) from None
    warn_out_of_range(scenario, result, source)
    write_results(result, out, report=report)
    html = out / "report.html" if report else None
    if json_out:  # the file as written (with its tables' digests)
        typer.echo((out / "summary.json").read_text(encoding="utf-8"), nl=False)
    elif not quiet:
        print_summary(result.summary, fmt)
    say_written(out, result.files, html)


def report_into(out: Path) -> Callable[[Path], None]:
    """A writer of the report of a run being written to OUT, for ``RunResult.write``'s
    ``extras``: given the temporary folder, it writes ``report.html`` there, naming the
    run as OUT (the bytes ``fragsim report OUT`` writes), so the report is replaced
    with the run in one step. A report that cannot be written is one ``error:`` line."""

    def write(folder: Path) -> None:
        from reports.html import ReportError, build_report, write_html  # plotly

        try:
            write_html(
                build_report([(out.resolve().name, read_result(folder))]), folder / "report.html"
            )
        except (ReportError, TraceError, ValueError) as e:
            raise fail(f"{clip(str(out))}/report.html: {clip(str(e))}") from None

    return write


def warn_out_of_range(scenario: Scenario, result: RunResult, source: Path) -> None:
    """One ``warning:`` line naming the scenario and the calibration file when the run
    evaluated a calibrated latency model outside the range it was measured over."""
    calls = result.summary.latency.out_of_range_calls
    if not calls:
        return
    path = getattr(scenario.latency, "path", None)
    err.print(
        f"warning: {clip(str(source))}: field latency.path: {clip(str(path))}: the "
        f"calibrated latency model was evaluated outside its validity range {calls:,} "
        f"times (first at prefill_tokens, decode_seqs, kv_tokens = "
        f"{result.summary.latency.first_out_of_range}); its times there are extrapolated",
        markup=False,
        highlight=False,
    )


def write_results(result: RunResult, out: Path, *, report: bool = False) -> None:
    """Write a run to ``out`` (one ``error:`` line when the file system refuses), with
    ``report``: OUT/report.html in the same atomic replace (:func:`report_into`); once it
    is in place, an interrupt says so (``interrupted; results written to OUT``)."""
    try:
        result.write(
            out,
            on_commit=lambda: interrupt.note_written(clip(str(out))),
            extras=report_into(out) if report else None,
        )
    except OSError as e:
        raise fail(f"{clip(str(out))}: cannot write results: {e.strerror or e}") from None


def prepare(
    scenario_arg: Path, *, seed: int | None = None, mode: str | None = None
) -> tuple[Scenario, pd.DataFrame, list[Parts], Path]:
    """Load a scenario (a path or a built-in name), apply the command line's overrides,
    load its workload, build its parts and check what the run will cost -- everything
    that can refuse it, before anything is simulated. Returns the scenario file too (the
    ``source`` every error line names); a user error prints and raises ``typer.Exit(2)``.
    """
    source = resolve_scenario(scenario_arg)
    check_scenario_exists(source)

    try:
        with show_trace_warnings(), show_scenario_warnings(source):
            scenario = load_scenario(source)
            overrides: dict[str, object] = {}
            if seed is not None:
                overrides["seed"] = seed
            if mode is not None:
                overrides["mode"] = mode
            if overrides:
                scenario = scenario.model_copy(update=overrides)
            requests = load_workload(scenario)
            parts = run_parts(scenario, requests)
            check_run_cost(scenario, requests)
            warn_unused_retention(scenario.retention, requests)
    except ScenarioError as e:
        raise fail(str(e), source) from None
    except TraceError as e:
        raise fail(f"field workload.trace: {e}", source) from None
    except OSError as e:
        raise fail(os_error_line(e), source) from None
    return scenario, requests, parts, source


@contextmanager
def show_scenario_warnings(source: Path) -> Iterator[None]:
    """Within the block, print every :class:`ScenarioWarning` as one
    ``warning: SOURCE: ...`` line on stderr; other warnings keep their handling."""
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, ScenarioWarning):
            err.print(f"warning: {clip(str(source))}: {message}", markup=False, highlight=False)
        else:
            previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ScenarioWarning)
        warnings.showwarning = show
        yield
