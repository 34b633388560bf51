"""A trace's requests as the engine takes them: columns from which each request's
``Group`` (``sim.engine.batch``) is made when it is needed, with its KV retention drawn
from the scenario (``sim.scenario.retention``). A run makes its groups a chunk at a time
as their arrivals come (only requests in flight are objects); the GPU replay makes them
all at once (:func:`make_groups`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.engine.batch import Group, groups_from_columns
from sim.scenario.retention import RetentionConfig


@dataclass(frozen=True)
class GroupColumns:
    """A trace's requests as columns (numpy arrays, in arrival order) from which each
    request's ``Group`` is made when it is needed (:meth:`group`): a fleet makes them at
    arrival, so only requests in flight are objects."""

    ids: np.ndarray
    arrivals_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    num_seqs: np.ndarray
    prefix_hashes: list[tuple[int, ...]]
    retain_s: np.ndarray | None
    retain_until_s: np.ndarray | None

    def __len__(self) -> int:
        return len(self.ids)

    def groups(self, start: int, stop: int) -> list[Group]:
        """The Groups of rows ``start`` to ``stop`` (one compiled pass over plain lists;
        a fleet makes them a chunk at a time as their arrivals come)."""
        retain = until = None
        if self.retain_s is not None and self.retain_until_s is not None:
            retain = self.retain_s[start:stop].tolist()
            until = self.retain_until_s[start:stop].tolist()
        return groups_from_columns(
            self.ids[start:stop].tolist(),
            self.arrivals_s[start:stop].tolist(),
            self.prompt_tokens[start:stop].tolist(),
            self.output_tokens[start:stop].tolist(),
            self.num_seqs[start:stop].tolist(),
            self.prefix_hashes[start:stop],
            retain,
            until,
        )


def group_columns(
    requests: pd.DataFrame, retention: RetentionConfig | None = None, seed: int = 0
) -> GroupColumns:
    """The requests' columns, with each request's KV retention after it finishes drawn
    from ``retention`` (default: none) with the scenario's ``seed``."""
    n = len(requests)
    col = requests.get
    width = np.ones(n, dtype=np.int64)
    samples = col("num_samples")
    beams = col("beam_width")
    if samples is not None:
        width = np.maximum(width, samples.fillna(1).to_numpy(dtype=np.int64))
    if beams is not None:
        width = np.maximum(width, beams.fillna(1).to_numpy(dtype=np.int64))
    retain_s = until_s = None
    if retention is not None and retention.kind != "none":
        retain_s, until_s = retention.draw(requests, seed)
    return GroupColumns(
        requests["request_id"].to_numpy(dtype=np.int64),
        requests["arrival_s"].to_numpy(dtype=np.float64),
        requests["prompt_tokens"].to_numpy(dtype=np.int64),
        requests["output_tokens"].to_numpy(dtype=np.int64),
        width,
        _hash_tuples(requests),
        retain_s,
        until_s,
    )


def make_groups(
    requests: pd.DataFrame, retention: RetentionConfig | None = None, seed: int = 0
) -> list[Group]:
    """One Group per trace row, in arrival order, with its KV retention after it
    finishes drawn from ``retention`` (default: none) with the scenario's ``seed``."""
    c = group_columns(requests, retention, seed)
    return c.groups(0, len(c))


def _hash_tuples(requests: pd.DataFrame) -> list[tuple[int, ...]]:
    """Each row's ``prefix_hashes`` as a tuple (empty when missing); only the rows that
    have hashes are converted (traces without them keep an all-empty column)."""
    n = len(requests)
    out: list[tuple[int, ...]] = [()] * n
    hashes = requests.get("prefix_hashes")
    if hashes is None:
        return out
    if isinstance(hashes.dtype, pd.ArrowDtype):
        lengths = hashes.list.len().fillna(0).to_numpy(dtype=np.int64)
        rows = np.flatnonzero(lengths)
        for i, h in zip(rows.tolist(), hashes.iloc[rows].tolist(), strict=True):
            out[i] = tuple(map(int, h))
        return out
    for i, h in enumerate(hashes.tolist()):
        if h is not None and len(h) > 0:
            out[i] = tuple(map(int, h))
    return out


def sessions_of(requests: pd.DataFrame) -> dict[int, int] | None:
    """Request id -> session id, for the requests that have one (None: none has)."""
    column = requests.get("session_id")
    if column is None:
        return None
    has = column.notna().to_numpy()
    if not has.any():
        return None
    ids = requests["request_id"].to_numpy(dtype=np.int64)[has].tolist()
    values = column[has].astype("int64").tolist()
    return dict(zip(ids, values, strict=True))
