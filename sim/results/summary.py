"""The run summary: throughput, latency percentiles, failures by cause, memory use, the
waste breakdown, and the seed's alerts evaluated over the run.

Failures. ``failures.by_cause`` splits every allocation failure by the allocator's
diagnosis (``capacity``: not enough free memory at all; ``fragmentation``: enough in
total, no usable extent large enough); ``at_high_free_memory`` is a separate cut of the
same failures (free share > ``high_free_share``, whatever the cause), overlapping both
(a request larger than all the free memory fails for capacity at 40 % free), with its
own split in ``at_high_free_memory_by_cause``.

Alerts (:mod:`sim.results.seed_alerts`: names, conditions, thresholds from the
scenario's ``metrics``), one entry per alert whose condition held during the run:

* ``fragmentation_driven_allocation_failure`` (high): ``matching_failures`` allocation
  failures while free memory > ``high_free_share`` (25 %).
* ``severe_fragmentation`` (high) / ``high_fragmentation_approaching_threshold``
  (medium): ``matching_samples`` periodic samples with
  ``largest_contiguous_free_block_ratio`` < ``ratio_severe`` (0.5) / ``ratio_alert`` (0.6).
* ``node_uptime_vs_fragmentation_correlation`` (medium): over all the run's periodic
  samples, Spearman rho of (uptime since the last restart, 1 - ratio) >=
  ``uptime_rho_alert`` with p < 0.01, and the recent fragmentation past ``1 - ratio_alert``.
  The statistic is in ``memory.node_uptime_vs_fragmentation_correlation`` for every run.

A fleet run adds two counts of ``alerts.parquet`` to each (:func:`with_firings`):
``condition_episodes``, the stretches of scrapes where the rule's condition held, and
``firings``, those that held its ``for:`` and fired, as Prometheus fires them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from sim.results.labels import WASTE_LABELS
from sim.results.seed_alerts import (
    ALERTS,
    BY_NAME,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    UPTIME_CORRELATION,
    AlertThresholds,
    condition,
)
from sim.results.summary_model import Summary

__all__ = ["AlertThresholds", "alert_lines", "summarize", "with_firings"]

SEED_THRESHOLDS = AlertThresholds()


def _pct(values: pd.Series, q: float) -> float | None:
    v = values.dropna()
    if v.empty:
        return None
    return float(np.percentile(v.to_numpy(dtype=float), q))


def _percentiles(values: pd.Series) -> dict[str, float | None]:
    return {f"p{q}": _pct(values, q) for q in (50, 90, 99)} | {
        "mean": None if values.dropna().empty else float(values.mean())
    }


def summarize(
    requests: pd.DataFrame,
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    *,
    end_s: float,
    thresholds: AlertThresholds = SEED_THRESHOLDS,
) -> dict[str, Any]:
    """A JSON-ready dict; same frames in, same dict out."""
    # Only the columns read below (a copy of the whole table would double a
    # million-request run's memory peak).
    read = ["arrival_s", "first_token_s", "finish_s", "generated_tokens", "num_seqs"]
    ok = requests.loc[requests["status"] == "ok", read]
    counts = {str(k): int(v) for k, v in requests["status"].value_counts().sort_index().items()}
    start_s = float(requests["arrival_s"].min()) if len(requests) else 0.0
    span_s = max(end_s - start_s, 1e-9)
    # Tokens generated, not asked for: generation stops at the maximum sequence length,
    # and a request that asks for none still emits the prefill's token.
    out_tokens = float((ok["generated_tokens"] * ok["num_seqs"]).sum())
    tpot = (ok["finish_s"] - ok["first_token_s"]) / (ok["generated_tokens"] - 1).where(
        ok["generated_tokens"] > 1
    )

    fails = events[events["kind"].isin(["admission_failure", "growth_failure"])]
    high = fails[fails["free_share"] > thresholds.high_free_share]
    periodic = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"]]
    ratio = periodic["largest_contiguous_free_block_ratio"]
    shares = {
        name: None if periodic.empty else float(periodic[f"share_{name}"].mean())
        for name in WASTE_LABELS
    }
    summary: dict[str, Any] = {
        "requests": {"total": len(requests), "by_status": counts},
        "span_s": span_s,
        "throughput": {
            "requests_per_s": len(ok) / span_s,
            "output_tokens_per_s": out_tokens / span_s,
        },
        "latency_s": {
            "ttft": _percentiles(ok["first_token_s"] - ok["arrival_s"]),
            "tpot": _percentiles(tpot),
            "e2e": _percentiles(ok["finish_s"] - ok["arrival_s"]),
        },
        "failures": {
            "allocation_failures": len(fails),
            "by_cause": {
                str(k): int(v) for k, v in fails["cause"].value_counts().sort_index().items()
            },
            "at_high_free_memory": len(high),
            "at_high_free_memory_by_cause": {
                str(k): int(v) for k, v in high["cause"].value_counts().sort_index().items()
            },
            "allocation_failure_rate_at_high_free_memory": len(high) / span_s,
            "preemptions": int((events["kind"] == "preemption").sum()),
            "restarts": int((events["kind"] == "restart").sum()),
        },
        "memory": {
            "mean_used_share": shares["token_states"],
            "waste_breakdown": shares,
            "largest_contiguous_free_block_ratio": {
                "min": None if ratio.dropna().empty else float(ratio.min()),
                "mean": None if ratio.dropna().empty else float(ratio.mean()),
                "share_of_samples_below_alert": None
                if ratio.dropna().empty
                else float((ratio.dropna() < thresholds.ratio_alert).mean()),
            },
            UPTIME_CORRELATION.name: uptime_correlation(periodic),
        },
    }
    prompt_tokens = float(requests["prompt_tokens"].sum())
    cached = requests["cached_tokens"]
    summary["prefix_cache"] = {
        "cached_prompt_tokens": int(cached.sum()),
        "share_of_prompt_tokens": float(cached.sum()) / prompt_tokens if prompt_tokens else 0.0,
        "requests_with_hits": int((cached > 0).sum()),
    }
    summary["alerts"] = _alerts(fails, high, periodic, thresholds)
    return _clean(summary)


MIN_CORRELATION_SAMPLES = 10
"""The fewest periodic samples with a ratio the run-wide uptime correlation is taken over."""


def uptime_correlation(periodic: pd.DataFrame) -> dict[str, Any]:
    """Spearman rho of (uptime since the last restart, fragmentation 1 - ratio) over the
    periodic samples that have a ratio, all replicas pooled, with its p-value and the
    number of samples; rho and p are None with fewer than
    :data:`MIN_CORRELATION_SAMPLES` samples, fewer than three uptimes or a constant
    fragmentation."""
    valid = periodic.dropna(subset=["largest_contiguous_free_block_ratio"])
    out: dict[str, Any] = {"spearman_rho": None, "p_value": None, "samples": len(valid)}
    frag = 1.0 - valid["largest_contiguous_free_block_ratio"]
    enough = len(valid) >= MIN_CORRELATION_SAMPLES and valid["uptime_s"].nunique() > 2
    if enough and frag.nunique() > 1:
        rho, p = sps.spearmanr(valid["uptime_s"], frag)
        out |= {"spearman_rho": float(rho), "p_value": float(p)}
    return out


def _alerts(
    fails: pd.DataFrame, high: pd.DataFrame, periodic: pd.DataFrame, th: AlertThresholds
) -> list[dict[str, Any]]:
    def entry(name: str) -> dict[str, Any]:
        spec = BY_NAME[name]
        return {"alert": name, "severity": spec.severity, "condition": condition(spec, th)}

    alerts: list[dict[str, Any]] = []
    if len(high):
        alerts.append(
            entry(FRAGMENTATION_FAILURE.name)
            | {
                "matching_failures": len(high),
                "first_time_s": float(high["time_s"].min()),
                "replicas": sorted(int(r) for r in high["replica"].unique()),
            }
        )
    ratio = periodic["largest_contiguous_free_block_ratio"]
    for spec, limit in (
        (SEVERE_FRAGMENTATION, th.ratio_severe),
        (HIGH_FRAGMENTATION, th.ratio_alert),
    ):
        low = periodic[ratio < limit]
        if len(low):
            alerts.append(
                entry(spec.name)
                | {
                    "matching_samples": len(low),
                    "first_time_s": float(low["time_s"].min()),
                    "replicas": sorted(int(r) for r in low["replica"].unique()),
                }
            )
    corr = uptime_correlation(periodic)
    rho, p = corr["spearman_rho"], corr["p_value"]
    if rho is not None and rho >= th.uptime_rho_alert and p < 0.01:
        valid = periodic.dropna(subset=["largest_contiguous_free_block_ratio"])
        frag = 1.0 - valid["largest_contiguous_free_block_ratio"]
        tail = float(frag.iloc[-max(3, len(frag) // 10) :].mean())
        if tail > 1 - th.ratio_alert:
            alerts.append(
                entry(UPTIME_CORRELATION.name)
                | {
                    "spearman_rho": rho,
                    "p_value": p,
                    "samples": corr["samples"],
                    "recent_fragmentation_ratio": tail,
                }
            )
    return alerts


def with_firings(
    alerts: list[dict[str, Any]],
    episodes: dict[str, tuple[int, int]],
    th: AlertThresholds,
    for_s: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The summary's alerts with ``condition_episodes`` and ``firings`` on every entry
    (``episodes``: alert -> the episodes its condition held at a scrape, and those that
    held its ``for:`` and fired, in the alert log; 0 where it never did), and an entry
    for an alert whose condition held in the log although its run-wide condition did not
    (the uptime correlation over one window, not the whole run); in :data:`ALERTS`
    order."""
    unknown = set(episodes) - set(BY_NAME)
    if unknown:
        raise ValueError(f"not alerts of the seed: {sorted(unknown)}")
    have = {a["alert"]: a for a in alerts}
    out = []
    for spec in ALERTS:
        found = have.get(spec.name)
        held, fired = (int(n) for n in episodes.get(spec.name, (0, 0)))
        if found is None and held:
            found = {"alert": spec.name, "severity": spec.severity}
            found["condition"] = condition(spec, th)
        if found is not None:
            counts: dict[str, Any] = {"condition_episodes": held, "firings": fired}
            if for_s is not None and spec.name in for_s:
                counts["for_s"] = float(for_s[spec.name])
            out.append(found | counts)
    return out


