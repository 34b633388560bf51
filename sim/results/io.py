"""RunResult: the frames and summary of one run, written as Parquet + JSON.

Outputs are byte-for-byte reproducible for the same scenario, seed and library
versions: no wall-clock times, no host names, stable column order, sorted JSON keys.
A run directory is written to a temporary sibling and renamed into place, so an
interrupted or failed write leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

FILES = ("requests.parquet", "timeseries.parquet", "events.parquet", "summary.json")


@dataclass(frozen=True)
class RunResult:
    requests: pd.DataFrame
    """One row per request: arrival, admit, first token, finish, status, retries..."""
    timeseries: pd.DataFrame
    """Pool and batch samples: periodic, at every allocation failure, and final."""
    events: pd.DataFrame
    """Allocation failures, preemptions and restarts with the pool state at the time."""
    summary: dict[str, Any]

    def write(self, out_dir: str | Path) -> Path:
        """Write the four files into ``out_dir``, replacing a previous run there. A
        directory holding anything else is never touched (FileExistsError)."""
        out = Path(out_dir)
        check_replaceable(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            for name, frame in (
                ("requests", self.requests),
                ("timeseries", self.timeseries),
                ("events", self.events),
            ):
                table = pa.Table.from_pandas(frame, preserve_index=False)
                table = table.replace_schema_metadata(None)
                pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
            (tmp / "summary.json").write_text(summary_json(self.summary))
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700; a run folder is ordinary
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out


def check_replaceable(out: Path) -> None:
    """Raise unless ``out`` is absent or an earlier run's directory (only our files)."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise FileExistsError(f"{out} exists and is not a directory")
    extra = sorted(p.name for p in out.iterdir() if p.name not in FILES)
    if extra or out.resolve() == Path.cwd().resolve():
        shown = ", ".join(extra[:3]) or "the working directory"
        raise FileExistsError(
            f"{out} exists and holds other files ({shown}); "
            f"refusing to replace it: choose a new or empty directory"
        )


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n"


def read_result(out_dir: str | Path) -> RunResult:
    out = Path(out_dir)
    return RunResult(
        pd.read_parquet(out / "requests.parquet"),
        pd.read_parquet(out / "timeseries.parquet"),
        pd.read_parquet(out / "events.parquet"),
        json.loads((out / "summary.json").read_text()),
    )
