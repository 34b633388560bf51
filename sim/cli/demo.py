"""``fragsim demo``'s front: the main job on built-in defaults -- the fleet seed's worked
example, its paged counterfactual and a daily-restart mitigation, simulated, then written
together (OUT/NAME/ per run and OUT/report.html, swapped in whole, or nothing) and
compared. The work is :func:`sim.cli.bodies.demo.demo` (:mod:`sim.cli.lazy`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.output import FormatOption


def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("out/demo"),
    no_report: Annotated[bool, typer.Option("--no-report", help="No OUT/report.html.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress or tables (the output path still).")
    ] = False,
    fmt: FormatOption = "table",
) -> None:
    """The main job on built-in defaults: the fleet seed's worked example, its paged
    counterfactual and a daily-restart mitigation, compared.

    The worked example is six days of bimodal traffic on a contiguous best-fit replica.
    Each run is written to OUT/NAME/; stdout gets each run's summary and the comparison
    (one column per run, named by its folder; csv and json: the comparison only),
    stderr the progress and OUT."""
    lazy.call("sim.cli.bodies.demo:demo", out=out, no_report=no_report, quiet=quiet, fmt=fmt)
