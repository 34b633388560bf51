"""RunResult: the frames and summary of one run, written as Parquet + JSON.

Outputs are byte-for-byte reproducible for the same scenario, seed and library
versions: no wall-clock times, no host names, stable column order, sorted JSON keys.

Writing is safe against a kill at any instant (``RunResult.write``, through the writer
every output shares, :mod:`traces.atomic`):

* the files go to a hidden sibling ``.NAME.tmp-PID-XXXXXXXX/`` (``PID``: the writer's
  process id), which becomes ``NAME/`` only once complete;
* an earlier run at ``NAME/`` is swapped with the new one in one step (Linux's
  ``renameat2(RENAME_EXCHANGE)``), so at every instant ``NAME/`` holds one complete run,
  the old or the new; the old one, now in the temporary folder, is deleted after. Where
  the swap is not available the old run is first renamed aside to
  ``.NAME.old-PID-XXXXXXXX/``; a kill in the instant between the two renames leaves it
  there, complete, and the next write to ``NAME`` puts it back before anything else;
* the temporaries of a writer that died (killed, machine lost) are removed by the next
  write to the same target: their PID names a process that no longer runs.
* Ctrl-C while the swap is under way (a few milliseconds) is ignored, so an interrupt
  never separates the two renames: the write completes.

``FRAGSIM_FAULT_AT=POINT[:SIGNAL]`` is a test-only hook: the writer sends itself
``SIGNAL`` (default ``KILL``) at the named point (:data:`FAULT_POINTS`), so tests can
kill a write at each step (``tests/e2e/test_run_faults.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.results.digests import table_digests
from sim.results.summary_model import Summary
from traces import atomic
from traces.atomic import fault, staged

FILES = ("requests.parquet", "timeseries.parquet", "events.parquet", "summary.json")
REPLACEABLE = (*FILES, "fleet.parquet", "alerts.parquet", "report.html")
"""What a run directory may hold (a fleet run's tables, the run's HTML report): a
directory holding only these is an earlier run, replaced whole by the next write."""

FAULT_POINTS = ("partial", "written", "swapped", "aside", "replaced", "done")
"""Where ``FRAGSIM_FAULT_AT`` can strike: after the first file of the temporary folder;
after all of them (the ``extras``, a report, included); after the swap; after renaming
the old run aside (no swap); after renaming the new run into place (no swap); once the
write is complete and Ctrl-C is heard again."""


@dataclass(frozen=True)
class RunResult:
    requests: pd.DataFrame
    """One row per request: arrival, admit, first token, finish, status, retries..."""
    timeseries: pd.DataFrame
    """Pool and batch samples: periodic, at every allocation failure, and final."""
    events: pd.DataFrame
    """Allocation failures, preemptions and restarts with the pool state at the time."""
    summary: Summary
    """The typed summary (``summary.json``: :mod:`sim.results.summary_model`); ``digests``
    set once read back from a folder (the run's own is written with them)."""
    fleet: pd.DataFrame | None = None
    """A fleet run's fleet table (one row per sample: replicas by state, queue, cost so
    far); None for a single replica."""
    alerts: pd.DataFrame | None = None
    """A fleet run's alert log (``sim.telemetry.alerts``); None for a single replica."""

    def frames(self) -> list[tuple[str, pd.DataFrame]]:
        """The tables written as ``NAME.parquet``, in order."""
        out = [
            ("requests", self.requests),
            ("timeseries", self.timeseries),
            ("events", self.events),
        ]
        if self.fleet is not None:
            out.append(("fleet", self.fleet))
        if self.alerts is not None:
            out.append(("alerts", self.alerts))
        return out

    @property
    def files(self) -> list[str]:
        """The file names :meth:`write` writes."""
        return [f"{name}.parquet" for name, _ in self.frames()] + ["summary.json"]

    def write(
        self,
        out_dir: str | Path,
        on_commit: Callable[[], None] | None = None,
        extras: Callable[[Path], object] | None = None,
    ) -> Path:
        """Write its files (``frames()`` as Parquet, ``summary.json`` with the tables'
        SHA-256 under ``digests``: :mod:`sim.results.digests`) into ``out_dir``,
        replacing a previous run there. A directory holding anything else is never
        touched (FileExistsError). Stale temporaries of dead writers to the same target
        are removed first. ``extras(folder)`` is called once the run's files are in the
        temporary folder: what it writes there (``report.html``, one of
        :data:`REPLACEABLE`) is part of the run, put in place by the same atomic replace
        (a kill while it writes leaves the previous run whole). ``on_commit`` is called
        once the run is in place, before Ctrl-C is heard again (so a caller can tell,
        whenever an interrupt comes, whether the run was written)."""
        out = Path(out_dir)
        with staged() as outputs:
            tmp = outputs.folder(out, check_replaceable, complete=_complete)
            for name, frame in self.frames():
                table = pa.Table.from_pandas(frame, preserve_index=False)
                table = table.replace_schema_metadata(None)
                pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
                fault("partial")
            digests = table_digests(tmp, [f"{name}.parquet" for name, _ in self.frames()])
            summary = self.summary.model_copy(update={"digests": digests})  # read back
            (tmp / "summary.json").write_text(summary_json(summary))
            if extras is not None:
                extras(tmp)
            fault("written")
            outputs.commit(on_commit)
        fault("done")
        return out


def clean_stale(out: Path) -> None:
    """Remove the temporaries of dead writers to ``out``; a complete earlier run left
    aside (a kill between the two renames of a replacement without swap) is put back
    at ``out`` when nothing is there (:func:`traces.atomic.clean_stale`)."""
    atomic.clean_stale(out, _complete)


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def check_replaceable(out: Path) -> None:
    """Raise (FileExistsError) unless ``out`` is absent or an earlier run's directory
    (only our files); a link or anything not a folder is never replaced."""
    atomic.check_folder_target(out)
    if not out.exists():
        return
    extra = sorted(p.name for p in out.iterdir() if p.name not in REPLACEABLE)
    if extra or out.resolve() == Path.cwd().resolve():
        shown = ", ".join(extra[:3]) or "the working directory"
        raise FileExistsError(
            f"{out} exists and holds other files ({shown}); "
            f"refusing to replace it: choose a new or empty directory"
        )


def check_owned_folder(
    out: Path,
    what: str,
    *,
    files: frozenset[str],
    marker: frozenset[str] = frozenset(),
    run_dirs: frozenset[str] | None = None,
    nested: frozenset[str] = frozenset(),
) -> None:
    """Raise (FileExistsError) unless ``out`` is absent, empty, or a folder that a
    command replacing it whole (``what``: "compare", "postmortem", "the demo") wrote:
    only ``files``, run folders (each holding only :data:`REPLACEABLE`; named in
    ``run_dirs``, or any name not starting with a dot when None) and folders named in
    ``nested`` holding only run folders -- with at least one of ``marker`` present
    when given. Nothing fragsim did not write is ever lost."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not out.is_dir() or out.is_symlink():
        raise FileExistsError(f"{out} exists and is not a folder; choose another -o")

    def run_folder(p: Path, names: frozenset[str] | None) -> bool:
        named = not p.name.startswith(".") if names is None else p.name in names
        return (
            named
            and p.is_dir()
            and not p.is_symlink()
            and all(q.name in REPLACEABLE for q in p.iterdir())
        )

    def owned(p: Path) -> bool:
        if p.name in files:
            return p.is_file()
        if p.name in nested:
            inner = p.is_dir() and not p.is_symlink()
            return inner and all(run_folder(q, None) for q in p.iterdir())
        return run_folder(p, run_dirs)

    entries = sorted(out.iterdir())
    others = [p.name for p in entries if not owned(p)]
    if others or (marker and not marker & {p.name for p in entries}):
        shown = ", ".join(others[:3]) or f"no {' or '.join(sorted(marker))}"
        raise FileExistsError(
            f"{out} exists and holds other files ({shown}); {what} writes a new or empty "
            f"folder, or replaces an earlier one of its own whole: choose another -o"
        )


def summary_json(summary: Summary) -> str:
    """A summary as strict JSON text (sorted keys, two-space indent, a final newline):
    the keys it was built or read with (:meth:`Summary.to_json_dict`). An undefined
    statistic (the mean latency of no finished request, the price per million tokens of
    a run that generated none) is null in the model already (the run builds each
    section with it as None: ``sim.results.summary_sections.finite``)."""
    return json.dumps(summary.to_json_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"


def undefined_as_null(value: object) -> object:
    """``value`` (nested dicts, lists and tuples) with every float that is not finite
    replaced by None; other values as they are."""
    if isinstance(value, dict):
        return {k: undefined_as_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [undefined_as_null(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
