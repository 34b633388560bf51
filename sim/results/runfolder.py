"""The one reader of a run folder (``fragsim run -o OUT/``): every command that reads a
run (``report``, ``alerts show``, ``alerts export --run``, ``export openmetrics``,
``compare``, a resumed sweep, the API's ``read_result``) reads it here, and a folder no
run could have written is one :class:`RunFolderError` line naming the folder or the
file, and the field, column or row, and what is wrong -- never a parser's traceback, and
never a result computed from it.

What is checked, in order:

* the folder exists, is a folder and holds the four files of every run
  (``sim.results.io.FILES``);
* ``summary.json`` is UTF-8 strict JSON (no ``NaN``: fragsim writes undefined statistics
  as ``null``) holding an object, at most :data:`MAX_SUMMARY_BYTES`, that a run could
  have written (:mod:`sim.results.summary_model`: each field's type and range);
* the tables match the summary: a fleet run (a summary with a ``fleet`` section) wrote
  ``fleet.parquet`` and ``alerts.parquet``; a single replica's run wrote neither;
* each table is a readable Parquet file holding its own table's columns, of the right
  types, with values a run writes (:mod:`sim.results.table_schema`: times finite and
  >= 0, ratios in [0, 1], counts >= 0, ...); :func:`read_run` loads them whole,
  :func:`check_run` reads them a batch at a time (for commands that stream);
* each table's SHA-256 is the one the summary records (``digests``, by file name, written
  by the run: :mod:`sim.results.digests`), so a table edited or truncated after the run is
  told apart from a folder written before fragsim recorded digests, which is read with
  one :class:`RunFolderNote` (printed ``note: ...``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from sim.errors import clip
from sim.results.digests import file_sha256
from sim.results.folder_errors import RunFolderError, RunFolderNote
from sim.results.io import FILES, RunResult
from sim.results.summary_check import json_type, parse_summary
from sim.results.summary_model import Summary
from sim.results.table_schema import REQUIRED, check_batch, check_schema, scan_table, unreadable

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunFolderError", "RunFolderNote", "check_run", "read_run", "read_summary"]

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
"""The top-level keys every summary has, with their JSON types (object, array, string)."""

TABLE_COLUMNS = REQUIRED
"""The columns each table must hold (``sim.results.table_schema.REQUIRED``)."""
TABLES = ("requests", "timeseries", "events", "fleet", "alerts")
"""A run's tables, in the order they are checked."""
FLEET_TABLES = ("fleet", "alerts")
"""The tables only a fleet run writes."""


def read_result(out_dir: str | Path) -> RunResult:
    """The run written to ``out_dir`` (``sim.read_result``), checked by the one reader of
    a run folder (:func:`read_run`): a folder that is not a readable run raises
    ``RunFolderError`` (a ValueError), one line naming the file and what is wrong."""
    return read_run(out_dir)


def read_run(out_dir: str | Path) -> RunResult:
    """The run written to ``out_dir``, checked as the module docstring says, its tables
    loaded whole; raises :class:`RunFolderError`."""
    out, summary = _summary_of(out_dir)
    bound = capacity_bound(summary)
    tables = {
        name: read_table(out / f"{name}.parquet", name, bound)
        for name in present_tables(out, summary)
    }
    check_digests(out, summary)
    optional = {name: tables.get(name) for name in FLEET_TABLES}
    requests, timeseries, events = (tables[n] for n in ("requests", "timeseries", "events"))
    assert requests is not None and timeseries is not None and events is not None
    return RunResult(requests, timeseries, events, summary, **optional)


