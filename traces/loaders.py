"""Read any supported trace file into the canonical table: :func:`load`,
:func:`iter_chunks` (bounded memory) and :func:`load_lengths`.

Contracts:

- The result has every column of :data:`traces.schema.ARROW_SCHEMA` (absent optional
  columns filled with their defaults), is validated row by row, and is sorted by
  ``arrival_s`` (stable, so ties keep file order).
- Formats without request ids (and canonical files without a ``request_id`` column)
  number data rows from 0 in file order, so ids point back at the source row even after
  sorting or dropping rows.
- Unsorted arrivals are sorted with a :class:`TraceWarning`; with ``strict=True`` they
  raise :class:`TraceError` naming the first row that goes back in time.
- BurstGPT rows with 0 response tokens are failed requests: dropped with one
  :class:`TraceWarning` giving their count, or kept with ``keep_failed=True``.
- Length-only files have no arrival times: they are drawn from ``arrivals`` (an
  :mod:`traces.arrivals` spec) with a Generator seeded by ``seed``; without ``arrivals``
  they raise :class:`TraceError`.
- Request ids (canonical files that have them) are unique over the whole trace, checked chunk by chunk
  in bounded memory by :class:`traces.ids.UniqueIds`; a repeat names its row.
- Every failure is a :class:`TraceError`; no pyarrow/JSON/Unicode exception escapes.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traces.arrivals import ArrivalSpec, arrival_times
from traces.bounds import MAX_ARRIVAL_S
from traces.errors import TraceError, TraceWarning
from traces.formats import FORMATS, Format, Header, check_columns, detect_format, read_header
from traces.ids import UniqueIds
from traces.readers import iter_raw
from traces.schema import ARROW_SCHEMA
from traces.table import to_frame
from traces.validate import ReadContext, to_canonical

DEFAULT_CHUNK_ROWS = 1_000_000


class ChunksOverlap(TraceError):
    """Streamed chunks overlap in time (``iter_tables(..., overlap="raise")``)."""


def _open(path: Path, format: str | None) -> tuple[Format, Header]:
    header = read_header(path)
    if format is None:
        fmt = detect_format(path, header)
    elif format in FORMATS:
        fmt = FORMATS[format]
    else:
        raise TraceError(
            path, "unknown format", expected=f"one of {', '.join(FORMATS)}", got=format
        )
    check_columns(path, fmt, header)
    return fmt, header


def _count_rows(path: Path, fmt: Format, header: Header) -> int:
    return sum(t.num_rows for t in iter_raw(path, fmt, header, DEFAULT_CHUNK_ROWS))


def iter_tables(
    path: str | Path,
    *,
    format: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    strict: bool = False,
    keep_failed: bool = False,
    arrivals: ArrivalSpec | None = None,
    seed: int = 0,
    overlap: Literal["warn", "raise", "ignore"] = "warn",
) -> Iterator[pa.Table]:
    """Canonical Arrow tables of at most ``chunk_rows`` rows, each sorted by arrival.

    Chunks are in file order. A chunk that starts before the previous one ended cannot
    be merged; ``overlap`` says what happens: ``"warn"`` (a :class:`TraceWarning`, or
    :class:`TraceError` under ``strict``), ``"raise"`` (:class:`ChunksOverlap`, always)
    or ``"ignore"`` (the caller sorts the whole trace itself).
    """
    path = Path(path)
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    fmt, header = _open(path, format)
    ctx = ReadContext(
        path,
        {"csv": 2, "jsonl": 1}.get(header.container),
        keep_failed=keep_failed,
        container=header.container,
    )
    if fmt.name == "lengths":
        if arrivals is None:
            raise TraceError(
                path,
                "length-only file has no arrival times",
                field="arrivals",
                expected="an arrival process (load(..., arrivals=PoissonArrival(...)) "
                "or --rate on the command line)",
            )
        if not (isinstance(seed, int | np.integer) and seed >= 0):
            raise TraceError(path, "bad seed", field="seed", expected="an integer >= 0", got=seed)
        n = _count_rows(path, fmt, header)
        ctx.arrivals_s = arrival_times(arrivals, np.random.default_rng(seed), num_requests=n)
        if n and ctx.arrivals_s[-1] > MAX_ARRIVAL_S:
            raise TraceError(
                path,
                f"the arrival process puts the last of {n:,} rows at {ctx.arrivals_s[-1]:.3g} s",
                field="arrivals",
                expected=f"arrivals within {MAX_ARRIVAL_S:.0e} s (traces.bounds.MAX_ARRIVAL_S): "
                "a higher rate",
            )
    rows = 0
    last_s = -np.inf
    has_ids = fmt.name == "canonical" and "request_id" in header.columns
    seen = UniqueIds() if has_ids else None  # without ids, rows are numbered 0..n-1
    for raw in iter_raw(path, fmt, header, chunk_rows):
        ctx.row_offset = rows
        table = to_canonical(ctx, fmt, raw)
        if seen is not None:  # before sorting and filtering: index i is row row_offset + i
            seen.add(ctx, table.column("request_id").to_numpy())
        rows += raw.num_rows
        if table.num_rows == 0:
            continue
        table = _sorted(ctx, table, strict, raw.num_rows)
        first = table.column("arrival_s")[0].as_py()
        if first < last_s and overlap != "ignore":
            msg = "arrivals go back in time across chunks"
            if strict or overlap == "raise":
                cls = ChunksOverlap if overlap == "raise" else TraceError
                raise cls(
                    path,
                    msg,
                    row=rows - raw.num_rows,
                    field="arrival_s",
                    expected=f"arrival_s >= {last_s}",
                    got=first,
                )
            warnings.warn(
                f"{path}: {msg} at row {rows - raw.num_rows}; output is sorted per chunk only",
                TraceWarning,
                stacklevel=2,
            )
        last_s = table.column("arrival_s")[-1].as_py()
        yield table
    if rows == 0:
        raise TraceError(
            path,
            "no requests (header only)",
            line=2 if header.container == "csv" else 1,
            expected="at least one data row",
        )
    if ctx.dropped_failed:
        warnings.warn(
            f"{path}: dropped {ctx.dropped_failed} failed request(s) with 0 response "
            "tokens (keep them with keep_failed=True)",
            TraceWarning,
            stacklevel=2,
        )


def _sorted(ctx: ReadContext, table: pa.Table, strict: bool, rows_in: int) -> pa.Table:
    """Sort one chunk (``rows_in`` rows before dropping failed rows) by arrival."""
    arrival = table.column("arrival_s").to_numpy()
    back = np.flatnonzero(arrival[1:] < arrival[:-1])
    if len(back) == 0:
        return table
    i = int(back[0]) + 1
    rid = int(table.column("request_id")[i].as_py())
    if strict:
        raise ctx.error(
            i if table.num_rows == rows_in else rid - ctx.row_offset,
            "arrivals are not sorted",
            field="arrival_s",
            expected=f"arrival_s >= {arrival[i - 1]} (the previous row)",
            got=float(arrival[i]),
        )
    warnings.warn(
        f"{ctx.path}: arrivals not sorted (first at request {rid}); sorted by arrival_s",
        TraceWarning,
        stacklevel=3,
    )
    return table.take(pc.sort_indices(table, sort_keys=[("arrival_s", "ascending")]))


def load_table(
    path: str | Path,
    *,
    format: str | None = None,
    strict: bool = False,
    keep_failed: bool = False,
    arrivals: ArrivalSpec | None = None,
    seed: int = 0,
) -> pa.Table:
    """:func:`load`, as an Arrow table."""
    tables = list(
        iter_tables(
            path,
            format=format,
            strict=strict,
            keep_failed=keep_failed,
            arrivals=arrivals,
            seed=seed,
            overlap="ignore",
        )
    )
    table = pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()
    bounds = [(t.column("arrival_s")[0].as_py(), t.column("arrival_s")[-1].as_py()) for t in tables]
    back = [i for i in range(1, len(bounds)) if bounds[i][0] < bounds[i - 1][1]]
    if back:
        row = sum(t.num_rows for t in tables[: back[0]])
        if strict:
            raise TraceError(
                path,
                "arrivals are not sorted",
                field="arrival_s",
                expected="non-decreasing arrival_s",
                got=f"a chunk starting at row {row} goes back in time",
            )
        warnings.warn(
            f"{path}: arrivals not sorted; sorted by arrival_s", TraceWarning, stacklevel=2
        )
        table = table.take(pc.sort_indices(table, sort_keys=[("arrival_s", "ascending")]))
    return table.combine_chunks()


def load(
    path: str | Path,
    *,
    format: str | None = None,
    strict: bool = False,
    keep_failed: bool = False,
    arrivals: ArrivalSpec | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Read a whole trace file as a canonical, validated DataFrame sorted by arrival.

    ``format``: one of :data:`traces.formats.FORMATS` (``canonical``, ``azure``,
    ``vidur``, ``mooncake``, ``burstgpt``, ``lengths``); ``None`` detects it from the
    header. ``arrivals``/``seed``: the arrival process for length-only files.
    """
    return to_frame(
        load_table(
            path,
            format=format,
            strict=strict,
            keep_failed=keep_failed,
            arrivals=arrivals,
            seed=seed,
        )
    )


