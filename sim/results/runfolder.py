"""The one reader of a run folder (``fragsim run -o OUT/``): every command that reads a
run (``report``, ``alerts show``, a resumed sweep, the API's ``read_result``) reads it
here, and a folder that is not a readable run is one :class:`RunFolderError` line naming
the folder or the file and what is wrong -- never a parser's traceback.

What is checked, in order:

* the folder exists, is a folder and holds the four files of every run
  (``sim.results.io.FILES``);
* ``summary.json`` is UTF-8 strict JSON (no ``NaN``: fragsim writes undefined statistics
  as ``null``) holding an object with the sections every summary has
  (:data:`SUMMARY_SECTIONS`), at most :data:`MAX_SUMMARY_BYTES`;
* each table is a readable Parquet file holding its own table's columns
  (:data:`TABLE_COLUMNS`): a table copied over another is named as such;
* times: the columns every row has (:data:`EVENT_TIMES`: an arrival, a sample's or an
  event's instant) are numbers, finite and >= 0; the others (:data:`OPTIONAL_TIMES`: a
  request's admission, first token and finish, an uptime) are NaN (never happened) or
  >= 0. A negative or NaN instant is not drawn: the folder is damaged.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import clip

if TYPE_CHECKING:
    import pandas as pd

    from sim.results.io import RunResult

MAX_SUMMARY_BYTES = 64 << 20
"""A summary is a few kilobytes (a fleet's lists its replicas); past 64 MiB it is
refused unread."""

SUMMARY_SECTIONS: dict[str, type] = {
    "requests": dict,
    "throughput": dict,
    "latency_s": dict,
    "failures": dict,
    "memory": dict,
    "alerts": list,
    "scenario": str,
    "allocator": str,
}
"""The keys every summary has, with their JSON types (object, array, string)."""

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "requests": (
        "request_id",
        "replica",
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "generated_tokens",
        "admit_s",
        "first_token_s",
        "finish_s",
        "status",
    ),
    "timeseries": (
        "time_s",
        "replica",
        "trigger",
        "up",
        "uptime_s",
        "capacity_tokens",
        "free_tokens",
        "largest_free_extent_tokens",
        "largest_contiguous_free_block_ratio",
    ),
    "events": ("time_s", "replica", "kind", "request_id", "free_share", "cause"),
    "fleet": ("time_s", "trigger", "replicas", "replica_hours", "cost_usd"),
    "alerts": ("time_s", "replica", "alert", "severity", "state", "value"),
}
"""The columns each table must hold (it may hold more: later versions add columns)."""

EVENT_TIMES: dict[str, tuple[str, ...]] = {
    "requests": ("arrival_s",),
    "timeseries": ("time_s",),
    "events": ("time_s",),
    "fleet": ("time_s",),
    "alerts": ("time_s",),
}
"""Instants every row has: finite numbers >= 0."""

OPTIONAL_TIMES: dict[str, tuple[str, ...]] = {
    "requests": ("admit_s", "first_token_s", "finish_s"),
    "timeseries": ("uptime_s",),
    "events": ("uptime_s",),
}
"""Times a row may lack (NaN: never admitted, never finished; no replica): else >= 0."""


class RunFolderError(ValueError):
    """A folder that is not a readable run; the message is one line naming the folder
    or file and what is wrong."""


def read_run(out_dir: str | Path) -> RunResult:
    """The run written to ``out_dir``, checked as the module docstring says; raises
    :class:`RunFolderError`."""
    from sim.results.io import RunResult

    out = check_run_folder(out_dir)
    summary = read_summary(out / "summary.json")
    tables = {name: read_table(out / f"{name}.parquet", name) for name in TABLE_COLUMNS}
    optional = {name: tables[name] for name in ("fleet", "alerts")}
    requests, timeseries, events = (tables[n] for n in ("requests", "timeseries", "events"))
    assert requests is not None and timeseries is not None and events is not None
    return RunResult(requests, timeseries, events, summary, **optional)


def check_run_folder(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path when it is a folder holding a run's four files; else
    :class:`RunFolderError` (also for a folder that cannot be listed)."""
    from sim.results.io import FILES

    out = Path(out_dir)
    name = clip(str(out))
    try:
        if not out.exists():
            raise RunFolderError(f"{name}: no such run folder (fragsim run -o writes one)")
        if not out.is_dir():
            raise RunFolderError(f"{name}: not a run folder (a file)")
        missing = [f for f in FILES if not (out / f).is_file()]
    except OSError as e:
        raise RunFolderError(f"{name}: cannot read: {e.strerror or e}") from None
    if missing:
        raise RunFolderError(f"{name}: not a run folder: no {', '.join(missing)}")
    return out


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not JSON (fragsim writes an undefined statistic as null)")


def read_summary(path: Path) -> dict[str, Any]:
    """A run's ``summary.json``, checked (module docstring); :class:`RunFolderError`
    naming the file otherwise."""
    name = clip(str(path))
    try:
        size = path.stat().st_size
        if size > MAX_SUMMARY_BYTES:
            raise RunFolderError(
                f"{name}: {size:,} bytes; a summary is at most {MAX_SUMMARY_BYTES:,} bytes"
            )
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise RunFolderError(f"{name}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RunFolderError(f"{name}: not UTF-8 text (byte offset {e.start})") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise RunFolderError(
            f"{name}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except (ValueError, RecursionError) as e:
        raise RunFolderError(f"{name}: not valid JSON: {clip(str(e), 200)}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{name}: expected a JSON object, got {_json_type(data)}")
    for key, kind in SUMMARY_SECTIONS.items():
        if key not in data:
            raise RunFolderError(f"{name}: not a fragsim summary: no {key!r}")
        if not isinstance(data[key], kind):
            raise RunFolderError(
                f"{name}: key {key!r}: expected {_json_name(kind)}, got {_json_type(data[key])}"
            )
    return data


_JSON_NAMES: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}


def _json_name(kind: type) -> str:
    return _JSON_NAMES[kind]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    for kind in (dict, list, str, bool):
        if isinstance(value, kind):
            return _json_name(kind) if kind is not bool else "a boolean"
    return "a number"


def read_table(path: Path, name: str) -> pd.DataFrame | None:
    """Table ``name`` of a run from ``path`` (None when a fleet table is absent),
    checked (module docstring); :class:`RunFolderError` naming the file otherwise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shown = clip(str(path))
    if name in ("fleet", "alerts") and not path.exists():
        return None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        reason = re.sub(r"^Could not open Parquet input source '.*?':\s*", "", str(e))
        reason = " ".join(reason.split()).split(". ")[0]
        raise RunFolderError(
            f"{shown}: not a readable Parquet file (damaged or truncated): {clip(reason, 200)}"
        ) from None
    columns = set(table.column_names)
    missing = [c for c in TABLE_COLUMNS[name] if c not in columns]
    if missing:
        others = [n for n, cols in TABLE_COLUMNS.items() if n != name and set(cols) <= columns]
        what = f" (it holds the {others[0]} table's columns)" if others else ""
        raise RunFolderError(
            f"{shown}: not the {name} table: no column {', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}{what}"
        )
    frame = table.to_pandas()
    check_times(frame, shown, name)
    return frame


def check_times(frame: pd.DataFrame, shown: str, name: str) -> None:
    """Refuse a table whose times are not numbers, negative, or (for an instant every
    row has) NaN or infinite; the message names the file, column and row."""
    import numpy as np

    if not len(frame):
        return
    for column in (*EVENT_TIMES.get(name, ()), *OPTIONAL_TIMES.get(name, ())):
        series = frame[column]
        if series.dtype.kind not in "fiu":
            raise RunFolderError(
                f"{shown}: column {column}: holds {series.dtype} values; expected seconds "
                "(numbers): the run folder is damaged"
            )
        values = series.to_numpy(dtype=float)
        required = column in EVENT_TIMES.get(name, ())
        bad = ~(np.isfinite(values) & (values >= 0)) if required else ~(values >= 0)
        if not required:
            bad &= ~np.isnan(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = values[row]
            got = "NaN" if math.isnan(value) else f"{value:g}"
            expected = "a time in seconds >= 0" + ("" if required else " (or NaN: never)")
            raise RunFolderError(
                f"{shown}: column {column}: row {row} holds {got}; expected {expected}: the "
                "run folder is damaged"
            )
