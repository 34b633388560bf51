"""Run a sweep's tasks on an executor, each result written as soon as it finishes.

Layout under the output folder ``OUT``:

* ``OUT/runs/ID/``: the run (``RunResult.write``: atomic, complete or absent);
* ``OUT/runs/ID.sweep_key.json``: ``{"id", "key", "point", "replication"}``, written
  (atomically) after the run folder. A task is *finished* when ``runs/ID/summary.json``
  exists and its sweep key file holds the task's key; a rerun skips finished tasks and
  runs the rest again (a kill between the two writes costs one rerun of that task);
* ``OUT/failed/ID.txt``: the error of a task that raised (removed when it later
  succeeds). A failure never stops the sweep.

Executors: ``workers == 1`` runs in this process, in order; otherwise a local process
pool of ``workers`` processes (default: all cores), whose workers write their own run
folders; or, given ``scheduler`` (``tcp://HOST:PORT``), an existing Dask distributed
cluster, whose workers send the result back and this process writes it (the workers need
not share the file system, only fragsim and the scenario's trace files). Workers get the
scenario (it pickles small) and load its workload themselves. The files of a run do not
depend on the executor: the same scenario gives the same bytes.
"""

from __future__ import annotations

import json
import os
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from sim.results.io import RunResult
from sim.results.runfolder import read_summary
from sim.results.summary_model import Summary
from sim.runner import run
from sim.scenario.schema import Scenario
from sim.scenario.workload import load_workload
from sim.sweep.spec import Task
from traces.atomic import atomic_path

if TYPE_CHECKING:  # the optional `dist` extra, imported where a scheduler is given
    from dask.distributed import Client


@dataclass(frozen=True)
class Outcome:
    """A finished task: its summary, or the error it raised."""

    task: Task
    summary: Summary | None
    error: str | None
    skipped: bool = False
    """True when an earlier sweep had already run it."""


Progress = Callable[[int, int, int, int], None]
"""``progress(done, running, failed, total)`` after every change."""

Simulated: TypeAlias = tuple[Summary, RunResult | None]
"""What a worker sends back (:func:`simulate_task`): the summary, and the result when
this process is to write it."""

Ended: TypeAlias = tuple[Task, Summary | None, RunResult | None, str | None]
"""A task as it ends: the summary, the result to write here (or None), the error."""


class TaskFuture(Protocol):
    """A submitted :func:`simulate_task`: a process pool's or a Dask cluster's future."""

    def result(self) -> Simulated: ...


F = TypeVar("F", bound=TaskFuture)


def run_dir(out: Path, task: Task) -> Path:
    return out / "runs" / task.id


def key_file(out: Path, task: Task) -> Path:
    return out / "runs" / f"{task.id}.sweep_key.json"


def failed_file(out: Path, task: Task) -> Path:
    return out / "failed" / f"{task.id}.txt"


def finished_summary(out: Path, task: Task) -> Summary | None:
    """The summary of a run an earlier sweep finished, or None (not run, another
    scenario's, or a damaged summary: run again). The summary is read by the run
    folder's one reader (``sim.results.runfolder.read_summary``)."""
    try:
        key = json.loads(key_file(out, task).read_text())
        if not isinstance(key, dict) or key.get("key") != task.key:
            return None
        return read_summary(run_dir(out, task) / "summary.json")
    except (OSError, ValueError):
        return None


def kept_runs(out: Path) -> int:
    """The finished runs under ``out/runs`` (a sweep key beside a run folder holding its
    summary): what an interrupted sweep or plan keeps, and what a rerun skips."""
    runs = out / "runs"
    try:
        keys = sorted(runs.glob("*.sweep_key.json"))
        return sum(
            (runs / k.name.removesuffix(".sweep_key.json") / "summary.json").is_file() for k in keys
        )
    except OSError:
        return 0


