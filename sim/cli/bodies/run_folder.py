"""The command bodies' side of run folders: the one reader's (:mod:`sim.results.runfolder`)
errors, where a folder no run could have written is one ``error: ...`` line (exit
status 2) naming the file and the field, column or row; a bound passed over by a value
the run's summary records names the summary's field, not a flag that was never given;
and the checks on an output folder before anything is written (:func:`check_output_dir`,
:func:`check_not_an_input`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import typer

from sim.cli.common import fail
from sim.errors import clip
from sim.results.io import REPLACEABLE, RunResult, check_replaceable
from sim.results.runfolder import RunFolderError, check_run, read_run
from sim.results.summary_model import Summary

SCRAPE_FIELD = "fleet.alerts.scrape_interval_s"
"""Where a fleet run's summary records the scrape interval its alerts were evaluated at."""


def checked_run(
    run_dir: Path, need: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[Path, Summary]:
    """The run folder and its summary, every table checked a batch at a time
    (``sim.results.runfolder.check_run``; ``need``: the columns the command reads, by
    table); one ``error:`` line when the folder is not one a run wrote."""
    try:
        return check_run(run_dir, need)
    except RunFolderError as e:
        raise fail(str(e)) from None


def loaded_run(run_dir: Path) -> RunResult:
    """The run, its tables loaded whole and checked (``sim.results.runfolder.read_run``);
    one ``error:`` line when the folder is not one a run wrote."""
    try:
        return read_run(run_dir)
    except RunFolderError as e:
        raise fail(str(e)) from None


def recorded_scrape(summary: Summary | None) -> bool:
    """Whether the summary records the scrape interval (``fleet.alerts``)."""
    fleet = None if summary is None else summary.fleet
    alerts = None if fleet is None else fleet.alerts
    return alerts is not None and alerts.scrape_interval_s is not None


def too_many_scrapes(
    message: str, given_s: float | None, summary: Summary | None, summary_path: Path
) -> Exception:
    """The error for a scrape interval that gives more scrapes than a command
    evaluates, blaming where the interval came from: the ``--scrape-interval`` flag
    when given, else the summary's field, else the default. ``message`` says why
    (``got 1: the run's ... s would be more than ... scrapes``)."""
    if given_s is not None:
        return typer.BadParameter(message, param_hint="--scrape-interval")
    if recorded_scrape(summary):
        return fail(f"{clip(str(summary_path))}: field {SCRAPE_FIELD}: {message}")
    return fail(f"the default --scrape-interval: {message}; pass a larger --scrape-interval")


def check_not_an_input(out: Path, folder: Path, flag: str = "-o") -> None:
    """One ``error:`` line when an output would replace one of the files of the run
    folder the command reads (``-o RUN/summary.json``): a command never overwrites its
    own input. A new file beside them is the user's to write."""
    real = Path(os.path.realpath(out))  # never raises: a loop of links is the writer's
    if real.parent == Path(os.path.realpath(folder)) and real.name in REPLACEABLE:
        raise fail(
            f"{clip(str(out))}: {flag} names the file {real.name} of the run folder "
            f"{clip(str(folder))} that this command reads; write to another path"
        )


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
