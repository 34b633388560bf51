"""The fleet seed's alerts, named once: every place that writes or prints an alert (the
run summary, ``alerts.parquet``, ``events.parquet``, the exported Prometheus rules,
``fragsim alerts show``, the reports) takes its name, severity, condition and response
from here.

Names are the seed's own titles in snake_case ("Fragmentation-driven allocation
failure" -> ``fragmentation_driven_allocation_failure``): the seed writes its metrics in
snake_case (``largest_contiguous_free_block_ratio``), snake_case is a valid Prometheus
alert name, and the run summary has always used it. The uptime alert carries the seed's
metric name ``node_uptime_vs_fragmentation_correlation`` (its table gives that metric
the alert threshold; its alert table has no row of its own).

Two counts go with an alert and must not be confused:

* *matching failures* (or *matching samples*): every allocation failure (every periodic
  sample) that meets the condition, counted over the whole run (``summary.json``);
* *condition episodes* and *firings* (``alerts.parquet``, fleet runs): the rule
  evaluated at every scrape as Prometheus evaluates it; an episode is a stretch of
  scrapes where its condition held (several failures in one window, or in consecutive
  windows, are one), a firing an episode that held the rule's ``for:``
  (:mod:`sim.telemetry.alert_states`).

A run with KV offload tiers (``kv_offload``) has one more alert per tier kind,
:data:`TIER_ALERTS` (``offload_<kind>_tier_fragmentation``), defined here beside the
seed's and carried by the same outputs; :func:`alerts_for` gives a run's list. A run
without tiers has exactly the seed's four.

The correlation statistic is one, everywhere: Spearman's rank correlation rho of
(uptime since the last restart, fragmentation ``1 - largest_contiguous_free_block_ratio``),
:func:`spearman_rho`. The seed asks whether fragmentation is *monotonically* increasing
with uptime: a rank correlation measures exactly that, whatever the shape of the rise
(fragmentation saturates: not linear), and a few extreme samples (a pool drained to
ratio 1, a single spike) move it far less than Pearson's r, on samples that are mostly
zero fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import rankdata

from sim.results.offload_summary import TIER_KINDS

Severity = Literal["high", "medium"]


FAILURE_KINDS = ("admission_failure", "growth_failure")
"""The event kinds that are allocation failures (what the failure alerts, the OpenMetrics
counters, the summary and the reports count)."""


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """The seed's thresholds (a scenario's ``metrics`` block can change them)."""

    high_free_share: float = 0.25
    """A failure while the free share of KV memory *exceeds* this is fragmentation-driven."""
    ratio_alert: float = 0.6
    """``high_fragmentation_approaching_threshold`` below this ratio."""
    ratio_severe: float = 0.5
    """``severe_fragmentation`` below this ratio."""
    uptime_rho_alert: float = 0.5
    """Spearman rho of (uptime, fragmentation) at or above which the uptime alert fires."""


DEFAULT_THRESHOLDS = AlertThresholds()
"""The seed's thresholds (the scenario's ``metrics`` defaults)."""

THRESHOLD_FIELDS = ("high_free_share", "ratio_alert", "ratio_severe", "uptime_rho_alert")
""":class:`AlertThresholds`' fields, as a fleet run's summary records them
(``fleet.alerts.thresholds``)."""


@dataclass(frozen=True, slots=True)
class AlertSpec:
    """One alert of the seed: its one name, severity, a one-line summary and the seed's
    response."""

    name: str
    severity: Severity
    summary: str
    response: str


FRAGMENTATION_FAILURE = AlertSpec(
    "fragmentation_driven_allocation_failure",
    "high",
    "Allocation failure while aggregate free memory exceeds the high-free threshold",
    "Restart the affected node; investigate whether a paged allocator migration is warranted",
)
SEVERE_FRAGMENTATION = AlertSpec(
    "severe_fragmentation",
    "high",
    "largest_contiguous_free_block_ratio below the severe threshold",
    "Restart the affected node before allocations fail; avoid autoscaling in response",
)
HIGH_FRAGMENTATION = AlertSpec(
    "high_fragmentation_approaching_threshold",
    "medium",
    "largest_contiguous_free_block_ratio below the alert threshold",
    "Schedule proactive restart before failures occur; avoid autoscaling in response",
)
UPTIME_CORRELATION = AlertSpec(
    "node_uptime_vs_fragmentation_correlation",
    "medium",
    "Fragmentation rises with uptime since the last restart, past the alert level",
    "Schedule periodic restarts (rolling recycling) of long-uptime nodes before "
    "fragmentation causes allocation failures; avoid autoscaling in response",
)
ALERTS: tuple[AlertSpec, ...] = (
    FRAGMENTATION_FAILURE,
    SEVERE_FRAGMENTATION,
    HIGH_FRAGMENTATION,
    UPTIME_CORRELATION,
)
"""Every alert, in the order outputs list them."""


def _tier_alert(kind: str) -> AlertSpec:
    return AlertSpec(
        f"offload_{kind}_tier_fragmentation",
        "medium",
        f"The {kind} KV tier is fragmented while much of it is free",
        f"Give the {kind} tier a paged allocator (fixed-size chunks, as vLLM's CPU tier): "
        "its contiguous allocator evicts and refuses objects its free memory would hold; "
        "more tier capacity does not remove the fragmentation",
    )


TIER_ALERTS: tuple[AlertSpec, ...] = tuple(_tier_alert(kind) for kind in TIER_KINDS)
"""One alert per KV offload tier kind (``kv_offload``), in
:data:`~sim.results.offload_summary.TIER_KINDS` order: the tier's
``largest_contiguous_free_block_ratio`` below ``ratio_alert`` while its free share
exceeds ``high_free_share`` (Mooncake's store refuses puts at 70-85 % utilisation with
15-30 % free, kvcache-ai/Mooncake issue 4258). A run, a rules file or a log has them only
for the tier kinds it has: a run without tiers is as before."""

TIER_ALERT = dict(zip(TIER_KINDS, TIER_ALERTS, strict=True))
"""Tier kind -> its alert."""

ALL_ALERTS: tuple[AlertSpec, ...] = ALERTS + TIER_ALERTS
"""The seed's alerts, then the tiers'."""

BY_NAME = {spec.name: spec for spec in ALL_ALERTS}


def tier_of(spec: AlertSpec) -> str | None:
    """The tier kind a tier alert reads; None for the seed's alerts."""
    return next((kind for kind, tier in TIER_ALERT.items() if tier is spec), None)


