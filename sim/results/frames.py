"""Result tables from the engine's records: ``frame`` (rows -> DataFrame, fast) and
``request_frame`` (the requests table from the request records). Compiled with the
engine (``sim/build.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sim.engine.batch import Group

REQUEST_COLUMNS = (
    "request_id",
    "replica",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "num_seqs",
    "admit_s",
    "first_token_s",
    "finish_s",
    "status",
    "preemptions",
    "retries",
    "peak_reserved_tokens",
    "cached_tokens",
)


def frame(rows: list[tuple[object, ...]], columns: tuple[str, ...]) -> pd.DataFrame:
    """``pd.DataFrame.from_records(rows, columns=columns)``, the same frame, faster.

    A column of only bools, or only ints and floats, is converted by numpy in one C loop
    (bool, int64 or float64: the dtypes pandas infers too); any other column (strings,
    None, mixtures) goes through pandas' own inference, as ``from_records`` would."""
    if not rows:
        return pd.DataFrame.from_records(rows, columns=list(columns))
    data: dict[str, Any] = {}
    for k, name in enumerate(columns):
        values = [row[k] for row in rows]
        array = _numeric(values)
        data[name] = _inferred(name, values) if array is None else array
    return pd.DataFrame(data, columns=list(columns))


def _numeric(values: list[object]) -> Any:
    """``values`` as a 1-D numpy array when they are all bools, or all ints and floats
    (the dtypes ``from_records`` infers for those); None otherwise."""
    types = set(map(type, values))
    if not (types == {bool} or (types and types <= {int, float})):
        return None
    try:
        array = np.array(values)
    except (ValueError, OverflowError):
        return None
    return array if array.ndim == 1 and array.dtype.kind in "bif" else None


def request_frame(groups: list[Group], replicas: list[int]) -> pd.DataFrame:
    """The requests table, one row per group sorted by request id (stable), with
    :data:`REQUEST_COLUMNS`: the frame ``frame`` would make of the groups' record fields,
    sorted (ended groups are not touched again, so reading them at the end equals
    reading them when they ended). One pass over the groups, then numpy."""
    if not groups:
        return frame([], REQUEST_COLUMNS)
    ids: list[int] = []
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    seqs: list[int] = []
    admit: list[float] = []
    first: list[float] = []
    finish: list[float] = []
    status: list[object] = []
    preemptions: list[int] = []
    retries: list[int] = []
    peak: list[int] = []
    cached: list[int] = []
    for g in groups:
        ids.append(g.request_id)
        arrival.append(g.arrival_s)
        prompt.append(g.prompt_tokens)
        output.append(g.output_tokens)
        seqs.append(g.num_seqs)
        admit.append(g.admit_s)
        first.append(g.first_token_s)
        finish.append(g.finish_s)
        status.append(g.status)
        preemptions.append(g.preemptions)
        retries.append(g.retries)
        peak.append(g.peak_reserved_tokens)
        cached.append(g.cached_tokens)
    id_array = np.array(ids, dtype=np.int64)
    order = np.argsort(id_array, kind="stable")

    def ints(values: list[int]) -> Any:
        return np.array(values, dtype=np.int64)[order]

    def floats(values: list[float]) -> Any:
        return np.array(values, dtype=np.float64)[order]

    # Statuses are strings: the dtype pandas infers for them, read off the distinct ones.
    status_dtype = _inferred("status", sorted(set(status), key=str)).dtype
    data: dict[str, Any] = {
        "request_id": id_array[order],
        "replica": ints(replicas),
        "arrival_s": floats(arrival),
        "prompt_tokens": ints(prompt),
        "output_tokens": ints(output),
        "num_seqs": ints(seqs),
        "admit_s": floats(admit),
        "first_token_s": floats(first),
        "finish_s": floats(finish),
        "status": pd.Series(np.array(status, dtype=object)[order], dtype=status_dtype),
        "preemptions": ints(preemptions),
        "retries": ints(retries),
        "peak_reserved_tokens": ints(peak),
        "cached_tokens": ints(cached),
    }
    return pd.DataFrame(data, columns=list(REQUEST_COLUMNS))


def _inferred(name: str, values: list[object]) -> pd.Series:
    """A column with the dtype ``from_records`` infers for ``values``."""
    return pd.DataFrame.from_records([(v,) for v in values], columns=[name])[name]