def iter_chunks(
    path: str | Path,
    *,
    format: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    strict: bool = False,
    keep_failed: bool = False,
    arrivals: ArrivalSpec | None = None,
    seed: int = 0,
) -> Iterator[pd.DataFrame]:
    """Stream a trace as canonical DataFrames of at most ``chunk_rows`` rows.

    Memory is bounded by the chunk size (plus 8 bytes per row of arrival times for a
    length-only file). Each chunk is validated and sorted; see :func:`iter_tables` for
    what happens when chunks overlap in time. Request ids are checked unique over the
    whole stream (:class:`traces.ids.UniqueIds`).
    """
    for table in iter_tables(
        path,
        format=format,
        chunk_rows=chunk_rows,
        strict=strict,
        keep_failed=keep_failed,
        arrivals=arrivals,
        seed=seed,
    ):
        yield to_frame(table)


def load_lengths(path: str | Path, arrival: ArrivalSpec, seed: int = 0) -> pd.DataFrame:
    """A length-only file (``num_prefill_tokens``, ``num_decode_tokens``) with arrival
    times drawn from ``arrival`` by a Generator seeded with ``seed``."""
    return load(path, format="lengths", arrivals=arrival, seed=seed)


def sample_path(name: str) -> Path:
    """Path of a built-in sample trace shipped in ``traces/samples/`` (e.g. ``bimodal_200.csv``)."""
    path = Path(__file__).parent / "samples" / name
    if not path.is_file():
        available = ", ".join(sorted(p.name for p in path.parent.glob("*") if p.is_file()))
        raise TraceError(path, "no such sample", expected=f"one of {available}")
    return path
