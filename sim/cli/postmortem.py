"""``fragsim postmortem LOG_DIR -o OUT/``: replay a production log (requests and node
events) on the simulated fleet with the recorded routing and node events, report which
recorded failures the replay reproduces (precision and recall: the rule is
:mod:`sim.fleet.matching`'s), then run counterfactual policies on the same traffic
(:mod:`sim.fleet.postmortem` says how each run is built).

Writes, under OUT/: ``replay/`` (the replay's run directory), ``counterfactuals/NAME/``
(one run directory each), ``match.csv`` (one row per recorded failure, then one per
unmatched simulated failure), ``postmortem.json`` (rule, tolerance, counts, precision,
recall, the recorded router's fallbacks, the scripted node actions) and ``compare.csv``
(the replay and the counterfactuals, one row each). Everything is simulated before
anything is written; each piece is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console

from sim.cli.compare import _names
from sim.cli.run import check_output_dir, fail
from sim.fleet.compare import compare_frame, comparison_table
from sim.fleet.postmortem_log import LogError
from sim.scenario.schema import Scenario, ScenarioError, load_scenario
from traces.errors import TraceError
from traces.writers import atomic_path

DEFAULT_BASE = "seed-postmortem"
DEFAULT_COUNTERFACTUALS = (
    "seed-postmortem-frag-restart",
    "seed-postmortem-paged",
    "seed-postmortem-length-routing",
    "seed-postmortem-frag-routing",
    "seed-postmortem-runbook",
)


def _load(name: str) -> Scenario:
    try:
        return load_scenario(name)
    except ScenarioError as e:
        raise fail(str(e)) from None


def _score(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def postmortem_command(
    log_dir: Annotated[
        Path, typer.Argument(help="Folder with requests.csv|parquet and nodes.csv|parquet.")
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
    rule: Annotated[
        Literal["by_request", "by_window"], typer.Option(help="How failures are matched.")
    ] = "by_request",
    tolerance_s: Annotated[
        float, typer.Option("--tolerance-s", min=0, max=86400, help="by_window: ± seconds.")
    ] = 30.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing.")] = False,
) -> None:
    """Replay LOG_DIR's traffic and node events, match its failures, run counterfactuals."""
    from sim.fleet.postmortem import postmortem_record, replay, run_counterfactual
    from sim.fleet.postmortem_log import load_postmortem_log

    try:
        log = load_postmortem_log(log_dir)
    except LogError as e:
        raise fail(str(e)) from None
    base = _load(scenario)
    cfs = [_load(name) for name in (counterfactual or DEFAULT_COUNTERFACTUALS)]
    names = _names([cf.name for cf in cfs])
    check_output_dir(out / "replay")
    for name in names:
        check_output_dir(out / "counterfactuals" / name)
    try:
        done = replay(base, log, rule=rule, tolerance_s=tolerance_s)
        runs = [run_counterfactual(cf, log) for cf in cfs]
    except ScenarioError as e:
        raise fail(str(e)) from None
    record = postmortem_record(done, log, names)
    frame = compare_frame([done.result.summary, *(r.summary for r in runs)])
    frame.loc[1:, "scenario"] = names  # the folder names (repeats get -2, -3, ...)
    try:
        done.result.write(out / "replay")
        for name, result in zip(names, runs, strict=True):
            result.write(out / "counterfactuals" / name)
        _write(out / "match.csv", lambda p: done.match.table.to_csv(p, index=False))
        _write(out / "compare.csv", lambda p: frame.to_csv(p, index=False))
        _write(out / "postmortem.json", lambda p: p.write_text(json.dumps(record, indent=2) + "\n"))
    except (TraceError, FileExistsError) as e:
        raise fail(str(e)) from None
    if quiet:
        return
    m = done.match
    where = f", ±{m.tolerance_s:g} s" if m.tolerance_s is not None else ""
    typer.echo(
        f"match ({m.rule}{where}): {m.matched} of {m.recorded_failures} recorded failures "
        f"reproduced, {m.simulated_failures} simulated failures; "
        f"precision {_score(m.precision)}, recall {_score(m.recall)}"
    )
    r = done.router
    typer.echo(
        f"routing: {r['recorded']} requests on their recorded replica, "
        f"{r['fallbacks']} fallbacks (recorded replica not up)"
    )
    Console().print(comparison_table(frame, title="replay and counterfactuals"))
    typer.echo(f"wrote {out}/ (replay, counterfactuals/, match.csv, compare.csv, postmortem.json)")


def _write(path: Path, write: Any) -> None:
    with atomic_path(path) as tmp:
        write(tmp)
