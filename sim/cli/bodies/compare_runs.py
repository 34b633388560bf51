"""The scenarios of ``fragsim compare`` (its body: ``sim.cli.bodies.compare``, which
loads this module only when a RUN is a scenario): each loaded and checked before
anything runs (:func:`prepare_all`), then simulated one after the other, with progress
over simulated time per run, or ``jobs`` at once in a process pool, with progress over
runs (:func:`simulate_all`); each run is written to its folder in the staged
comparison."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import TypeAlias

import pandas as pd
import typer

from sim.cli.bodies.run import prepare, simulate
from sim.cli.common import fail
from sim.cli.progress import progress
from sim.errors import clip
from sim.results.io import RunResult
from sim.results.summary_model import Summary
from sim.runner import run
from sim.scenario.schema import Scenario, ScenarioError
from sim.scenario.workload import load_workload
from sim.simulate.parts import Parts

Prepared: TypeAlias = tuple[Scenario, pd.DataFrame, list[Parts], Path]
"""``sim.cli.bodies.run.prepare``'s (scenario, requests, parts, source)."""


def prepare_all(*, paths: dict[int, Path], seed: int | None) -> dict[int, Prepared]:
    """Each scenario by its RUN index: ``sim.cli.bodies.run.prepare``'s (scenario,
    requests, parts, source), in the order given (the first that fails is the error)."""
    return {i: prepare(p, seed=seed) for i, p in paths.items()}


def simulate_all(
    *,
    to_run: list[tuple[int, Scenario, Path]],
    prepared: dict[int, Prepared],
    quiet: bool,
    jobs: int,
) -> dict[int, Summary]:
    """Run the scenarios (``to_run``: RUN index, scenario, folder to write), one after the
    other or ``jobs`` at once; each written to its folder. Returns their summaries."""
    if jobs == 1 or len(to_run) == 1:
        done: dict[int, Summary] = {}
        for k, (i, scenario, folder) in enumerate(to_run, start=1):
            _, requests, parts, source = prepared[i]
            if not quiet:
                typer.echo(f"compare: run {k} of {len(to_run)}: {folder.name}", err=True)
            try:
                result = simulate(scenario, requests, quiet=quiet, parts=parts)
            except ScenarioError as e:
                raise fail(str(e), source) from None
            _write_run(result, folder)
            done[i] = result.summary
        return done
    return _simulate_pool(to_run, quiet=quiet, jobs=jobs)


def _write_run(result: RunResult, folder: Path) -> None:
    """A run into the staged comparison (a new folder there: nothing to replace)."""
    try:
        result.write(folder)
    except OSError as e:
        raise fail(f"{clip(str(folder.name))}: cannot write results: {e.strerror or e}") from None


def _simulate_pool(
    to_run: list[tuple[int, Scenario, Path]], *, quiet: bool, jobs: int
) -> dict[int, Summary]:
    workers = min(jobs, len(to_run))
    with (
        progress("compare", len(to_run), what="runs", quiet=quiet) as p,
        ProcessPoolExecutor(max_workers=workers) as pool,
    ):
        futures = {pool.submit(_run_one, s, str(f)): i for i, s, f in to_run}
        done: dict[int, Summary] = {}
        pending = set(futures)
        while pending:
            p.update(len(done), note=f"{min(workers, len(pending))} running")
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                done[futures[future]] = future.result()
        p.update(len(done), note="")
    return done


def _run_one(scenario: Scenario, out: str) -> Summary:
    """A worker's run: the workload is loaded again there (a scenario pickles small)."""
    result = run(scenario, load_workload(scenario))
    result.write(out)
    return result.summary
