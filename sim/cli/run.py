"""``fragsim run SCENARIO -o OUT/``: simulate a scenario and write its results."""

from __future__ import annotations

import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.cli import interrupt
from sim.cli.report import write_report_of
from sim.cli.trace import show_trace_warnings
from sim.cost import check_run_cost
from sim.errors import clip, os_error_line, short
from sim.fleet.compare import compare_frame, comparison_table
from sim.parts import Parts, run_parts
from sim.results.io import RunResult, check_replaceable, summary_json
from sim.runner import run
from sim.scenario.builtin import DEMO, builtin_names, describe_builtin, resolve_scenario
from sim.scenario.fields import MAX_SEED
from sim.scenario.schema import Scenario, ScenarioError, ScenarioWarning, load_scenario
from sim.scenario.workload import load_workload

err = Console(stderr=True, soft_wrap=True)


MAX_LINE = 2000
"""The longest error line printed (a last bound on what a message may quote)."""


def fail(message: str, source: str | Path | None = None) -> typer.Exit:
    """Print a user error -- one ``error:`` line per line of ``message``, each naming
    ``source`` (the scenario file) unless it already starts with it -- and return the
    exit-2 exception to raise."""
    name = None if source is None else clip(str(source))
    for line in message.splitlines() or [""]:
        if name is not None and not line.startswith(name):
            line = f"{name}: {line}"
        line = clip(line, MAX_LINE)
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, markup=True)
    return typer.Exit(2)


def check_output_dir(out: Path) -> None:
    """Fail early (before simulating) when OUT cannot become a results directory: it
    holds other files, a parent is a file, the nearest existing folder refuses a new
    folder (tried: a read-only file system refuses even root), or the file system
    refuses the name (too long, a folder that may not be searched)."""
    try:
        check_replaceable(out)
        for parent in out.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise fail(f"{out}: output path: {parent} exists and is not a directory")
                tempfile.TemporaryDirectory(prefix=".fragsim-probe-", dir=parent).cleanup()
                return
    except FileExistsError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{clip(str(out))}: output directory: {e.strerror or e}") from None


