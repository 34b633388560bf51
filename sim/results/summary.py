"""The run summary: throughput, latency percentiles, failures by cause, memory use, the
waste breakdown, and the seed's alerts evaluated over the run.

Alerts (thresholds from the fleet seed, configurable in the scenario's ``metrics``):

* ``fragmentation_driven_allocation_failure`` (high): an allocation failure while
  aggregate free memory > ``high_free_share`` (25 %).
* ``high_fragmentation`` (medium): ``largest_contiguous_free_block_ratio`` <
  ``ratio_alert`` (0.6) on a periodic sample; ``severe_fragmentation`` below
  ``ratio_severe`` (0.5).
* ``uptime_fragmentation_correlation`` (medium): the fragmentation ratio
  (1 - largest/free) rises with uptime since the last restart (Spearman rho >=
  ``uptime_rho_alert``, p < 0.01) and its recent level is past ``ratio_alert``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    high_free_share: float = 0.25
    ratio_alert: float = 0.6
    ratio_severe: float = 0.5
    uptime_rho_alert: float = 0.5


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
    thresholds: AlertThresholds = AlertThresholds(),
) -> dict[str, Any]:
    """A JSON-ready dict; same frames in, same dict out."""
    ok = requests[requests["status"] == "ok"]
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
        for name in (
            "token_states",
            "reservation",
            "internal_fragmentation",
            "external_fragmentation_free",
        )
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


def _alerts(
    fails: pd.DataFrame, high: pd.DataFrame, periodic: pd.DataFrame, th: AlertThresholds
) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = []
    if len(high):
        alerts.append(
            {
                "alert": "fragmentation_driven_allocation_failure",
                "severity": "high",
                "condition": f"allocation failure while free memory > {th.high_free_share:.0%}",
                "count": len(high),
                "first_time_s": float(high["time_s"].min()),
                "replicas": sorted(int(r) for r in high["replica"].unique()),
            }
        )
    ratio = periodic["largest_contiguous_free_block_ratio"]
    for name, sev, limit in (
        ("severe_fragmentation", "high", th.ratio_severe),
        ("high_fragmentation", "medium", th.ratio_alert),
    ):
        low = periodic[ratio < limit]
        if len(low):
            alerts.append(
                {
                    "alert": name,
                    "severity": sev,
                    "condition": f"largest_contiguous_free_block_ratio < {limit}",
                    "count": len(low),
                    "first_time_s": float(low["time_s"].min()),
                    "replicas": sorted(int(r) for r in low["replica"].unique()),
                }
            )
    valid = periodic.dropna(subset=["largest_contiguous_free_block_ratio"])
    if len(valid) >= 10 and valid["uptime_s"].nunique() > 2:
        frag = 1.0 - valid["largest_contiguous_free_block_ratio"]
        if frag.nunique() > 1:
            rho, p = sps.spearmanr(valid["uptime_s"], frag)
            tail = frag.iloc[-max(3, len(frag) // 10) :].mean()
            if rho >= th.uptime_rho_alert and p < 0.01 and tail > 1 - th.ratio_alert:
                alerts.append(
                    {
                        "alert": "uptime_fragmentation_correlation",
                        "severity": "medium",
                        "condition": "fragmentation ratio rises with uptime past the alert level",
                        "spearman_rho": float(rho),
                        "p_value": float(p),
                        "recent_fragmentation_ratio": float(tail),
                    }
                )
    return alerts


def _clean(value: Any) -> Any:
    """NaN/inf -> None so the JSON is strict and stable."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
