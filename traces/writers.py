"""Write canonical traces as CSV, JSONL or Parquet, chosen by the output's extension.

Writes are atomic (:func:`traces.atomic.atomic_path`, the writer every output shares):
data goes to a temporary file ``.NAME.PID.RANDOM.tmp`` in the destination's folder,
which replaces the destination (``os.replace``) only once everything was written; on
any error the temporary file is removed, so no partial output is ever left behind. A
temporary that a killed process left (SIGKILL cannot be caught) is removed by the next
write to the same destination, once its PID is no longer alive. A destination that is
not a regular file is never replaced (:mod:`traces.atomic`: a device or a FIFO being
read is written through, anything else refused).

Encodings: CSV writes ``prefix_hashes`` as space-separated integers ("" for none) and a
missing ``session_id`` as an empty cell; JSONL writes one object per line with
``prefix_hashes`` as a JSON list and ``session_id`` as null; Parquet stores
:data:`traces.schema.ARROW_SCHEMA` as is. Every writer's output reads back
(:func:`traces.load`) to an identical table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Final

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from traces.atomic import atomic_path
from traces.errors import TraceError
from traces.schema import ARROW_SCHEMA
from traces.table import from_frame

__all__ = [
    "EXTENSIONS",
    "output_container",
    "write",
    "write_tables",
]

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
