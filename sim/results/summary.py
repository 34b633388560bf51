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

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd
from scipy import stats as sps

from sim.results.labels import WASTE_LABELS
from sim.results.seed_alerts import (
    ALL_ALERTS,
    BY_NAME,
    FAILURE_KINDS,
    FRAGMENTATION_FAILURE,
    HIGH_FRAGMENTATION,
    SEVERE_FRAGMENTATION,
    UPTIME_CORRELATION,
    AlertThresholds,
    condition,
)
from sim.results.summary_model import Summary
from sim.results.summary_sections import (
    Alert,
    Failures,
    Latency,
    LatencyReport,
    Memory,
    Percentiles,
    PrefixCache,
    RatioStats,
    Requests,
    Throughput,
    UptimeCorrelation,
    finite,
)
from sim.results.tier_alerts import tier_alert_entries

__all__ = ["AlertThresholds", "PoolReport", "RunStats", "alert_lines", "summarize", "with_firings"]

SEED_THRESHOLDS = AlertThresholds()


def _pct(values: pd.Series, q: float) -> float | None:
    v = values.dropna()
    if v.empty:
        return None
    return finite(float(np.percentile(v.to_numpy(dtype=float), q)))


def _percentiles(values: pd.Series) -> Percentiles:
    return Percentiles(
        p50=_pct(values, 50),
        p90=_pct(values, 90),
        p99=_pct(values, 99),
        mean=None if values.dropna().empty else finite(float(values.mean())),
    )


def _by_cause(rows: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in rows["cause"].value_counts().sort_index().items()}


@dataclass(frozen=True, slots=True)
class RunStats:
    """The summary's sections that :func:`summarize` measures from a run's tables, as
    the typed model's sections (:mod:`sim.results.summary_sections`); the run's
    identity, pools, counters and a fleet's section are added where the
    :class:`~sim.results.summary_model.Summary` is built (``sim.outputs``)."""

    requests: Requests
    span_s: float
    throughput: Throughput
    latency_s: Latency
    failures: Failures
    memory: Memory
    prefix_cache: PrefixCache
    alerts: list[Alert]


@dataclass(frozen=True, slots=True)
class PoolReport:
    """One pool's replicas as the summary describes them (``sim.outputs.pool_report``):
    the run-wide fields of a single pool, and each pool's entry in ``fleet.pools``."""

    allocator: str
    kv_capacity_tokens: int
    kv_bytes_per_token: int
    latency: LatencyReport
    kv_layout: list[str] | None
    """A KV manager's memory layout (None: a single-pool policy's, never written)."""


def summarize(
    requests: pd.DataFrame,
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    *,
    end_s: float,
    thresholds: AlertThresholds = SEED_THRESHOLDS,
    beyond_duration: int | None = None,
    kv_manager_waste: dict[str, float] | None = None,
    prefix_counts: dict[str, int] | None = None,
) -> RunStats:
    """The measured sections; same frames in, same sections out (an undefined
    statistic, NaN or an infinity, as None). ``beyond_duration`` (the requests left out
    after ``duration_s``; None: the run has no duration) and a KV manager's
    ``kv_manager_waste`` go in as given, and so do vLLM's prefix-cache counters
    ``prefix_counts`` (``sim.outputs.prefix_cache_counts``: the ``prefix_cache``
    section's ``queried_tokens``, ``hit_tokens``, ... where the run has them)."""
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

    fails = events[events["kind"].isin(FAILURE_KINDS)]
    high = fails[fails["free_share"] > thresholds.high_free_share]
    periodic = timeseries[(timeseries["trigger"] == "periodic") & timeseries["up"]]
    shares = {
        name: None if periodic.empty else finite(float(periodic[f"share_{name}"].mean()))
        for name in WASTE_LABELS
    }
    kv_waste = (
        {}
        if kv_manager_waste is None
        else {"kv_manager_waste": {k: finite(v) for k, v in kv_manager_waste.items()}}
    )
    memory = Memory(
        mean_used_share=shares["token_states"],
        waste_breakdown=shares,
        largest_contiguous_free_block_ratio=RatioStats.of_samples(
            periodic["largest_contiguous_free_block_ratio"], thresholds.ratio_alert
        ),
        node_uptime_vs_fragmentation_correlation=uptime_correlation(periodic),
        **kv_waste,
    )
    beyond = {} if beyond_duration is None else {"beyond_duration": beyond_duration}
    return RunStats(
        requests=Requests(total=len(requests), by_status=counts, **beyond),
        span_s=span_s,
        throughput=Throughput(
            requests_per_s=len(ok) / span_s, output_tokens_per_s=out_tokens / span_s
        ),
        latency_s=Latency(
            ttft=_percentiles(ok["first_token_s"] - ok["arrival_s"]),
            tpot=_percentiles(tpot),
            e2e=_percentiles(ok["finish_s"] - ok["arrival_s"]),
        ),
        failures=Failures(
            allocation_failures=len(fails),
            by_cause=_by_cause(fails),
            at_high_free_memory=len(high),
            at_high_free_memory_by_cause=_by_cause(high),
            allocation_failure_rate_at_high_free_memory=len(high) / span_s,
            preemptions=int((events["kind"] == "preemption").sum()),
            restarts=int((events["kind"] == "restart").sum()),
        ),
        memory=memory,
        prefix_cache=_prefix_cache(requests, prefix_counts or {}),
        alerts=_alerts(fails, high, periodic, thresholds)
        + tier_alert_entries(periodic, thresholds),
    )


