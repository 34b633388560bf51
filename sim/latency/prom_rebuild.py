"""The requests of a Prometheus dump's windows, rebuilt from vLLM's histograms
(``fragsim calibrate --from-prometheus``, :mod:`sim.latency.from_prometheus`).

Workload. Each window's finished requests (the e2e histogram's count increase) are
rebuilt: their prompt and output lengths take the window's
``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` bucket shares
exactly (largest remainder), spread within each bucket so their mean is the
histogram's (:func:`spread`). Each finishes at a seeded uniform time in the window
(uniform, as a Poisson stream's events are: an even spread smooths the bursts that make
queues) and arrived its rebuilt e2e earlier. With vLLM v1's phase histograms
(``vllm:request_queue_time_seconds``, ``_prefill_time_``, ``_decode_time_``) that e2e is
queue + prefill + decode, the prefill time ranked with the prompt length and the decode
time with the output length (their pairing with each other is lost: random); without
them it is the e2e histogram's, ranked with the output length.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from sim.latency.prom_dump import DECODE, E2E, GENERATION, PREFILL, PROMPT, QUEUE, Histogram, Window


def _shares(counts: np.ndarray, n: int) -> np.ndarray:
    """Non-cumulative bucket counts scaled to sum to ``n`` (largest remainder)."""
    per = np.diff(np.concatenate([[0.0], counts]))
    per = np.maximum(per, 0)
    if per.sum() <= 0:
        return np.zeros(len(per), dtype=np.int64)
    exact = per / per.sum() * n
    whole = np.floor(exact).astype(np.int64)
    left = n - int(whole.sum())
    order = np.argsort(-(exact - whole), kind="stable")
    whole[order[:left]] += 1
    return whole


def spread(hist: Histogram, n: int, *, integer: bool) -> np.ndarray:
    """``n`` values with the histogram's bucket shares, evenly spread within each bucket
    ``(lo, hi]`` as ``lo + (hi - lo) * u**g``, ``g`` chosen so the mean is the
    histogram's where it can be (else the nearest end); tokens rounded up within the
    bucket; the ``+Inf`` bucket's values take the rest of the sum. Sorted ascending."""
    finite = hist.bounds[np.isfinite(hist.bounds)]
    top = float(finite[-1]) if len(finite) else 1.0
    lo_list, hi_list, u_list = [], [], []
    for i, c in enumerate(_shares(hist.counts, n)):
        if c == 0:
            continue
        hi = min(float(hist.bounds[i]), top)
        lo = min(float(hist.bounds[i - 1]), top) if i > 0 else 0.0
        lo = lo if hi > lo or i == 0 else top
        lo_list.append(np.full(c, lo))
        hi_list.append(np.full(c, hi))
        u_list.append((np.arange(c) + 0.5) / c)
    if not lo_list:
        return np.zeros(0)
    low, high, u = np.concatenate(lo_list), np.concatenate(hi_list), np.concatenate(u_list)

    def values(log_g: float) -> np.ndarray:
        v = low + (high - low) * u ** math.exp(log_g)
        return np.clip(np.ceil(v), np.floor(low) + 1, high) if integer else v

    target = hist.mean()
    log_g = 0.0
    if math.isfinite(target):
        f = lambda x: float(values(x).mean()) - target  # noqa: E731
        a, b = -4.0, 4.0
        if f(a) * f(b) < 0:
            log_g = brentq(f, a, b, xtol=1e-6)
        else:
            log_g = a if abs(f(a)) < abs(f(b)) else b
    out = values(log_g)
    over = high <= low  # the +Inf bucket, put at the top bound above: give it the rest of the sum
    if over.any() and math.isfinite(target):
        rest = (target * len(out) - float(out[~over].sum())) / int(over.sum())
        out[over] = np.ceil(rest) if integer and rest > top else max(rest, top)
    return np.sort(out)


def has_phases(w: Window) -> bool:
    return all(name in w.histograms for name in (QUEUE, PREFILL, DECODE))


def rebuild(windows: list[Window], seed: int) -> pd.DataFrame:
    """The requests of every window (module docstring): ``node``, ``window`` (index
    into ``windows``), ``arrival_s`` (from the earliest window's start),
    ``prompt_tokens``, ``output_tokens``; sorted by node, then arrival."""
    rng = np.random.default_rng(seed)
    t0 = min(w.start_s for w in windows)
    frames = []
    for index, w in enumerate(windows):
        n, h = w.requests, w.histograms
        if n == 0:
            continue
        prompt = spread(h[PROMPT], n, integer=True)
        output = spread(h[GENERATION], n, integer=True)  # both ascending
        if has_phases(w):
            pair = rng.permutation(n)  # prompt with output: lost
            prompt = prompt[pair]
            e2e = (
                rng.permutation(spread(h[QUEUE], n, integer=False))
                + spread(h[PREFILL], n, integer=False)[pair]
                + spread(h[DECODE], n, integer=False)
            )
        else:
            prompt = rng.permutation(prompt)
            e2e = spread(h[E2E], n, integer=False)
        finish = rng.uniform(w.start_s, w.end_s, n)
        frames.append(
            pd.DataFrame(
                {
                    "node": w.node,
                    "window": index,
                    "arrival_s": finish - e2e - t0,
                    "prompt_tokens": np.maximum(prompt, 1).astype(np.int64),
                    "output_tokens": np.maximum(output, 1).astype(np.int64),
                }
            )
        )
    rows = pd.concat(frames, ignore_index=True)
    return rows.sort_values(["node", "arrival_s"], kind="stable").reset_index(drop=True)


def synthesize(windows: list[Window], seed: int) -> pd.DataFrame:
    """Traffic *like* the dump's, for the fit's bias correction (not a rebuild): each
    window's requests with the lengths :func:`rebuild` gives them, paired at random,
    arriving at seeded uniform times in the window moved back by its mean e2e -- a
    Poisson stream's bursts, placed without looking at any latency. Same columns as
    :func:`rebuild`."""
    rng = np.random.default_rng(seed)
    t0 = min(w.start_s for w in windows)
    frames = []
    for index, w in enumerate(windows):
        n, h = w.requests, w.histograms
        if n == 0:
            continue
        back = h[E2E].mean()
        frames.append(
            pd.DataFrame(
                {
                    "node": w.node,
                    "window": index,
                    "arrival_s": rng.uniform(w.start_s - back, w.end_s - back, n) - t0,
                    "prompt_tokens": np.maximum(
                        rng.permutation(spread(h[PROMPT], n, integer=True)), 1
                    ).astype(np.int64),
                    "output_tokens": np.maximum(
                        rng.permutation(spread(h[GENERATION], n, integer=True)), 1
                    ).astype(np.int64),
                }
            )
        )
    rows = pd.concat(frames, ignore_index=True)
    return rows.sort_values(["node", "arrival_s"], kind="stable").reset_index(drop=True)
