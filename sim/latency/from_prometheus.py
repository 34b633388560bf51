"""Fit the step-time model from a Prometheus range dump of vLLM's ``vllm:*`` histograms
(``fragsim calibrate --from-prometheus``).

Histograms hold distributions over windows, not requests, so the fit works per window
(:mod:`sim.latency.prom_dump` reads the dump into each node's windows: the intervals
between consecutive samples of ``vllm:e2e_request_latency_seconds_count``).

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

Fit. The rebuilt requests are replayed through the scenario's replica per node
(:class:`sim.latency.from_spans.Replay`), :data:`RECONSTRUCTIONS` rebuilds of different
seeds averaged, and the linear step-time model is found by the spans' solver
(:func:`sim.latency.from_spans.solve_linear`) minimising, over the training windows,
the relative error of each window's mean of each fitted metric, weighted by the square
root of the window's requests. Fitted metrics: mean prefill and decode time and e2e with
the phase histograms; else mean e2e, TTFT (the requests whose replayed first token falls
in the window, as vLLM observes TTFT) and, where the dump has it, time per output token.

Bias correction. A rebuild is not the real traffic, and the replay of a rebuild is
biased (a few percent: pairings and arrival times are guessed). So, once fitted, each
rebuild's replay under the fitted model is itself written as vLLM's histograms
(:mod:`sim.latency.vllm_histograms`, the dump's scrape interval), rebuilt the same way and
replayed again: the ratio of each metric's total over that round trip is the rebuild's
bias at that model, each prediction is divided by it and the model refitted
(:data:`CORRECTIONS` rounds). This is indirect inference's correction.

Held out: every fifth window per node with at least :data:`MIN_WINDOW_REQUESTS`
requests (its requests are replayed, not fitted). Reported for TTFT and e2e: the mean
over those windows of the absolute percentage error of the window's mean, and of its
p50 and p90 -- the observed ``histogram_quantile`` against the same interpolation over
the replayed requests counted into the same buckets (uncorrected replays).

Measured (round trip, tests/unit/test_latency_from_prometheus.py: a chat workload, 2
req/s for 600 s, 15 s scrapes, 3 % noise): the fitted model's replay of the real
requests of the held-out windows is within ~3 % TTFT and ~5 % e2e (MAPE) of the true
model's. A heavy-tailed trickle (the bimodal preset at 0.5 req/s: seven requests a
window, a third of them 15-30k-token prompts) rebuilds far worse (25-40 %): each window's
few long prompts decide its latencies, and where they fell in it is lost.

Refused (:class:`sim.latency.prom_dump.DumpError`, one line): a dump without the
needed series; fewer than :data:`MIN_WINDOWS` windows with requests or
:data:`MIN_REQUESTS` requests; and what the spans' fit refuses of a scenario.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from sim.latency import prom_dump, vllm_histograms
from sim.latency.calibrated import CalibratedLatency
from sim.latency.from_spans import Replay, prepare, solve_linear
from sim.latency.prom_dump import (
    DECODE,
    E2E,
    GENERATION,
    PREFILL,
    PROMPT,
    QUEUE,
    TPOT,
    TTFT,
    DumpError,
    Histogram,
    Window,
)

MIN_WINDOWS = 10
"""The fewest windows with finished requests a fit accepts (a fifth are held out)."""
MIN_REQUESTS = 50
"""The fewest finished requests, over all windows, a fit accepts."""
MIN_WINDOW_REQUESTS = 3
"""A window with fewer finished requests is replayed but neither fitted nor held out."""
HOLD_OUT_EVERY = 5
RECONSTRUCTIONS = 4
"""Rebuilds (of different seeds) whose replays are averaged at every step of the fit."""
CORRECTIONS = 1
"""Rounds of bias correction and refit after the first fit."""
QUANTILES = (0.5, 0.9)
PHASED = (PREFILL, DECODE, E2E)
"""Fitted where the dump has vLLM v1's phase histograms."""
UNPHASED = (TTFT, E2E, TPOT)
"""Fitted otherwise (TPOT where the dump has it)."""


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


