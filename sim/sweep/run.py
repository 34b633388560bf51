"""``run_sweep``: run every task of a sweep (resuming an interrupted one) and write its
tables: ``OUT/runs.parquet`` (one row per run), ``OUT/summary.parquet`` and
``OUT/summary.csv`` (one row per point, means and 95 % intervals over replications)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sim.sweep.execute import Executor, Outcome, Progress
from sim.sweep.spec import Sweep
from sim.sweep.summary import runs_frame, summary_frame, write_frames


@dataclass(frozen=True)
class SweepResult:
    outcomes: list[Outcome]
    runs: pd.DataFrame
    summary: pd.DataFrame

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """Run ``sweep``'s unfinished tasks on the executor chosen by ``workers`` /
    ``scheduler`` (:class:`sim.sweep.execute.Executor`), then write the tables."""
    out = Path(out)
    with Executor(out, workers=workers, scheduler=scheduler) as executor:
        outcomes = executor.run(sweep.tasks, progress)
    runs = runs_frame(outcomes, sweep.params)
    summary = summary_frame(runs, sweep.params)
    write_frames(
        {
            out / "runs.parquet": runs,
            out / "summary.parquet": summary,
            out / "summary.csv": summary,
        }
    )
    return SweepResult(outcomes, runs, summary)