def simulate_task(scenario: Scenario, out_dir: str | None) -> Simulated:
    """A worker's job: load the workload, simulate, write the run to ``out_dir`` (then
    return only the summary) or return the result for the caller to write."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(scenario, load_workload(scenario))
    if out_dir is not None:
        result.write(out_dir)
        return result.summary, None
    return result.summary, result


def _record(out: Path, task: Task, summary: Summary, result: RunResult | None) -> None:
    if result is not None:
        result.write(run_dir(out, task))
    key = {"id": task.id, "key": task.key, "point": task.point, "replication": task.replication}
    with atomic_path(key_file(out, task)) as tmp:
        tmp.write_text(json.dumps(key, indent=2, sort_keys=True) + "\n")
    failed_file(out, task).unlink(missing_ok=True)


def _record_failure(out: Path, task: Task, error: str) -> None:
    path = failed_file(out, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(error if error.endswith("\n") else error + "\n")


def _error_text(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines)


class Executor(AbstractContextManager["Executor"]):
    """Runs tasks and writes their results under ``out`` (see the module docstring)."""

    def __init__(self, out: Path, workers: int | None = None, scheduler: str | None = None):
        self.out = Path(out)
        self.workers = workers or os.cpu_count() or 1
        self.scheduler = scheduler
        self._stack = ExitStack()
        self._pool: ProcessPoolExecutor | None = None
        self._client: Client | None = None

    def __enter__(self) -> Executor:
        if self.scheduler is not None:
            from dask.distributed import Client

            self._client = self._stack.enter_context(Client(self.scheduler))
        elif self.workers > 1:
            self._pool = ProcessPoolExecutor(self.workers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            # On an error or Ctrl-C, queued tasks are dropped, not waited for.
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
        self._stack.close()

    @property
    def slots(self) -> int:
        """Tasks that can run at once."""
        if self._client is not None:
            return max(1, sum(self._client.nthreads().values()))
        return self.workers

    def run(self, tasks: Sequence[Task], progress: Progress | None = None) -> list[Outcome]:
        """Run the tasks not finished before; outcomes in the order of ``tasks``, one per
        task. Tasks with the same id (the same point listed twice: the same scenario)
        run once and share the outcome."""
        (self.out / "runs").mkdir(parents=True, exist_ok=True)
        outcomes: dict[str, Outcome] = {}
        todo = []
        for task in {t.id: t for t in tasks}.values():  # one per id, in first-seen order
            summary = finished_summary(self.out, task)
            if summary is not None:
                outcomes[task.id] = Outcome(task, summary, None, skipped=True)
            else:
                todo.append(task)
        failed = 0
        total = len(todo) + len(outcomes)

        def report() -> None:
            if progress is not None:
                running = min(self.slots, total - len(outcomes))
                progress(len(outcomes) - failed, running, failed, total)

        report()
        for task, summary, result, error in self._results(todo):
            if error is None:
                assert summary is not None
                _record(self.out, task, summary, result)
                outcomes[task.id] = Outcome(task, summary, None)
            else:
                _record_failure(self.out, task, error)
                outcomes[task.id] = Outcome(task, None, error)
                failed += 1
            report()
        return [replace(outcomes[t.id], task=t) for t in tasks]

    def _results(self, tasks: list[Task]) -> Iterator[Ended]:
        """(task, summary, result to write or None, error) as each task ends."""
        if self._client is not None:
            yield from self._dask(self._client, tasks)
        elif self._pool is not None:
            futures = {
                self._pool.submit(simulate_task, t.scenario, str(run_dir(self.out, t))): t
                for t in tasks
            }
            yield from _collect(futures, as_completed(futures))
        else:
            for task in tasks:
                try:
                    summary, _ = simulate_task(task.scenario, str(run_dir(self.out, task)))
                except Exception as e:  # a failed scenario does not stop the sweep
                    yield task, None, None, _error_text(e)
                else:
                    yield task, summary, None, None

    def _dask(self, client: Client, tasks: list[Task]) -> Iterator[Ended]:
        from dask.distributed import as_completed as dask_completed

        futures: dict[TaskFuture, Task] = {
            client.submit(simulate_task, t.scenario, None, key=f"fragsim-{t.id}", pure=False): t
            for t in tasks
        }
        if futures:
            yield from _collect(futures, dask_completed(list(futures)))


def _collect(futures: dict[F, Task], done: Iterable[F]) -> Iterator[Ended]:
    for future in done:
        task = futures[future]
        try:
            summary, result = future.result()
        except Exception as e:
            yield task, None, None, _error_text(e)
        else:
            yield task, summary, result, None


__all__ = ["Executor", "Outcome", "finished_summary", "kept_runs", "simulate_task"]