def _duration(seconds: float) -> str:
    """``60`` -> ``1m``, ``90`` -> ``1m30s``: a rule's ``for:`` as Prometheus writes it."""
    whole = round(seconds)
    minutes, rest = divmod(whole, 60)
    return (f"{minutes}m" if minutes else "") + (f"{rest}s" if rest or not minutes else "")


def alert_lines(summary: Summary) -> list[str]:
    """One line per alert of ``summary``, both counts named: what ``fragsim run`` and
    the reports print."""
    lines = []
    run_rho = summary.memory.node_uptime_vs_fragmentation_correlation.spearman_rho
    for a in summary.alerts:
        counts = []
        if a.matching_failures is not None:
            counts.append(f"{a.matching_failures:,} matching failures")
        if a.matching_samples is not None:
            counts.append(f"{a.matching_samples:,} matching samples")
        if a.spearman_rho is not None:
            counts.append(f"Spearman rho {a.spearman_rho:.2f} over the run")
        elif a.alert == UPTIME_CORRELATION.name and run_rho is not None:
            # fired in windows, not run-wide
            counts.append(f"Spearman rho {run_rho:.2f} over the whole run (condition not met)")
        if a.firings is not None:
            held, n = (
                a.condition_episodes if a.condition_episodes is not None else a.firings,
                a.firings,
            )
            hold = f" after for: {_duration(a.for_s)}" if a.for_s else ""
            counts.append(
                f"condition held in {held:,} episode{'' if held == 1 else 's'}, "
                f"{n:,} fired{hold} (alerts.parquet)"
            )
        if a.first_time_s is not None:
            counts.append(f"first at {a.first_time_s:,.0f} s")
        shown = f" — {'; '.join(counts)}" if counts else ""
        lines.append(f"ALERT ({a.severity}) {a.alert}: {a.condition}{shown}")
    return lines


def _clean(value: Any) -> Any:
    """NaN/inf -> None so the JSON is strict and stable."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