def _prefix_cache(requests: pd.DataFrame, counts: dict[str, int]) -> PrefixCache:
    """The ``prefix_cache`` section: the requests' cached prompt tokens, and vLLM's
    ``counts`` (:func:`summarize`'s ``prefix_counts``)."""
    prompt_tokens = float(requests["prompt_tokens"].sum())
    cached = requests["cached_tokens"]
    return PrefixCache(
        cached_prompt_tokens=int(cached.sum()),
        share_of_prompt_tokens=float(cached.sum()) / prompt_tokens if prompt_tokens else 0.0,
        requests_with_hits=int((cached > 0).sum()),
        **counts,
    )


MIN_CORRELATION_SAMPLES = 10
"""The fewest periodic samples with a ratio the run-wide uptime correlation is taken over."""


def uptime_correlation(periodic: pd.DataFrame) -> UptimeCorrelation:
    """Spearman rho of (uptime since the last restart, fragmentation 1 - ratio) over the
    periodic samples that have a ratio, all replicas pooled, with its p-value and the
    number of samples; rho and p are None with fewer than
    :data:`MIN_CORRELATION_SAMPLES` samples, fewer than three uptimes or a constant
    fragmentation."""
    valid = periodic.dropna(subset=["largest_contiguous_free_block_ratio"])
    frag = 1.0 - valid["largest_contiguous_free_block_ratio"]
    enough = len(valid) >= MIN_CORRELATION_SAMPLES and valid["uptime_s"].nunique() > 2
    if enough and frag.nunique() > 1:
        rho, p = sps.spearmanr(valid["uptime_s"], frag)
        return UptimeCorrelation(
            spearman_rho=finite(float(rho)), p_value=finite(float(p)), samples=len(valid)
        )
    return UptimeCorrelation(spearman_rho=None, p_value=None, samples=len(valid))


def _alerts(
    fails: pd.DataFrame, high: pd.DataFrame, periodic: pd.DataFrame, th: AlertThresholds
) -> list[Alert]:
    alerts: list[Alert] = []
    if len(high):
        alerts.append(
            Alert(
                **_head(FRAGMENTATION_FAILURE.name, th),
                matching_failures=len(high),
                first_time_s=float(high["time_s"].min()),
                replicas=sorted(int(r) for r in high["replica"].unique()),
            )
        )
    ratio = periodic["largest_contiguous_free_block_ratio"]
    for spec, limit in (
        (SEVERE_FRAGMENTATION, th.ratio_severe),
        (HIGH_FRAGMENTATION, th.ratio_alert),
    ):
        low = periodic[ratio < limit]
        if len(low):
            alerts.append(
                Alert(
                    **_head(spec.name, th),
                    matching_samples=len(low),
                    first_time_s=float(low["time_s"].min()),
                    replicas=sorted(int(r) for r in low["replica"].unique()),
                )
            )
    corr = uptime_correlation(periodic)
    rho, p = corr.spearman_rho, corr.p_value
    if rho is not None and p is not None and rho >= th.uptime_rho_alert and p < 0.01:
        valid = periodic.dropna(subset=["largest_contiguous_free_block_ratio"])
        frag = 1.0 - valid["largest_contiguous_free_block_ratio"]
        tail = float(frag.iloc[-max(3, len(frag) // 10) :].mean())
        if tail > 1 - th.ratio_alert:
            alerts.append(
                Alert(
                    **_head(UPTIME_CORRELATION.name, th),
                    spearman_rho=rho,
                    p_value=p,
                    samples=corr.samples,
                    recent_fragmentation_ratio=finite(tail),
                )
            )
    return alerts


class _Head(TypedDict):
    """The fields every alert entry has (:class:`~sim.results.summary_sections.Alert`)."""

    alert: str
    severity: str
    condition: str


def _head(name: str, th: AlertThresholds) -> _Head:
    """Alert ``name``'s name, severity and condition (with the thresholds ``th``): the
    start of its summary entry, to which the counts that are its own are added."""
    spec = BY_NAME[name]
    return _Head(alert=name, severity=spec.severity, condition=condition(spec, th))


class _Firings(TypedDict, total=False):
    """What :func:`with_firings` adds to an entry (``for_s`` where the rule has one)."""

    condition_episodes: int
    firings: int
    for_s: float


def with_firings(
    alerts: list[Alert],
    episodes: dict[str, tuple[int, int]],
    th: AlertThresholds,
    for_s: dict[str, float] | None = None,
) -> list[Alert]:
    """The summary's alerts with ``condition_episodes`` and ``firings`` on every entry
    (``episodes``: alert -> the episodes its condition held at a scrape, and those that
    held its ``for:`` and fired, in the alert log; 0 where it never did), and an entry
    for an alert whose condition held in the log although its run-wide condition did not
    (the uptime correlation over one window, not the whole run); in :data:`ALL_ALERTS`
    order."""
    unknown = set(episodes) - set(BY_NAME)
    if unknown:
        raise ValueError(f"not alerts of the seed: {sorted(unknown)}")
    have = {a.alert: a for a in alerts}
    out = []
    for spec in ALL_ALERTS:
        found = have.get(spec.name)
        held, fired = (int(n) for n in episodes.get(spec.name, (0, 0)))
        if found is None and not held:
            continue
        counts = _Firings(condition_episodes=held, firings=fired)
        if for_s is not None and spec.name in for_s:
            counts["for_s"] = float(for_s[spec.name])
        if found is None:
            out.append(Alert(**_head(spec.name, th), **counts))
        else:  # the counts are never its own: they are new fields, set as given
            out.append(found.model_copy(update=counts))
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
