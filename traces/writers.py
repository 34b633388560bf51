"""Write canonical traces as CSV, JSONL or Parquet, chosen by the output's extension.

Writes are atomic: data goes to a temporary file ``.NAME.PID.RANDOM.tmp`` in the
destination's folder, which replaces the destination (``os.replace``) only once
everything was written; on any error the temporary file is removed, so no partial output
is ever left behind. A temporary that a killed process left (SIGKILL cannot be caught)
is removed by the next write to the same destination, once its PID is no longer alive.

Encodings: CSV writes ``prefix_hashes`` as space-separated integers ("" for none) and a
missing ``session_id`` as an empty cell; JSONL writes one object per line with
``prefix_hashes`` as a JSON list and ``session_id`` as null; Parquet stores
:data:`traces.schema.ARROW_SCHEMA` as is. Every writer's output reads back
(:func:`traces.load`) to an identical table.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Final

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from traces.errors import TraceError
from traces.schema import ARROW_SCHEMA
from traces.table import from_frame

EXTENSIONS: Final = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}


def output_container(path: str | Path) -> str:
    """The container for ``path`` from its extension; TraceError for an unknown one."""
    ext = Path(path).suffix.lower()
    if ext not in EXTENSIONS:
        raise TraceError(
            path,
            "unknown output extension",
            expected="one of .csv, .jsonl, .parquet",
            got=ext or "(none)",
        )
    return EXTENSIONS[ext]


TMP_SUFFIX: Final = ".tmp"
_STEM_LIMIT: Final = 120  # longer names are shortened in the temporary's name
_TMP_RE: Final = re.compile(r"\.(\d+)\.[^.]+\.tmp$")


def _stem(name: str) -> str:
    """The target's name as used in its temporaries' names (a long name is cut and
    keeps a digest, so ``.NAME.PID.RANDOM.tmp`` stays a valid file name)."""
    if len(name) <= _STEM_LIMIT:
        return name
    return f"{name[:80]}~{hashlib.sha1(name.encode()).hexdigest()[:12]}"


def temp_prefix(path: Path) -> str:
    """``.NAME.PID.``: the start of the name of this process's temporaries for ``path``."""
    return f".{_stem(path.name)}.{os.getpid()}."


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries (``.NAME.PID.RANDOM.tmp`` beside ``path``) that processes
    no longer alive left behind (a SIGKILL mid-write); returns what was removed."""
    removed = []
    pattern = f".{glob.escape(_stem(path.name))}.*{TMP_SUFFIX}"
    for tmp in path.parent.glob(pattern):
        m = _TMP_RE.search(tmp.name)
        if m is None or tmp.name[: m.start()] != f".{_stem(path.name)}" or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _folder_error(path: Path) -> TraceError | None:
    """Why ``path``'s folder cannot take a new file, or None."""
    folder = path.parent
    try:
        st = folder.stat()
    except FileNotFoundError:
        return TraceError(
            path, "output folder does not exist", expected="an existing folder", got=str(folder)
        )
    except OSError as exc:  # a name too long, a folder that may not be searched, a loop
        return TraceError(path, f"cannot use output folder ({exc.strerror or exc})")
    if not stat.S_ISDIR(st.st_mode):
        return TraceError(
            path, "output folder is not a folder", expected="an existing folder", got=str(folder)
        )
    return None


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only on success.

    The temporary is ``.NAME.PID.RANDOM.tmp`` in the target's folder, so ``os.replace``
    is atomic and a temporary left by a killed process is recognisable: each call first
    removes those of dead processes for the same target
    (:func:`remove_stale_temporaries`). Any ``OSError`` (missing folder, a name too long,
    no permission, disk full, ``path`` is a folder) becomes a :class:`TraceError` naming
    ``path``, never the temporary file.
    """
    path = Path(path)
    problem = _folder_error(path)
    if problem is not None:
        raise problem
    try:
        remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise TraceError(path, f"cannot write file ({exc.strerror or exc})") from None
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise TraceError(path, f"cannot write file ({exc.strerror or exc})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _csv_table(table: pa.Table) -> pa.Table:
    hashes = table.column("prefix_hashes").combine_chunks()
    as_text = pc.binary_join(pc.cast(hashes, pa.list_(pa.string())), " ")
    return table.set_column(
        table.column_names.index("prefix_hashes"), "prefix_hashes", pc.fill_null(as_text, "")
    )


def _jsonl_lines(table: pa.Table) -> str:
    """One JSON object per row; Arrow -> Python keeps int64 exact (no float detour)."""
    dumps = json.dumps
    lines: list[str] = []
    for batch in table.to_batches(max_chunksize=65_536):
        lines.extend(dumps(record) + "\n" for record in batch.to_pylist())
    for i, record in enumerate(lines):  # empty lists, not nulls, for rows without hashes
        if '"prefix_hashes": null' in record:
            lines[i] = record.replace('"prefix_hashes": null', '"prefix_hashes": []')
    return "".join(lines)


class _Sink:
    """Appends canonical tables to one open output of a given container."""

    def __init__(self, container: str, path: Path) -> None:
        self.container = container
        self.path = path
        self._parquet: pq.ParquetWriter | None = None
        self._csv: pcsv.CSVWriter | None = None
        self._text: IO[str] | None = None

    def write(self, table: pa.Table) -> None:
        if self.container == "parquet":
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self.path, ARROW_SCHEMA, compression="zstd")
            self._parquet.write_table(table)
        elif self.container == "csv":
            text_table = _csv_table(table)
            if self._csv is None:
                self._csv = pcsv.CSVWriter(
                    self.path,
                    text_table.schema,
                    write_options=pcsv.WriteOptions(quoting_style="needed"),
                )
            self._csv.write_table(text_table)
        else:
            if self._text is None:
                self._text = self.path.open("w", encoding="utf-8")
            self._text.write(_jsonl_lines(table))

    def close(self) -> None:
        for closer in (self._parquet, self._csv, self._text):
            if closer is not None:
                closer.close()
        if self._parquet is None and self._csv is None and self._text is None:
            raise TraceError(self.path, "nothing to write (no requests)")


def write_tables(tables: Iterable[pa.Table], path: str | Path) -> int:
    """Write canonical tables, in order, to ``path`` atomically; returns the row count."""
    container = output_container(path)
    rows = 0
    with atomic_path(path) as tmp:
        sink = _Sink(container, tmp)
        try:
            for table in tables:
                if table.num_rows:
                    sink.write(table.select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA))
                    rows += table.num_rows
        finally:
            if rows:
                sink.close()
        if not rows:
            raise TraceError(path, "nothing to write (no requests)")
    return rows


def write(df: pd.DataFrame | pa.Table, path: str | Path) -> int:
    """Validate a canonical DataFrame (or table) and write it to ``path``; returns rows."""
    table = from_frame(df) if isinstance(df, pd.DataFrame) else df
    return write_tables([table], path)
