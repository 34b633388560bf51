"""The OpenMetrics text format's pieces that every family writer of
:mod:`sim.telemetry.openmetrics` shares (its counters on the scrape clock and its
``ALERTS`` too): a family's header, label values and sample values as the format writes
them, timestamps, and the Parquet batches a family reads."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import pyarrow.parquet as pq

BATCH_ROWS = 65_536
"""Rows read from a Parquet file at a time."""


@dataclass(frozen=True)
class Family:
    """One metric family: its OpenMetrics name (without ``_total`` for a counter), type,
    unit (``""``: none) and help, and the timeseries column it reads (``""``: none)."""

    name: str
    kind: str
    unit: str
    help: str
    column: str


def escape(value: str) -> str:
    """A label value as OpenMetrics writes it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: integers without a point, ``NaN``, ``+Inf``, ``-Inf``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def timestamps_ms(times_s: np.ndarray, origin_s: float) -> np.ndarray:
    """Simulated seconds -> integer Unix milliseconds."""
    return np.rint((np.asarray(times_s, dtype=float) + origin_s) * 1000.0).astype(np.int64)


def stamp(ms: int) -> str:
    """Unix milliseconds as OpenMetrics seconds with three decimals."""
    return f"{ms // 1000}.{ms % 1000:03d}"


def header(out: TextIO, family: Family) -> None:
    out.write(f"# HELP {family.name} {family.help}\n# TYPE {family.name} {family.kind}\n")
    if family.unit:
        out.write(f"# UNIT {family.name} {family.unit}\n")


def batches(path: Path, columns: Sequence[str]) -> Iterator[dict[str, np.ndarray]]:
    with pq.ParquetFile(path) as f:
        for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=list(columns)):
            yield {c: batch.column(c).to_numpy(zero_copy_only=False) for c in columns}


class Labels:
    """``{replica="3",pool="a100"}`` per replica, built once each."""

    def __init__(self, pool: Callable[[int], str]) -> None:
        self._pool = pool
        self._text: dict[int, str] = {}

    def __call__(self, replica: int) -> str:
        text = self._text.get(replica)
        if text is None:
            text = f'{{replica="{replica}",pool="{escape(self._pool(replica))}"}}'
            self._text[replica] = text
        return text