def check_run(
    out_dir: str | Path, need: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[Path, Summary]:
    """The folder and summary of the run written to ``out_dir``, every table checked a
    batch at a time (module docstring) without loading any whole. ``need``: the columns
    a command reads, by table; a table it names that the run lacks is refused by name
    (a fleet table of a single replica's run excepted: the run has none)."""
    out, summary = _summary_of(out_dir)
    bound = capacity_bound(summary)
    need = need or {}
    for name in present_tables(out, summary):
        scan_table(out / f"{name}.parquet", name, need.get(name, ()), bound)
    check_digests(out, summary)
    return out, summary


def _summary_of(out_dir: str | Path) -> tuple[Path, Summary]:
    out = check_run_folder(out_dir)
    summary = read_summary(out / "summary.json")
    return out, summary


def present_tables(out: Path, summary: Summary) -> list[str]:
    """The tables of the run in ``out``, as its summary says it wrote them: refuses a
    fleet run without its fleet tables, and a single replica's run with them."""
    fleet_run = summary.fleet is not None
    shown = clip(str(out / "summary.json"))
    names = []
    for name in TABLES:
        path = out / f"{name}.parquet"
        exists = path.is_file()
        if name in FLEET_TABLES and not fleet_run:
            if exists:
                raise RunFolderError(
                    f"{clip(str(path))}: a fleet run's table, but {shown} has no fleet "
                    "section (a single replica's run writes no fleet tables)"
                )
            continue
        if not exists:
            raise RunFolderError(
                f"{clip(str(out))}: no {name}.parquet (every run "
                f"{'with a fleet section in summary.json ' if name in FLEET_TABLES else ''}"
                "writes one)"
            )
        names.append(name)
    return names


def capacity_bound(summary: Summary) -> int | None:
    """The largest KV capacity (tokens) the summary records, the run's or a pool's (a
    timeseries row's capacity is at most that); None where it records none."""
    found = [summary.kv_capacity_tokens]
    if summary.fleet is not None:
        found += [p.kv_capacity_tokens for p in summary.fleet.pools]
    numbers = [v for v in found if v is not None]
    return max(numbers) if numbers else None


def check_digests(out: Path, summary: Summary) -> None:
    """Refuse a table whose SHA-256 is not the one the summary records, a table the
    summary records that is gone, or one it does not record; a summary recording none
    (a run written before fragsim recorded them) is one :class:`RunFolderNote`."""
    recorded = summary.digests
    shown = clip(str(out / "summary.json"))
    tables = [f"{n}.parquet" for n in TABLES if (out / f"{n}.parquet").is_file()]
    if recorded is None:
        warnings.warn(
            RunFolderNote(
                f"{shown} records no table digests (a run written before fragsim recorded "
                "them): its tables are checked, but an edit after the run cannot be told"
            ),
            stacklevel=3,
        )
        return
    for name in tables:
        path = out / name
        if name not in recorded:
            raise RunFolderError(
                f"{clip(str(path))}: not one of the run's tables ({shown} records no "
                f"digest for it): the run folder is damaged"
            )
        try:
            got = file_sha256(path)
        except OSError as e:
            raise RunFolderError(f"{clip(str(path))}: cannot read: {e.strerror or e}") from None
        if got != recorded[name]:
            raise RunFolderError(
                f"{clip(str(path))}: its SHA-256 is not the one {shown} records: the table "
                "was changed after the run (edited, truncated or copied over)"
            )
    gone = [name for name in recorded if name not in tables]
    if gone:
        raise RunFolderError(
            f"{clip(str(out))}: no {', '.join(gone)} ({shown} records its digest: the run wrote it)"
        )


def check_run_folder(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path when it is a folder holding a run's four files; else
    :class:`RunFolderError` (also for a folder that cannot be listed)."""
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


def read_summary(path: Path) -> Summary:
    """A run's ``summary.json`` as the typed summary, checked (module docstring);
    :class:`RunFolderError` naming the file (and the field) otherwise."""
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
        raise RunFolderError(f"{name}: expected a JSON object, got {json_type(data)}")
    for key, kind in SUMMARY_SECTIONS.items():
        if key in data and not isinstance(data[key], kind):
            raise RunFolderError(
                f"{name}: key {key!r}: expected {json_type(kind())}, got {json_type(data[key])}"
            )
    return parse_summary(data, name)


def read_table(path: Path, name: str, capacity_tokens: int | None = None) -> pd.DataFrame:
    """Table ``name`` of a run from ``path``, loaded whole and checked (module
    docstring); :class:`RunFolderError` naming the file, column and row otherwise."""
    shown = clip(str(path))
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise unreadable(shown, e) from None
    check_schema(table.schema, shown, name)
    check_batch(table, shown, name, 0, capacity_tokens)
    return table.to_pandas()