def _has_phases(w: Window) -> bool:
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
        if _has_phases(w):
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


def held_out_windows(windows: list[Window]) -> np.ndarray:
    """Per window: -1 too few requests to use, 0 fitted, 1 held out."""
    role = np.full(len(windows), -1)
    seen: dict[str, int] = {}
    for i, w in enumerate(windows):
        if w.requests < MIN_WINDOW_REQUESTS:
            continue
        k = seen.get(w.node, 0)
        seen[w.node] = k + 1
        role[i] = 1 if k % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1 else 0
    return role


def observed_means(windows: list[Window], name: str) -> np.ndarray:
    """Each window's mean of the histogram (NaN where it has none or saw nothing)."""
    return np.array(
        [w.histograms[name].mean() if name in w.histograms else math.nan for w in windows]
    )


@dataclass(frozen=True)
class Sample:
    """One replay's requests, each with the window it counts in per histogram."""

    values: dict[str, np.ndarray]
    """Per histogram name: each request's replayed value (NaN: did not finish)."""
    window: dict[str, np.ndarray]
    """Per histogram name: each request's window (-1: outside every window)."""
    weight: dict[str, np.ndarray]
    """Per histogram name: observations each request adds (TPOT: output - 1)."""


def _first_token_windows(windows: list[Window], nodes: np.ndarray, at_s: np.ndarray) -> np.ndarray:
    """The window (index) of each node's time ``at_s`` (from the earliest start), -1 outside."""
    t0 = min(w.start_s for w in windows)
    out = np.full(len(at_s), -1)
    for node in np.unique(nodes):
        mine = np.flatnonzero(np.array([w.node == node for w in windows]))
        starts = np.array([windows[i].start_s - t0 for i in mine])
        ends = np.array([windows[i].end_s - t0 for i in mine])
        rows = np.flatnonzero(nodes == node)
        k = np.searchsorted(ends, at_s[rows], side="left")
        k_ok = np.minimum(k, len(mine) - 1)
        inside = (k < len(mine)) & (at_s[rows] > starts[k_ok])
        out[rows] = np.where(inside, mine[k_ok], -1)
    return out


