"""Calibrate the simulator's latency model on the device: a designed grid of steps,
measured on :class:`gpu_backend.model.DecoderStack`, fitted with
:func:`sim.latency.calibrated.fit_calibrated_latency` (non-negative least squares, the
``fragsim-latency/1`` form with the prefill-squared term), scored by k-fold held-out error
and written as the JSON ``sim`` loads.

The grid crosses decode batch x context length x prefill chunk. A point's step is
``decode`` sequences of ``context`` cached tokens (one new token each) plus one prompt
chunk of ``prefill`` tokens starting at position 0, so ``kv_tokens = decode*context +
prefill``. Prefill sizes span two orders of magnitude, so the quadratic (attention) term
is identified apart from the linear (projection, MLP) one; block tables are shuffled
permutations of the pool, as a long-running pool's are.

``fit.mape`` in the file is the *held-out* MAPE (each point predicted by the fit on the
other folds); ``source`` keeps the in-sample MAPE, the folds, the device, the software
versions, the kernels and the model shape.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from gpu_backend.device import gpu_preset_name, median_time_s, versions
from gpu_backend.kv_pool import PagedKVPool
from gpu_backend.model import DecoderStack
from gpu_backend.replay import build_batch
from sim.latency.calibrated import CalibratedLatency, fit_calibrated_latency
from traces.atomic import atomic_path


@dataclass(frozen=True)
class Grid:
    """The designed points: every (decode, context, prefill) but the empty step."""

    decode_seqs: tuple[int, ...]
    context_tokens: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    block_size: int = 16
    repeats: int = 5

    def points(self) -> list[tuple[int, int, int]]:
        out = []
        for d, c, p in itertools.product(
            self.decode_seqs, self.context_tokens, self.prefill_tokens
        ):
            if d == 0 and (p == 0 or c != self.context_tokens[0]):
                continue  # empty, or a prefill-only point repeated per context
            out.append((d, c, p))
        return out

    def max_blocks(self) -> int:
        bs = self.block_size
        return max(d * -(-c // bs) + -(-p // bs) for d, c, p in self.points())


FULL_GRID = Grid(
    decode_seqs=(0, 1, 8, 32, 96, 256),
    context_tokens=(128, 1024, 4096, 8192),
    prefill_tokens=(0, 64, 512, 2048, 4096, 8192),
)
"""For a GPU: up to 2M KV tokens and 8k-token prompt chunks."""

QUICK_GRID = Grid(
    decode_seqs=(0, 1, 4), context_tokens=(16, 64), prefill_tokens=(0, 16, 64, 128), repeats=3
)
"""For CPU tests and ``--quick``: seconds with the torch references."""


@dataclass(frozen=True)
class Measurement:
    decode_seqs: np.ndarray
    context_tokens: np.ndarray
    prefill_tokens: np.ndarray
    kv_tokens: np.ndarray
    measured_s: np.ndarray
    """Full-depth step times (median of the grid's repeats)."""


def measure_grid(stack: DecoderStack, grid: Grid, seed: int = 0) -> Measurement:
    """Time every grid point on ``stack`` (full depth)."""
    bs = grid.block_size
    pool = PagedKVPool(
        stack.layers_run,
        grid.max_blocks(),
        bs,
        stack.shape.num_kv_heads,
        stack.shape.head_dim,
        dtype=stack.dtype,
        device=stack.device,
    )
    rng = np.random.default_rng(seed)
    rows = []
    for d, c, p in grid.points():
        order = rng.permutation(pool.mirror.num_blocks).tolist()
        per_seq = -(-c // bs)
        decode = [(order[i * per_seq : (i + 1) * per_seq], c) for i in range(d)]
        rest = order[d * per_seq :]
        prefill = [(rest[: -(-p // bs)], 0, p)] if p else []
        batch = build_batch(prefill, decode, bs, stack.device)
        x = stack.inputs(batch.num_tokens)

        t = median_time_s(
            partial(stack.forward, x, batch, pool.k, pool.v), stack.device, grid.repeats
        )
        t *= stack.depth_scale
        rows.append((d, c, p, d * c + p, t))
    a = np.array(rows, dtype=np.float64)
    return Measurement(
        a[:, 0].astype(np.int64),
        a[:, 1].astype(np.int64),
        a[:, 2].astype(np.int64),
        a[:, 3].astype(np.int64),
        a[:, 4],
    )


def kfold_mape(m: Measurement, folds: int, seed: int = 0) -> float:
    """Mean absolute percentage error of each point predicted by the fit on the other
    folds (a fraction)."""
    n = m.measured_s.size
    folds = max(2, min(folds, n))
    fold_of = np.random.default_rng(seed).permutation(n) % folds
    errors = np.empty(n)
    for f in range(folds):
        test, train = fold_of == f, fold_of != f
        fit = fit_calibrated_latency(
            m.prefill_tokens[train],
            m.decode_seqs[train],
            m.kv_tokens[train],
            m.measured_s[train],
            model="x",
            gpu="x",
            quadratic_prefill=True,
        )
        c = fit.calibration.coefficients
        p, d, k = m.prefill_tokens[test], m.decode_seqs[test], m.kv_tokens[test]
        pred = (
            c.intercept_s
            + c.per_prefill_token_s * p
            + c.per_decode_seq_s * d
            + c.per_kv_token_s * k
            + c.per_prefill_token_sq_s * p * p
        )
        errors[test] = np.abs(pred - m.measured_s[test]) / m.measured_s[test]
    return float(errors.mean())


def calibrate(stack: DecoderStack, grid: Grid, *, folds: int = 5, seed: int = 0) -> Any:
    """Measure ``grid`` on ``stack`` and fit: a ``CalibratedLatency`` whose ``fit.mape``
    is the k-fold held-out MAPE (module doc)."""
    m = measure_grid(stack, grid, seed)
    s = stack.shape
    source: dict[str, str | int | float | bool] = {
        **versions(stack.device),
        "date": dt.date.today().isoformat(),
        "kernels": stack.kernels.name,
        "dtype": str(stack.dtype).removeprefix("torch."),
        "layers_run": stack.layers_run,
        "num_layers": s.num_layers,
        "hidden_size": s.hidden_size,
        "num_heads": s.num_heads,
        "num_kv_heads": s.num_kv_heads,
        "head_dim": s.head_dim,
        "intermediate_size": s.intermediate_size,
        "block_size_tokens": grid.block_size,
        "repeats": grid.repeats,
    }
    fit = fit_calibrated_latency(
        m.prefill_tokens,
        m.decode_seqs,
        m.kv_tokens,
        m.measured_s,
        model=s.name,
        gpu=gpu_preset_name(stack.device),
        quadratic_prefill=True,
        source=source,
    )
    held_out = kfold_mape(m, folds, seed)
    cal = fit.calibration
    assert cal.fit is not None
    document = cal.model_dump(mode="json")
    document["fit"]["mape"] = held_out
    document["source"]["in_sample_mape"] = cal.fit.mape
    document["source"]["kfold"] = folds
    return type(fit).from_dict(document, source="calibrate")


def write_calibration(latency: Any, path: str | Path) -> Path:
    """Write atomically (``traces.atomic.atomic_path``) and check that ``sim`` loads it."""
    with atomic_path(path) as tmp:
        latency.to_json(tmp)
        CalibratedLatency.from_json(tmp)
    return Path(path)
