"""A disaggregated fleet's outputs (``sim.fleet.disagg``), beside every fleet's:

* ``requests`` gains, per request, ``prefill_replica`` (where its last prefill ran; -1:
  none ended), ``decode_replica`` (where its KV was last sent; -1: none),
  ``transfer_s`` (its last transfer's time; NaN: none), ``kv_transfer_bytes`` (every
  transfer together), ``transfer_refusals``, ``refusal_cause`` and ``refusal_fate`` (the
  last refusal's; empty: none); a request a refused hand-off failed is diagnosed
  ``KV hand-off refused (CAUSE)``;
* the summary's ``fleet.disagg``: the link, the transfers (started, landed, bytes, mean
  and p99 time), refusals by cause and by fate, and each role's memory (the periodic
  samples of its replicas: used share, the fragmentation ratio, allocation failures,
  preemptions, the alerts that fired on them), so that the prefill side's churn and the decode side's long-lived KV
  are read apart.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from sim.fleet.disagg import Disagg, Handoff
from sim.results.summary_fleet import Disagg as DisaggSection
from sim.results.summary_fleet import KVLink, RoleMemory, Transfers
from sim.results.summary_sections import RatioStats, finite

HANDOFF_COLUMNS = (
    "prefill_replica",
    "decode_replica",
    "transfer_s",
    "kv_transfer_bytes",
    "transfer_refusals",
    "refusal_cause",
    "refusal_fate",
)
"""The columns a disaggregated fleet adds to ``requests``, in order (``Handoff``'s fields)."""


def with_handoffs(req: pd.DataFrame, disagg: Disagg) -> pd.DataFrame:
    """``req`` (sorted by request id) with :data:`HANDOFF_COLUMNS`, in place."""
    disagg.settle()
    none = Handoff()
    records = [disagg.handoffs.get(rid, none) for rid in req["request_id"].tolist()]
    for name in HANDOFF_COLUMNS:
        values = [getattr(r, name) for r in records]
        if name in ("refusal_cause", "refusal_fate"):
            req[name] = pd.Series(values, dtype=object, index=req.index)
        elif name == "transfer_s":
            req[name] = np.array(values, dtype=np.float64)
        else:
            req[name] = np.array(values, dtype=np.int64)
    return req


def with_handoff_diagnosis(req: pd.DataFrame, disagg: Disagg) -> pd.DataFrame:
    """``req`` (with its ``diagnosis`` and :data:`HANDOFF_COLUMNS`) with the requests a
    refused hand-off ended (their last refusal's fate ``fail``, at their finish) diagnosed
    ``KV hand-off refused (CAUSE)``: the refusal is the router's, and an allocation
    failure the request met before it is not what ended it."""
    none = Handoff()
    refused_s = [disagg.handoffs.get(rid, none).refused_s for rid in req["request_id"].tolist()]
    ended = req["finish_s"].to_numpy() == np.array(refused_s, dtype=np.float64)
    refused = (
        (req["refusal_fate"] == "fail")
        & ended
        & req["status"].astype(str).str.startswith("rejected-")
    )
    if refused.any():
        text = "KV hand-off refused (" + req.loc[refused, "refusal_cause"].astype(str) + ")"
        req.loc[refused, "diagnosis"] = text
    return req


def disagg_summary(
    disagg: Disagg,
    roles_by_replica: Mapping[int, str],
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    ratio_alert: float,
) -> DisaggSection:
    """The summary's ``fleet.disagg`` section of the run's (timeseries, events, alerts);
    ``roles_by_replica``: each replica's role."""
    disagg.settle()
    link = disagg.link
    times = np.array(disagg.transfer_times_s, dtype=np.float64)

    def role(name: str) -> RoleMemory:
        mine = [r for r, x in sorted(roles_by_replica.items()) if x == name]
        return role_memory(mine, frames, ratio_alert)

    return DisaggSection(
        link=KVLink(
            bandwidth_gbps=None if link.bandwidth_gbps is None else float(link.bandwidth_gbps),
            latency_s=float(link.latency_s),
            on_refusal=link.on_refusal,
        ),
        transfers=Transfers(
            started=disagg.transfers_started,
            landed=disagg.transfers_landed,
            kv_bytes=disagg.kv_bytes_total,
            mean_s=finite(float(times.mean())) if len(times) else None,
            p99_s=finite(float(np.percentile(times, 99))) if len(times) else None,
        ),
        refusals=dict(sorted(disagg.refusals.items())),
        fates=dict(sorted(disagg.fates.items())),
        prefill=role("prefill"),
        decode=role("decode"),
    )


def role_memory(
    replicas: list[int],
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    ratio_alert: float,
) -> RoleMemory:
    """One role's memory over the periodic samples of its ``replicas`` up (as the
    summary's ``memory`` is over every replica's), its failures, preemptions and the
    alerts that fired on them."""
    timeseries, events, alerts = frames
    ts = timeseries[timeseries["replica"].isin(replicas)]
    periodic = ts[(ts["trigger"] == "periodic") & ts["up"]]
    used = periodic["used_tokens"] / periodic["capacity_tokens"]
    ev = events[events["replica"].isin(replicas)]
    mine = alerts[alerts["replica"].isin(replicas) & (alerts["state"] == "firing")]
    fired = mine["alert"].astype(str)
    return RoleMemory(
        replicas=replicas,
        mean_used_share=finite(float(used.mean())) if len(used) else None,
        largest_contiguous_free_block_ratio=RatioStats.of_samples(
            periodic["largest_contiguous_free_block_ratio"], ratio_alert
        ),
        allocation_failures=int(ev["kind"].isin(["admission_failure", "growth_failure"]).sum()),
        preemptions=int((ev["kind"] == "preemption").sum()),
        alerts_fired={str(k): int(v) for k, v in fired.value_counts().sort_index().items()},
    )
