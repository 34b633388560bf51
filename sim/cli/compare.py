"""``fragsim compare RUN... -o OUT/ [--baseline NAME]``: which fix pays.

Each RUN is a scenario (a file or a built-in name), simulated and written to
``OUT/NAME/``, or a finished run folder (a folder holding ``summary.json``, written by
``fragsim run`` or an earlier ``compare``), read as it is and never re-run; the two mix
freely. A run's NAME is its scenario's name, or its folder's name (``-2``, ``-3``... on
repeats). The baseline is the first RUN, or the one ``--baseline`` names; every other run
is compared against it (``sim.results.compare.with_deltas``): dollars, replica-hours,
avoidable replica-hours, failed requests, allocation failures, failures at high free
memory, p99 TTFT and end-to-end, each as a difference and a percentage; ranked by
dollars saved, ties by fewer allocation failures; one verdict line per run.

Writes ``OUT/compare.csv`` and ``OUT/compare.parquet`` (every metric, the deltas, rank
and verdict: one row per run, the baseline first, then by rank) and ``OUT/report.html``
(unless ``--no-report``). Prints the table (runs as rows, wrapped to the terminal's width
in ``table`` format) and the verdicts on stdout; progress, and where the results went,
on stderr (also with ``--quiet``). ``--format csv`` / ``json`` print the rows of
``compare.csv``.

``OUT`` is written whole or not at all: the runs, the tables and the report go to a
hidden sibling (``traces.atomic``), swapped in once complete, so a full disk or Ctrl-C
leaves ``OUT`` as it was. ``OUT`` must be new, empty or an earlier comparison's
(:func:`check_compare_dir`), apart from every run folder given (:func:`check_out_apart`);
a scenario whose name cannot be a folder name (``.``, ``..``) is refused. One RUN alone
is refused: there is nothing to compare it with.

This module is the command's front (its options and the one check made before the
engine loads); the work is :func:`sim.cli.bodies.compare.compare` (:mod:`sim.cli.lazy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.common import fail
from sim.cli.output import FormatOption
from sim.errors import clip
from sim.fields import MAX_SEED


def compare_command(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Scenario files or built-in names (run here), or finished run folders "
            "(read, not re-run); the first is the baseline unless --baseline says.",
            metavar="RUN",
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    baseline: Annotated[
        str | None,
        typer.Option(help="The run to compare against, by NAME (default: the first)."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, max=MAX_SEED, help="Override every scenario's seed.")
    ] = None,
    jobs: Annotated[int, typer.Option(min=1, max=256, help="Runs at once (processes).")] = 1,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress, table or verdicts.")
    ] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="No OUT/report.html.")] = False,
    fmt: FormatOption = "table",
) -> None:
    """Compare runs against a baseline: what each saves or costs ($, replica-hours,
    failures, p99 latency), ranked by $ saved, ties by fewer allocation failures."""
    if len(runs) < 2:
        raise fail(
            f"compare: got one run ({clip(str(runs[0]))}); give two or more: the first is "
            "the baseline (or the one --baseline names), the others are compared with it"
        )
    lazy.call(
        "sim.cli.bodies.compare:compare",
        runs=runs,
        out=out,
        baseline=baseline,
        seed=seed,
        jobs=jobs,
        quiet=quiet,
        no_report=no_report,
        fmt=fmt,
    )


def unique_names(names: list[str]) -> list[str]:
    """Run names safe as folder names: each name (characters but letters, digits and
    ``-_.`` replaced by ``_``; a name of dots only is ``scenario``), ``-2``, ``-3``... on
    repeats."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        safe = safe if safe.strip(".") else "scenario"
        seen[safe] = seen.get(safe, 0) + 1
        out.append(safe if seen[safe] == 1 else f"{safe}-{seen[safe]}")
    return out