def alerts_for(tier_kinds: tuple[str, ...] | list[str] = ()) -> tuple[AlertSpec, ...]:
    """The alerts of a run with these tier kinds: the seed's, then one per kind present
    (in :data:`TIER_KINDS` order)."""
    unknown = set(tier_kinds) - set(TIER_KINDS)
    if unknown:
        raise ValueError(f"not tier kinds: {sorted(unknown)}")
    return ALERTS + tuple(TIER_ALERT[k] for k in TIER_KINDS if k in tier_kinds)


def condition(spec: AlertSpec, th: AlertThresholds) -> str:
    """The alert's condition in one line, with the thresholds in force."""
    kind = tier_of(spec)
    if kind is not None:
        return (
            f"{kind} tier: largest_contiguous_free_block_ratio < {th.ratio_alert:g} "
            f"while free > {th.high_free_share:.0%}"
        )
    return {
        FRAGMENTATION_FAILURE.name: (
            f"allocation failure while free KV memory > {th.high_free_share:.0%}"
        ),
        SEVERE_FRAGMENTATION.name: f"largest_contiguous_free_block_ratio < {th.ratio_severe:g}",
        HIGH_FRAGMENTATION.name: f"largest_contiguous_free_block_ratio < {th.ratio_alert:g}",
        UPTIME_CORRELATION.name: (
            f"Spearman rho(uptime, 1 - ratio) >= {th.uptime_rho_alert:g} and "
            f"1 - ratio > {1 - th.ratio_alert:g}"
        ),
    }[spec.name]


def spearman_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair of ``x`` and ``y`` (shape ``(rows, n)``): Pearson's
    r of their average ranks (ties share the mean rank), over the positions where both
    are not NaN. NaN for a row with fewer than two such positions or where either is
    constant (a constant has no rank order). Equals ``scipy.stats.spearmanr`` on each
    row's valid positions."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    y = np.atleast_2d(np.asarray(y, dtype=float))
    both = ~(np.isnan(x) | np.isnan(y))
    rx = rankdata(np.where(both, x, np.nan), axis=1, nan_policy="omit")
    ry = rankdata(np.where(both, y, np.nan), axis=1, nan_policy="omit")
    out = np.full(x.shape[0], np.nan)
    count = both.sum(axis=1)
    ok = count >= 2
    if not ok.any():
        return out
    rx, ry = rx[ok], ry[ok]
    dx = rx - np.nanmean(rx, axis=1, keepdims=True)
    dy = ry - np.nanmean(ry, axis=1, keepdims=True)
    sxx, syy = np.nansum(dx * dx, axis=1), np.nansum(dy * dy, axis=1)
    flat = (sxx == 0) | (syy == 0)
    rho = np.nansum(dx * dy, axis=1) / np.sqrt(np.where(flat, 1.0, sxx * syy))
    out[ok] = np.where(flat, np.nan, np.clip(rho, -1.0, 1.0))
    return out