def sample(replay: Replay, latency: Any, windows: list[Window]) -> Sample:
    """Replay the rebuild under ``latency``: each request's values and windows."""
    admit, ttft, e2e = replay.phases(latency)
    obs = replay.observed
    window = obs["window"].to_numpy()
    output = obs["output_tokens"].to_numpy(np.float64)
    first_at = obs["arrival_s"].to_numpy(np.float64) + ttft
    first_window = _first_token_windows(windows, obs["node"].to_numpy(), np.nan_to_num(first_at))
    intervals = np.maximum(output - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(intervals > 0, (e2e - ttft) / intervals, 0.0)
    values = {TTFT: ttft, E2E: e2e, PREFILL: ttft - admit, DECODE: e2e - ttft, TPOT: tpot}
    ones = np.ones(len(obs))
    windows_of = {name: window for name in values} | {TTFT: first_window}
    weights = {name: ones for name in values} | {TPOT: intervals}
    return Sample(values, windows_of, weights)


def sample_means(samples: list[Sample], name: str, count: int) -> np.ndarray:
    """Each window's mean of ``name`` over the samples' requests (weighted)."""
    total, weight = np.zeros(count), np.zeros(count)
    for s in samples:
        w = s.window[name]
        ok = (w >= 0) & np.isfinite(s.values[name])
        total += np.bincount(w[ok], s.values[name][ok] * s.weight[name][ok], minlength=count)
        weight += np.bincount(w[ok], s.weight[name][ok], minlength=count)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / weight


def _metrics(windows: list[Window]) -> tuple[str, ...]:
    if all(_has_phases(w) for w in windows):
        return PHASED
    return tuple(m for m in UNPHASED if m != TPOT or all(TPOT in w.histograms for w in windows))


def correction(
    replays: list[Replay], latency: Any, metrics: tuple[str, ...], scrape_s: float, seed: int
) -> dict[str, float]:
    """Per metric: the rebuild's bias at ``latency`` (module docstring), as the ratio of
    the metric's total replayed from a rebuild of the replay's own histograms to the
    total those histograms hold."""
    replayed = dict.fromkeys(metrics, 0.0)
    held = dict.fromkeys(metrics, 0.0)
    for k, replay in enumerate(replays):
        series: dict[prom_dump.Key, dict[float, float]] = {}
        for node, frame in zip(_nodes(replay), replay.requests(latency), strict=True):
            if (frame["status"] == "ok").sum() == 0:
                continue
            series |= vllm_histograms.histogram_series(
                frame,
                scrape_interval_s=scrape_s,
                max_model_len=int(replay.parts.spec.max_seq_tokens),
                node=node,
            )
        synthetic = [w for w in prom_dump.windows_of(series, "replay") if w.requests > 0]
        again = prepare(
            replay.scenario, rebuild(synthetic, seed + 1000 + k).assign(ttft_s=1.0, e2e_s=1.0)
        )
        s = sample(again, latency, synthetic)
        for m in metrics:
            n = np.array([w.histograms[m].count if m in w.histograms else 0.0 for w in synthetic])
            theirs, ours = (
                observed_means(synthetic, m) * n,
                sample_means([s], m, len(synthetic)) * n,
            )
            ok = np.isfinite(theirs) & np.isfinite(ours)
            held[m] += float(theirs[ok].sum())
            replayed[m] += float(ours[ok].sum())
    return {m: replayed[m] / held[m] if held[m] > 0 else 1.0 for m in metrics}


def _nodes(replay: Replay) -> list[str]:
    return [str(n) for n in sorted(replay.observed["node"].unique())]


@dataclass(frozen=True)
class PromFit:
    latency: CalibratedLatency
    table: list[tuple[str, int, float, float, float]]
    """(metric, held-out windows, mean APE, p50 APE, p90 APE) for TTFT and e2e."""
    evaluations: int
    fitted_windows: int
    requests: int
    correction: dict[str, float]
    """The last bias correction per fitted metric (1.0: none)."""


def _ape(pred: float, obs: float) -> float:
    if not (math.isfinite(obs) and obs > 0):
        return math.nan
    return abs(pred - obs) / obs if math.isfinite(pred) else 1.0


def _table(
    windows: list[Window], held: np.ndarray, samples: list[Sample]
) -> list[tuple[str, int, float, float, float]]:
    """The held-out table (module docstring), over the pooled samples."""
    table = []
    for name in (TTFT, E2E):
        means = sample_means(samples, name, len(windows))
        rows: list[list[float]] = []
        for i in held:
            h = windows[i].histograms[name]
            values = np.concatenate([s.values[name][s.window[name] == i] for s in samples])
            counts = prom_dump.bucket_counts(
                np.where(np.isfinite(values), values, np.inf), h.bounds
            )
            row = [_ape(float(means[i]), h.mean())]
            for q in QUANTILES:
                o = prom_dump.histogram_quantile(q, h.bounds, h.counts)
                row.append(_ape(prom_dump.histogram_quantile(q, h.bounds, counts), o))
            rows.append(row)
        cols = np.nanmean(np.array(rows), axis=0) if rows else [math.nan] * 3
        label = "TTFT" if name == TTFT else "e2e"
        table.append((label, len(held), float(cols[0]), float(cols[1]), float(cols[2])))
    return table


def _check(windows: list[Window], source: str) -> list[Window]:
    used = [w for w in windows if w.requests > 0]
    total = sum(w.requests for w in used)
    if len(used) < MIN_WINDOWS or total < MIN_REQUESTS:
        raise DumpError(
            f"{source}: {len(used)} windows with {total} finished requests "
            f"({E2E}_count increased); a fit needs at least {MIN_WINDOWS} windows and "
            f"{MIN_REQUESTS} requests (a longer range, or a shorter query step)"
        )
    role = held_out_windows(used)
    if not (role == 1).any() or not (role == 0).any():
        raise DumpError(
            f"{source}: too few windows with {MIN_WINDOW_REQUESTS}+ finished requests to "
            f"fit and hold out (every {HOLD_OUT_EVERY}th per node is held out): a longer "
            "range, or a longer query step"
        )
    return used


def fit_from_prometheus(
    scenario: Any,
    windows: list[Window],
    *,
    source: str = "",
    max_evaluations: int = 60,
    reconstructions: int = RECONSTRUCTIONS,
) -> PromFit:
    """Fit (module docstring); deterministic for the same dump and scenario."""
    used = _check(windows, source)
    total = sum(w.requests for w in used)
    seed = int(scenario.seed)
    replays = [
        prepare(scenario, rebuild(used, seed + k).assign(ttft_s=1.0, e2e_s=1.0))
        for k in range(reconstructions)
    ]
    role = held_out_windows(used)
    train = role == 0
    metrics = _metrics(used)
    requests = np.array([w.requests for w in used], dtype=np.float64)
    weight = np.sqrt(requests / requests[train].mean())
    targets = {m: observed_means(used, m) for m in metrics}
    masks = {m: train & np.isfinite(t) & (t > 0) for m, t in targets.items()}
    bias = dict.fromkeys(metrics, 1.0)
    scrape_s = float(np.median([w.end_s - w.start_s for w in used]))

    def residuals_of(latency: Any) -> np.ndarray:
        samples = [sample(r, latency, used) for r in replays]
        out = []
        for m in metrics:
            predicted = sample_means(samples, m, len(used)) / bias[m]
            out.append(((predicted - targets[m]) / targets[m] * weight)[masks[m]])
        return np.concatenate(out)

    calls = 0
    latency, start = None, None
    for _ in range(CORRECTIONS + 1):
        if latency is not None:
            bias = correction(replays, latency, metrics, scrape_s, seed)
        latency, n = solve_linear(
            replays[0], residuals_of, max_evaluations=max_evaluations, start=start
        )
        calls += n
        start = latency
    assert latency is not None
    samples = [sample(r, latency, used) for r in replays]
    table = _table(used, np.flatnonzero(role == 1), samples)
    targets_all = observed_means(used, E2E)
    doc = latency.calibration.model_dump(mode="json")
    held = np.flatnonzero(role == 1)
    obs_e2e, pred_e2e = targets_all[held], sample_means(samples, E2E, len(used))[held]
    ss = float(np.sum((obs_e2e - obs_e2e.mean()) ** 2))
    resid = float(np.sum((np.where(np.isfinite(pred_e2e), pred_e2e, 0.0) - obs_e2e) ** 2))
    doc["fit"] = {
        "r2": min(1.0 - resid / ss if ss > 0 else 1.0, 1.0),
        "mape": table[1][2],
        "samples": len(held),
    }
    doc["source"] = {
        "fitted_from": "prometheus vllm histograms",
        "dump": source,
        "nodes": len({w.node for w in used}),
        "windows": len(used),
        "held_out_windows": int((role == 1).sum()),
        "requests": total,
        "fitted_metrics": " ".join(metrics),
        "reconstructions": reconstructions,
        "evaluations": calls,
    }
    for m, ratio in bias.items():
        doc["source"][f"bias_{m.removeprefix('vllm:')}"] = ratio
    for label, _, mean, p50, p90 in table:
        key = label.lower()
        doc["source"].update(
            {
                f"held_out_{key}_mean_ape": mean,
                f"held_out_{key}_p50_ape": p50,
                f"held_out_{key}_p90_ape": p90,
            }
        )
    latency = CalibratedLatency.from_dict(doc, source="calibrate --from-prometheus")
    return PromFit(latency, table, calls, int(train.sum()), total, bias)