def simulate(
    scenario: Scenario, requests: pd.DataFrame, *, quiet: bool, parts: list[Parts] | None = None
) -> RunResult:
    """Run with a rich progress bar over simulated time (on stderr). The run's scenario
    warnings are not repeated: :func:`prepare` printed them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        return _simulate(scenario, requests, quiet=quiet, parts=parts)


def _simulate(
    scenario: Scenario, requests: pd.DataFrame, *, quiet: bool, parts: list[Parts] | None = None
) -> RunResult:
    if quiet or not sys.stderr.isatty():
        return run(scenario, requests, parts=parts)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[sim]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(scenario.name, total=1.0, sim="")

        def report(now_s: float, end_s: float) -> None:
            bar.update(
                task, completed=min(now_s / end_s, 1.0), sim=f"simulated {now_s / 3600:.1f} h"
            )

        return run(scenario, requests, progress=report, parts=parts)


def print_summary(summary: dict[str, Any], console: Console) -> None:
    """The headline numbers of a run as a table, then its alerts."""
    from sim.results.summary import alert_lines

    req, fails, mem = summary["requests"], summary["failures"], summary["memory"]
    t = Table(title=f"{summary['scenario']} — allocator {summary['allocator']}", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("requests", f"{req['total']:,}")
    for status, n in req["by_status"].items():
        t.add_row(f"  {status}", f"{n:,}")
    t.add_row("allocation failures", f"{fails['allocation_failures']:,}")
    for cause, n in fails["by_cause"].items():
        t.add_row(f"  {cause}", f"{n:,}")
    t.add_row("  of which at > 25 % free (any cause)", f"{fails['at_high_free_memory']:,}")
    t.add_row("preemptions / restarts", f"{fails['preemptions']:,} / {fails['restarts']:,}")
    ratio = mem["largest_contiguous_free_block_ratio"]
    t.add_row(
        "largest_contiguous_free_block_ratio min / mean",
        f"{_f(ratio['min'])} / {_f(ratio['mean'])}",
    )
    for name, share in mem["waste_breakdown"].items():
        t.add_row(f"waste: {name.replace('_', ' ')}", "—" if share is None else f"{share:.1%}")
    for name in ("ttft", "tpot", "e2e"):
        p = summary["latency_s"][name]
        t.add_row(f"{name} p50 / p99 (s)", f"{_f(p['p50'])} / {_f(p['p99'])}")
    t.add_row("output tokens/s", f"{summary['throughput']['output_tokens_per_s']:.1f}")
    cache = summary.get("prefix_cache")
    if cache and cache["cached_prompt_tokens"]:
        t.add_row(
            "prefix cache: prompt tokens hit",
            f"{cache['share_of_prompt_tokens']:.1%} ({cache['requests_with_hits']:,} requests)",
        )
    fleet = summary.get("fleet")
    if fleet is not None:
        _fleet_rows(t, fleet)
    console.print(t)
    for line in alert_lines(summary):
        console.print(line, markup=False, highlight=False)


def _fleet_rows(t: Table, fleet: dict[str, Any]) -> None:
    r = fleet["replicas"]
    t.add_row(
        "fleet: replicas initial / mean / peak",
        f"{r['initial']} / {r['mean']:.2f} / {r['peak']}",
    )
    t.add_row(
        "  replica-hours / avoidable",
        f"{fleet['replica_hours']:,.1f} / {fleet['avoidable_replica_hours']:,.1f}",
    )
    t.add_row(
        "  cost $ / avoidable $",
        f"{fleet['cost_usd']:,.2f} / {fleet['avoidable_cost_usd']:,.2f}",
    )
    t.add_row("  $ per 1M output tokens", f"{fleet['cost_per_million_output_tokens_usd']:.2f}")
    t.add_row("  scale-ups / scale-downs", f"{fleet['scale_ups']:,} / {fleet['scale_downs']:,}")
    restarts = ", ".join(f"{k} {v:,}" for k, v in fleet["restarts"].items()) or "none"
    t.add_row("  restarts by cause / crashes", f"{restarts} / {fleet['crashes']:,}")


def _f(v: object) -> str:
    return "—" if v is None else f"{v:.3f}"


def run_command(
    scenario_path: Annotated[
        Path,
        typer.Argument(
            help="Scenario YAML file, or the name of a built-in scenario (fragsim scenarios)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    seed: Annotated[
        int | None, typer.Option(min=0, max=MAX_SEED, help="Override the scenario's seed.")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="Override the mode: fast or exact.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or table.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary JSON.")] = False,
    report: Annotated[
        bool, typer.Option("--report/--no-report", help="Also write OUT/report.html.")
    ] = True,
) -> None:
    """Simulate SCENARIO and write requests/timeseries/events Parquet + summary.json
    (a fleet's fleet/alerts Parquet too) and OUT/report.html (unless --no-report)."""
    if mode is not None and mode not in ("fast", "exact"):
        raise typer.BadParameter(f"got {short(mode)}, expected fast or exact", param_hint="--mode")
    scenario, requests, parts, source = prepare(scenario_path, seed=seed, mode=mode)
    check_output_dir(out)
    try:
        result = simulate(scenario, requests, quiet=quiet, parts=parts)
    except ScenarioError as e:  # a cost bound met while simulating
        raise fail(str(e), source) from None
    warn_out_of_range(scenario, result, source)
    write_results(result, out, report=report)
    html = out / "report.html" if report else None
    if json_out:
        typer.echo(summary_json(result.summary), nl=False)
    elif not quiet:
        print_summary(result.summary, Console())
        typer.echo(f"wrote {out}/ ({', '.join(result.files)})")
        if html is not None:
            typer.echo(f"report: {html}")


def warn_out_of_range(scenario: Scenario, result: RunResult, source: Path) -> None:
    """One ``warning:`` line naming the scenario and the calibration file when the run
    evaluated a calibrated latency model outside the range it was measured over."""
    report = result.summary["latency"]
    calls = report.get("out_of_range_calls")
    if not calls:
        return
    path = getattr(scenario.latency, "path", None)
    err.print(
        f"warning: {clip(str(source))}: field latency.path: {clip(str(path))}: the "
        f"calibrated latency model was evaluated outside its validity range {calls:,} "
        f"times (first at prefill_tokens, decode_seqs, kv_tokens = "
        f"{report['first_out_of_range']}); its times there are extrapolated",
        markup=False,
        highlight=False,
    )


def report_into(out: Path) -> Callable[[Path], None]:
    """A writer of the report of a run being written to OUT, for ``RunResult.write``'s
    ``extras``: given the temporary folder, it writes ``report.html`` there, naming the
    run as OUT (the bytes ``fragsim report OUT`` writes), so the report is replaced
    with the run in one step. A report that cannot be written is one ``error:`` line."""

    def write(folder: Path) -> None:
        from reports.html import ReportError, build_report, write_html
        from sim.results.io import read_result
        from traces.errors import TraceError

        try:
            write_html(
                build_report([(out.resolve().name, read_result(folder))]), folder / "report.html"
            )
        except (ReportError, TraceError, ValueError) as e:
            raise fail(f"{clip(str(out))}/report.html: {clip(str(e))}") from None

    return write


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
    from sim.scenario.retention import warn_unused_retention
    from traces import TraceError

    source = resolve_scenario(scenario_arg)
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

    def show(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        if issubclass(category, ScenarioWarning):
            err.print(f"warning: {clip(str(source))}: {message}", markup=False, highlight=False)
        else:
            previous(message, category, *args, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ScenarioWarning)
        warnings.showwarning = show
        yield


def scenarios_command() -> None:
    """List the built-in scenarios (run any of them by name)."""
    t = Table("name", "what it models")
    for name in builtin_names():
        t.add_row(name, describe_builtin(name))
    Console().print(t)


def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("out/demo"),
    no_report: Annotated[bool, typer.Option("--no-report", help="No OUT/report.html.")] = False,
) -> None:
    """The main job on built-in defaults: the fleet seed's worked example (six days of
    bimodal traffic on a contiguous best-fit replica), its paged counterfactual and a
    daily-restart mitigation; writes each run under OUT and compares them."""
    console = Console()
    for name in DEMO:
        check_output_dir(out / name)
    summaries = []
    for name in DEMO:
        scenario, requests, parts, _ = prepare(Path(name))
        result = simulate(scenario, requests, quiet=False, parts=parts)
        write_results(result, out / name)
        print_summary(result.summary, console)
        summaries.append(result.summary)
    console.print(comparison_table(compare_frame(summaries)))
    console.print(f"results in {out}/")
    if not no_report:
        typer.echo(f"report: {write_report_of([out / n for n in DEMO], out / 'report.html')}")
