"""``fragsim postmortem LOG_DIR -o OUT/``: replay a production log (requests and node
events) on the simulated fleet with the recorded routing and node events, report which
recorded failures the replay reproduces (precision and recall: the rule is
:mod:`sim.postmortem.matching`'s), then run the modelled baseline (the BASE scenario's own
policies) and counterfactuals on the same traffic, each judged against the baseline by
the one thing it changes (:mod:`sim.postmortem.replay` says how each run is built,
:mod:`sim.postmortem.baseline` how changes and ranks are found).

Writes, under OUT/: ``replay/`` (the replay's run directory), with counterfactuals
``baseline/`` and ``counterfactuals/NAME/`` (one run directory each), ``match.csv`` (one
row per recorded failure, then one per unmatched simulated failure, with times),
``postmortem.json`` (rule, tolerance, counts, precision, recall, the recorded router's
fallbacks, the scripted node actions, the log's nodes and node events, the baseline's
match and agreement, each counterfactual's changes), ``compare.csv`` (the replay, the
baseline and the counterfactuals, one row each, with role, change, rank and verdict),
``replicas.csv`` (the replay's fleet ids and the log's names) and ``report.html``
(:mod:`reports.postmortem`; not with ``--no-report``). Nodes carry the log's names
everywhere a user reads them (tables, report, a ``replica_name`` column beside every
``replica`` id in the run folders). Everything is simulated before anything is written;
OUT is written whole into a hidden sibling and swapped in (all of it or nothing: an
earlier postmortem's folder is replaced whole, any other non-empty folder refused).

Prints (``--format``, :mod:`sim.cli.output`): the match, failures per node, the
baseline against the log and the replay, and the runs ranked, runs as rows; on stderr,
a ``note:`` per counterfactual that changes more than one thing, then the output path
(as every command does; also with ``--quiet``).

This module is the front (options, the one check made before the simulator loads); the
work is :func:`sim.cli.bodies.postmortem.postmortem` (:mod:`sim.cli.lazy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from sim.cli import lazy
from sim.cli.common import fail
from sim.cli.output import FormatOption

DEFAULT_BASE = "seed-postmortem"
DEFAULT_COUNTERFACTUALS = (
    "seed-postmortem-frag-restart",
    "seed-postmortem-paged",
    "seed-postmortem-length-routing",
    "seed-postmortem-frag-routing",
    "seed-postmortem-runbook",
)


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
    if no_counterfactuals and counterfactual:
        raise fail("--no-counterfactuals and --counterfactual: choose one")
    lazy.call(
        "sim.cli.bodies.postmortem:postmortem",
        log_dir=log_dir,
        out=out,
        scenario=scenario,
        counterfactual=counterfactual,
        no_counterfactuals=no_counterfactuals,
        rule=rule,
        tolerance_s=tolerance_s,
        no_report=no_report,
        fmt=fmt,
        quiet=quiet,
    )
