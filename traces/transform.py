"""Plain functions that reshape a canonical trace (DataFrame in, new DataFrame out).

Each returns a canonical frame sorted by ``arrival_s`` and never modifies its input.
Randomness (:func:`sample`) comes from a Generator seeded by the caller's ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traces.bounds import check_rate_scale, check_span, check_tile
from traces.table import from_frame, to_frame


def _sorted(table: pa.Table) -> pd.DataFrame:
    order = pc.sort_indices(table, sort_keys=[("arrival_s", "ascending")])
    return to_frame(table.take(order).combine_chunks())


def _shift_hashes(table: pa.Table, offset: int) -> pa.Array:
    hashes = table.column("prefix_hashes").combine_chunks()
    values = pc.add(pc.list_flatten(hashes), pa.scalar(offset, pa.int64()))
    offsets = (
        hashes.offsets if hashes.offset == 0 else pc.subtract(hashes.offsets, hashes.offsets[0])
    )
    return pa.ListArray.from_arrays(offsets, values)


def rescale_rate(df: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Compress time by ``factor`` (2.0 = twice the request rate): arrival_s / factor.
    Raises :class:`traces.bounds.BoundError` (a ``ValueError``) unless ``factor`` is
    finite and > 0 and the last arrival stays within ``MAX_ARRIVAL_S``."""
    last_s = float(df["arrival_s"].max()) if len(df) else 0.0
    check_rate_scale(factor, last_s if math.isfinite(last_s) else math.inf)
    out = to_frame(from_frame(df))
    out["arrival_s"] = out["arrival_s"] / factor
    return out


