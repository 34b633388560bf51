"""The summary's entries of the KV offload tiers' alerts
(:data:`~sim.results.seed_alerts.TIER_ALERTS`): per tier kind of the run, the periodic
samples where the tier's ``largest_contiguous_free_block_ratio`` was below
``ratio_alert`` while more than ``high_free_share`` of it was free. A run without tiers
has no tier columns and gets no entry; a tier that never met the condition gets none
either (as the seed's ratio alerts)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.results.offload_summary import TIER_KINDS
from sim.results.seed_alerts import TIER_ALERT, AlertThresholds, condition
from sim.results.summary_sections import Alert


def tier_alert_entries(periodic: pd.DataFrame, th: AlertThresholds) -> list[Alert]:
    """The summary's alert entries of the tiers (module docstring), in tier-kind order;
    ``periodic``: the run's periodic samples of replicas up, as the ratio alerts read."""
    out: list[Alert] = []
    for kind in TIER_KINDS:
        ratio_column = f"offload_{kind}_largest_contiguous_free_block_ratio"
        if ratio_column not in periodic.columns:
            continue
        ratio = periodic[ratio_column].to_numpy(dtype=float)
        free = periodic[f"offload_{kind}_free_bytes"].to_numpy(dtype=float)
        capacity = periodic[f"offload_{kind}_capacity_bytes"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            held = (ratio < th.ratio_alert) & (free / capacity > th.high_free_share)
        if not held.any():
            continue
        low = periodic[held]
        spec = TIER_ALERT[kind]
        out.append(
            Alert(
                alert=spec.name,
                severity=spec.severity,
                condition=condition(spec, th),
                matching_samples=int(held.sum()),
                first_time_s=float(low["time_s"].min()),
                replicas=sorted(int(r) for r in low["replica"].unique()),
            )
        )
    return out
