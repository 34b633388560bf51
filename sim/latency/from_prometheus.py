"""Fit the step-time model from a Prometheus range dump of vLLM's ``vllm:*`` histograms
(``fragsim calibrate --from-prometheus``).

Histograms hold distributions over windows, not requests, so the fit works per window
(:mod:`sim.latency.prom_dump` reads the dump into each node's windows: the intervals
between consecutive samples of ``vllm:e2e_request_latency_seconds_count``).

Workload. Each window's finished requests are rebuilt from its histograms
(:mod:`sim.latency.prom_rebuild` says how).

Fit. The rebuilt requests are replayed through the scenario's replica per node
(:class:`sim.latency.from_spans.Replay`), :data:`RECONSTRUCTIONS` rebuilds of different
seeds averaged, and the linear step-time model is found by the spans' solver
(:func:`sim.latency.from_spans.solve_linear`) minimising, over the training windows,
the relative error of each window's mean of each fitted metric, weighted by the square
root of the window's requests. Fitted metrics: mean prefill and decode time and e2e with
the phase histograms; else mean e2e, TTFT (the requests whose replayed first token falls
in the window, as vLLM observes TTFT) and, where the dump has it, time per output token.

Bias correction. A rebuild is not the real traffic, and the replay of a rebuild is
biased (a few percent: pairings and arrival times are guessed). So, once fitted,
:data:`ROUND_TRIPS` traffics *like* the dump's (:func:`sim.latency.prom_rebuild.synthesize`:
the windows' lengths, Poisson-like arrivals placed without looking at any latency) are
replayed under the fitted model, written as vLLM's histograms
(:mod:`sim.latency.vllm_histograms`, the dump's scrape interval), rebuilt as the dump
was and replayed again: the ratio of each metric's total over those round trips is the
rebuild's bias at that model; each prediction is divided by it and the model refitted
from the first fit (:data:`CORRECTIONS` rounds): indirect inference's correction. Tried
and left: the rebuilds themselves as the round trips' traffic (they lack the real
traffic's bursts: no closer), and a line per metric (offset and slope) for the ratio
(slopes near 0.8, the rebuilds' own noise: no closer). Fitting TTFT (by first-token
window) beside the phases also left: it pulls the per-prefill-token cost lower still
(6.8-12.9 % TTFT MAPE on the seeds below).

Held out: every fifth window per node with at least :data:`MIN_WINDOW_REQUESTS`
requests (its requests are replayed, not fitted). Reported for TTFT and e2e: the mean
over those windows of the absolute percentage error of the window's mean, and of its
p50 and p90 -- the observed ``histogram_quantile`` against the same interpolation over
the replayed requests counted into the same buckets (uncorrected replays).

Measured (round trip, tests/unit/test_latency_from_prometheus.py: the chat preset's
lengths, Poisson 2 req/s for 600 s, ~1,200 requests, 15 s scrapes, 3 % noise), the
fitted model's replay of the real requests of the held-out windows against the true
model's, TTFT / e2e MAPE, by workload seed: 3 (the test's) 1.5 % / 2.9 %; 7 8.0 % /
8.7 %; 11 6.4 % / 7.9 %. Where it misses, the per-prefill-token cost is fitted 4-6 %
low and the per-KV-token cost several times high on the training windows too: a bias
of the rebuild that the round trips do not see. Not yet within 5 % on every workload.

Refused (:class:`sim.latency.prom_dump.DumpError`, one line): a dump without the
needed series; fewer than :data:`MIN_WINDOWS` windows with requests or
:data:`MIN_REQUESTS` requests; and what the spans' fit refuses of a scenario.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.latency import prom_dump, vllm_histograms
from sim.latency.calibrated import CalibratedLatency
from sim.latency.from_spans import Replay, prepare, solve_linear
from sim.latency.prom_dump import (
    DECODE,
    E2E,
    PREFILL,
    TPOT,
    TTFT,
    DumpError,
    Window,
)
from sim.latency.prom_rebuild import has_phases, rebuild, synthesize

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
ROUND_TRIPS = 16
"""Round trips (histograms of a rebuild's replay, rebuilt and replayed) per correction."""
QUANTILES = (0.5, 0.9)
PHASED = (PREFILL, DECODE, E2E)
"""Fitted where the dump has vLLM v1's phase histograms."""
UNPHASED = (TTFT, E2E, TPOT)
"""Fitted otherwise (TPOT where the dump has it)."""
LABELS = {TTFT: "TTFT", E2E: "e2e", PREFILL: "prefill", DECODE: "decode", TPOT: "TPOT"}
"""What the command prints for each fitted metric."""


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
    if all(has_phases(w) for w in windows):
        return PHASED
    return tuple(m for m in UNPHASED if m != TPOT or all(TPOT in w.histograms for w in windows))


def correction(
    scenario: Any,
    windows: list[Window],
    latency: Any,
    metrics: tuple[str, ...],
    *,
    scrape_s: float,
    seed: int,
    trips: int = ROUND_TRIPS,
) -> dict[str, float]:
    """Per metric: the rebuild's bias at ``latency`` (module docstring), as the ratio of
    the metric's total replayed from a rebuild of a replay's own histograms to the total
    those histograms hold, summed over ``trips`` round trips, each from a fresh traffic
    like ``windows``' (a ratio of totals: one rebuild a trip is as good as several
    averaged)."""
    replayed = dict.fromkeys(metrics, 0.0)
    held = dict.fromkeys(metrics, 0.0)
    for k in range(trips):
        like = synthesize(windows, seed + 2000 + k)
        replay = prepare(scenario, like.assign(ttft_s=1.0, e2e_s=1.0))
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
        again = rebuild(synthetic, seed + 3000 + k).assign(ttft_s=1.0, e2e_s=1.0)
        s = sample(prepare(replay.scenario, again), latency, synthetic)
        for m in metrics:
            n = np.array([w.histograms[m].count if m in w.histograms else 0.0 for w in synthetic])
            theirs = observed_means(synthetic, m) * n
            ours = sample_means([s], m, len(synthetic)) * n
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
    """The last bias correction per fitted metric: replayed over held (1.0: none)."""


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
            bias = correction(scenario, used, latency, metrics, scrape_s=scrape_s, seed=seed)
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