def rescale_to_rate(df: pd.DataFrame, rate_per_s: float) -> pd.DataFrame:
    """Rescale time so the mean rate (rows / span) becomes ``rate_per_s``."""
    span = float(df["arrival_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
    if span <= 0:
        raise ValueError("a trace with zero span has no rate to rescale")
    return rescale_rate(df, rate_per_s / (len(df) / span))


def time_window(
    df: pd.DataFrame, start_s: float, end_s: float, *, rebase: bool = True
) -> pd.DataFrame:
    """Requests arriving in ``[start_s, end_s)``; with ``rebase`` arrivals start from 0 at ``start_s``."""
    if end_s <= start_s:
        raise ValueError("end_s must be > start_s")
    table = from_frame(df)
    arrival = table.column("arrival_s").to_numpy()
    table = table.filter(pa.array((arrival >= start_s) & (arrival < end_s)))
    out = _sorted(table)
    if rebase:
        out["arrival_s"] = out["arrival_s"] - start_s
    return out


def _extent(values: pa.Array | pa.ChunkedArray) -> tuple[int, int] | None:
    """(min, max - min + 1) of the non-null values: shifting by multiples of the second
    value moves them to disjoint ranges. None when there are no values."""
    bounds = pc.min_max(values).as_py() if len(values) else None
    if not bounds or bounds["min"] is None:
        return None
    return int(bounds["min"]), int(bounds["max"]) - int(bounds["min"]) + 1


def _shift(table: pa.Table, name: str, offset: int) -> pa.Table:
    """Add ``offset`` to an integer column (``prefix_hashes``: to every hash)."""
    i = table.column_names.index(name)
    field = table.schema.field(i)  # keeps the schema's nullability, so tables still concat
    if name == "prefix_hashes":
        return table.set_column(i, field, _shift_hashes(table, offset))
    return table.set_column(i, field, pc.add(table.column(name), pa.scalar(offset, pa.int64())))


def tile(
    df: pd.DataFrame,
    duration_s: float,
    *,
    period_s: float | None = None,
    fresh_prefixes: bool = True,
) -> pd.DataFrame:
    """Repeat a trace back to back until ``duration_s`` (e.g. one hour of Azure -> six days).

    Copy k is shifted by ``k * period_s`` (default: the span plus one mean gap, so the seam
    looks like any other gap) and keeps only arrivals before ``first + duration_s``. Copies
    get fresh request ids (shifted by k times the id range) and, with ``fresh_prefixes``,
    fresh prefix hashes and session ids the same way, so no copy hits another's prefixes.

    Raises :class:`traces.bounds.BoundError` (a ``ValueError``), before copying, when the
    copies would hold more than ``MAX_REQUESTS`` rows or reach past ``MAX_ARRIVAL_S``.
    """
    table = from_frame(df)
    n = table.num_rows
    if n == 0 or not duration_s > 0:
        raise ValueError("tile needs a non-empty trace and duration_s > 0")
    arrival = table.column("arrival_s").to_numpy()
    first, span = float(arrival.min()), float(arrival.max() - arrival.min())
    if period_s is None:
        period_s = span + (span / (n - 1) if n > 1 and span > 0 else 1.0)
    if not (math.isfinite(period_s) and period_s > 0):
        raise ValueError("period_s must be a finite number > 0")
    check_tile(n, duration_s, period_s)
    check_span(first + duration_s, "duration_s", duration_s, "tiling from the first arrival")
    steps = {"request_id": _extent(table.column("request_id"))}
    if fresh_prefixes:
        steps["prefix_hashes"] = _extent(pc.list_flatten(table.column("prefix_hashes")))
        steps["session_id"] = _extent(table.column("session_id"))
    copies = []
    for k in range(int(np.ceil(duration_s / period_s))):
        c = table.set_column(1, table.schema.field(1), pa.array(arrival + k * period_s))
        for name, extent in steps.items():
            if k and extent is not None:
                c = _shift(c, name, k * extent[1])
        copies.append(c)
    out = pa.concat_tables(copies)
    out = out.filter(pc.less(out.column("arrival_s"), first + duration_s))
    return _sorted(out)


def sample(df: pd.DataFrame, fraction: float, seed: int) -> pd.DataFrame:
    """Keep each request independently with probability ``fraction`` (ids unchanged)."""
    if not 0 <= fraction <= 1:
        raise ValueError("fraction must be in [0, 1]")
    table = from_frame(df)
    keep = np.random.default_rng(seed).random(table.num_rows) < fraction
    return _sorted(table.filter(pa.array(keep)))


def filter_requests(
    df: pd.DataFrame,
    *,
    min_prompt_tokens: int = 0,
    max_prompt_tokens: int | None = None,
    min_output_tokens: int = 0,
    max_output_tokens: int | None = None,
    where: Callable[[pd.DataFrame], pd.Series] | None = None,
) -> pd.DataFrame:
    """Requests whose lengths lie in the given inclusive bounds and, if given, where
    ``where(df)`` is True (a boolean Series aligned with ``df``)."""
    frame = to_frame(from_frame(df))
    p, o = frame["prompt_tokens"], frame["output_tokens"]
    mask = (p >= min_prompt_tokens) & (o >= min_output_tokens)
    if max_prompt_tokens is not None:
        mask &= p <= max_prompt_tokens
    if max_output_tokens is not None:
        mask &= o <= max_output_tokens
    if where is not None:
        mask &= where(frame).to_numpy(dtype=bool)
    return frame[mask.to_numpy()].reset_index(drop=True)


def merge(*dfs: pd.DataFrame, share_prefixes: bool = False) -> pd.DataFrame:
    """Interleave traces by arrival. Request ids (and, unless ``share_prefixes``, prefix
    hashes and session ids) of each input are moved past those of the inputs before it,
    so they stay unique; ties keep input order."""
    names = ["request_id"] + ([] if share_prefixes else ["prefix_hashes", "session_id"])
    base = dict.fromkeys(names, 0)
    tables = []
    for df in dfs:
        t = from_frame(df)
        if t.num_rows == 0:
            continue
        for name in names:
            col = t.column(name)
            extent = _extent(pc.list_flatten(col) if name == "prefix_hashes" else col)
            if extent is not None:
                t = _shift(t, name, base[name] - extent[0])
                base[name] += extent[1]
        tables.append(t)
    if not tables:
        raise ValueError("merge needs at least one non-empty trace")
    return _sorted(pa.concat_tables(tables))
