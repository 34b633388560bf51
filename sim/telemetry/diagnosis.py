"""A diagnosis of every failed request of a run: the allocation failure that ended it and
what it means (fragmentation on a capable node, or a genuine capacity shortage). A pure
function of the run's ``requests`` and ``events`` frames, read the same way for a single
replica and a fleet; the alerts over the same frames are :mod:`sim.telemetry.alerts`.
"""

from __future__ import annotations

import pandas as pd

from sim.results.seed_alerts import DEFAULT_THRESHOLDS, FAILURE_KINDS, AlertThresholds

FAILED_PREFIXES = ("rejected-", "failed-")

DIAGNOSES = {
    "fragmentation": "fragmentation on a capable node",
    "capacity": "capacity shortage",
}
"""The allocator's cause of a failure -> its diagnosis. Fragmentation: total free >=
the need but no usable extent is large enough (restart or defragment the node; adding
replicas does not help); capacity: not enough free memory at all (a genuine shortage)."""

DIAGNOSIS_COLUMNS = (
    "request_id",
    "replica",
    "status",
    "diagnosis",
    "cause",
    "failure_s",
    "need_tokens",
    "free_tokens",
    "largest_free_extent_tokens",
    "free_share",
    "at_high_free_memory",
)


def diagnose_failures(
    requests: pd.DataFrame,
    events: pd.DataFrame,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
) -> pd.DataFrame:
    """One row per failed request (status ``rejected-*`` / ``failed-*``), in the order of
    ``requests``, with the columns :data:`DIAGNOSIS_COLUMNS`: the request's last
    allocation failure (the one that ended it; a retried request may have failed on
    several replicas) and its diagnosis (:data:`DIAGNOSES`); ``at_high_free_memory``:
    its free share exceeded ``high_free_share``. A request refused with no allocation
    failure (``rejected-too-long``: longer than the node's maximum sequence) is
    ``request too long``, with missing pool columns.

    To add the diagnosis to the requests table::

        requests.merge(diagnose_failures(requests, events)[["request_id", "diagnosis"]],
                       on="request_id", how="left")
    """
    failed = requests[requests["status"].astype(str).str.startswith(FAILED_PREFIXES)]
    fails = events[events["kind"].isin(FAILURE_KINDS)]
    last = fails.sort_values("time_s", kind="stable").drop_duplicates("request_id", keep="last")
    last = last.rename(columns={"time_s": "failure_s", "replica": "failure_replica"})
    out = failed[["request_id", "replica", "status"]].merge(
        last[
            [
                "request_id",
                "failure_replica",
                "cause",
                "failure_s",
                "need_tokens",
                "free_tokens",
                "largest_free_extent_tokens",
                "free_share",
            ]
        ],
        on="request_id",
        how="left",
    )
    out["replica"] = out["failure_replica"].fillna(out["replica"]).astype("int64")
    cause = out["cause"].fillna("")
    out["cause"] = cause
    out["diagnosis"] = cause.map(DIAGNOSES).fillna("request too long")
    out.loc[out["status"] != "rejected-too-long", "diagnosis"] = out["diagnosis"].where(
        cause != "", "unknown (no allocation failure recorded)"
    )
    out["at_high_free_memory"] = out["free_share"] > thresholds.high_free_share
    return out[list(DIAGNOSIS_COLUMNS)].reset_index(drop=True)
