"""Disaggregated prefill and decode (``sim.fleet.disagg``) as usage stories: a request
prefills on a prefill replica, its KV moves over the link, it decodes on a decode
replica; every transfer ends, every request ends once, memory comes back; a refused
hand-off meets its fate; bad configurations are refused with the field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.fleet import evenly, fleet_data, run_fleet_data
from support.scenarios import request_frame

from policies.routing.load import LeastOutstanding
from sim.runner import run
from sim.scenario.errors import ScenarioError
from sim.scenario.schema import parse_scenario

KV_BYTES_PER_TOKEN = 524_288
"""llama-2-7b's (fp16: 2 x 32 layers x 4096 x 2 bytes), the test fleets' model."""

PD_COLUMNS = (
    "prefill_replica",
    "decode_replica",
    "transfer_s",
    "kv_transfer_bytes",
    "transfer_refusals",
    "refusal_cause",
    "refusal_fate",
)


def pd_data(
    prefill: int = 1,
    decode: int = 1,
    *,
    bandwidth_gbps: float | None = None,
    latency_s: float = 0.0,
    mode: str = "fast",
    **link: Any,
) -> dict[str, Any]:
    return fleet_data(
        pools=[
            {"name": "p", "role": "prefill", "count": prefill},
            {"name": "d", "role": "decode", "count": decode},
        ],
        router="pd",
        kv_transfer={"bandwidth_gbps": bandwidth_gbps, "latency_s": latency_s, **link},
        mode=mode,
    )


def colocated(mode: str = "fast") -> dict[str, Any]:
    return fleet_data(count=1, router="least_outstanding", mode=mode)


def _engine_columns(req: pd.DataFrame) -> pd.DataFrame:
    drop = ["replica", "first_replica", "route", "diagnosis", *PD_COLUMNS]
    return req.drop(columns=[c for c in drop if c in req.columns])


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_an_ideal_link_gives_the_colocated_fleets_requests_when_requests_do_not_overlap(
    mode: str,
) -> None:
    # Where the model says they must be equal: requests that meet an idle fleet. The
    # prefill step (prompt + first token) is the colocated replica's first step; the KV
    # lands at that instant (no bandwidth limit, no latency) on an idle decode replica,
    # which decodes the rest in the steps the colocated replica would take. Overlapping
    # requests batch differently (a colocated step mixes prefill and decode), so they
    # need not be equal.
    df = request_frame([0.0, 1.0, 2.5, 4.0], [100, 700, 300, 1500], [10, 40, 1, 25])
    pd_req = run_fleet_data(pd_data(mode=mode), df).requests
    co_req = run_fleet_data(colocated(mode), df).requests
    pd.testing.assert_frame_equal(_engine_columns(pd_req), _engine_columns(co_req))
    # The one-token request ends with its prefill, on the prefill replica.
    assert (pd_req["prefill_replica"] == 0).all()
    assert pd_req["decode_replica"].tolist() == [1, 1, -1, 1]
    assert pd_req["replica"].tolist() == [1, 1, 0, 1]
    assert pd_req["transfer_s"].fillna(-1.0).tolist() == [0.0, 0.0, -1.0, 0.0]
    want_bytes = df["prompt_tokens"] * KV_BYTES_PER_TOKEN * (df["output_tokens"] > 1)
    assert (pd_req["kv_transfer_bytes"] == want_bytes).all()


def test_a_transfer_delays_decode_by_its_time_and_not_the_first_token() -> None:
    df = request_frame([0.0, 2.0], [1000, 200], [20, 5])
    link_gbps, latency_s = 50.0, 0.002
    slow = run_fleet_data(pd_data(bandwidth_gbps=link_gbps, latency_s=latency_s), df).requests
    ideal = run_fleet_data(pd_data(), df).requests
    want_s = latency_s + 8 * df["prompt_tokens"] * KV_BYTES_PER_TOKEN / (link_gbps * 1e9)
    np.testing.assert_allclose(slow["transfer_s"], want_s, rtol=1e-12)
    np.testing.assert_allclose(slow["first_token_s"], ideal["first_token_s"], rtol=0, atol=0)
    np.testing.assert_allclose(slow["finish_s"], ideal["finish_s"] + want_s, rtol=1e-9)


@pytest.mark.parametrize("fate", ["retry", "recompute", "fail"])
def test_every_request_ends_once_every_transfer_ends_and_memory_comes_back(fate: str) -> None:
    # A burst bigger than the decode side holds: hand-offs are refused and meet their fate.
    df = evenly(40, 0.005, prompt=900, output=60)
    r = run_fleet_data(
        pd_data(2, 1, bandwidth_gbps=100.0, latency_s=0.001, on_refusal=fate, max_refusals=1000),
        df,
    )
    req, disagg = r.requests, r.summary.fleet.disagg  # type: ignore[union-attr]
    assert len(req) == 40 and req["request_id"].is_unique
    assert (req["status"] != "unfinished").all()
    t = disagg.transfers
    assert t.started == t.landed  # no decode replica went down: every transfer landed
    assert t.kv_bytes == int(req["kv_transfer_bytes"].sum())
    assert sum(disagg.refusals.values()) == sum(disagg.fates.values())
    assert sum(disagg.refusals.values()) == int(req["transfer_refusals"].sum()) > 0
    assert disagg.fates == {fate: sum(disagg.refusals.values())}
    ok = req[req["status"] == "ok"]
    assert len(ok) and set(ok["replica"]) == {2} and set(ok["decode_replica"]) == {2}
    assert set(ok["prefill_replica"]) <= {0, 1}
    final = r.timeseries[r.timeseries["trigger"] == "final"]
    assert (final["used_tokens"] == 0).all() and len(final) == 3
    if fate == "fail":
        failed = req[req["status"] != "ok"]
        assert len(failed) and (failed["status"] == "rejected-capacity").all()
        assert (failed["refusal_cause"] == "capacity").all()
        assert (failed["diagnosis"] == "KV hand-off refused (capacity)").all()
    else:
        assert (req["status"] == "ok").all()
    if fate == "recompute":
        assert (req.loc[req["transfer_refusals"] > 0, "route"] == "pd-recompute").all()


def test_after_max_refusals_a_request_fails_whatever_its_fate() -> None:
    # The decode replica can never place a 5,000-token prompt (4,096 slots); the
    # prefill replica can (8,192).
    data = pd_data(on_refusal="retry", max_refusals=3, retry_delay_s=0.5)
    data["hardware"] = {**data["hardware"], "max_seq_tokens": 8192}
    pools = data["fleet"]["pools"]
    pools[0]["hardware"] = {"gpu_kv_cache_tokens": 8192}
    r = run_fleet_data(data, request_frame([0.0], [5000], [10]))
    row = r.requests.iloc[0]
    assert row["status"] == "rejected-capacity" and row["transfer_refusals"] == 4
    assert row["refusal_fate"] == "fail" and row["decode_replica"] == -1
    assert r.summary.fleet.disagg.fates == {"retry": 3, "fail": 1}  # type: ignore[union-attr]
    refused = r.events[r.events["kind"] == "kv-transfer-refused"]
    assert refused["time_s"].diff().dropna().round(9).tolist() == [0.5, 0.5, 0.5]


def test_fast_and_exact_mode_agree_on_a_busy_disaggregated_fleet() -> None:
    # Times off the 10 ms step grid: two things at one instant (a retried hand-off and
    # a decode step's end) are ordered differently by the two modes (SimPy events before
    # replicas' decisions in fast mode; by insertion in exact mode).
    rng = np.random.default_rng(3)
    arrivals = np.round(np.cumsum(rng.exponential(0.02, 60)), 6).tolist()
    prompts = rng.integers(100, 1500, 60).tolist()
    df = request_frame(arrivals, prompts, rng.integers(2, 120, 60).tolist())
    data = pd_data(2, 2, bandwidth_gbps=200.0, latency_s=0.00113, retry_delay_s=0.0537)
    fast = run_fleet_data(data, df)
    exact = run_fleet_data({**data, "mode": "exact"}, df)
    assert sum(fast.summary.fleet.disagg.refusals.values()) > 0  # type: ignore[union-attr]
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=False, rtol=1e-9)


def test_a_colocated_fleets_summary_has_no_disaggregated_fields() -> None:
    r = run_fleet_data(colocated(), evenly(3, 1.0))
    assert r.summary.fleet is not None and r.summary.fleet.disagg is None
    assert all(p.role is None for p in r.summary.fleet.pools)
    assert not set(PD_COLUMNS) & set(r.requests.columns)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["fleet"].pop("kv_transfer"), "needs kv_transfer"),
        (lambda d: d["fleet"]["pools"].pop(), "needs decode replicas"),
        (lambda d: d["fleet"]["pools"][1].update(count=0), "needs decode replicas"),
        (lambda d: d["fleet"].update(router={"kind": "round_robin"}), "router is kind pd"),
        (lambda d: d["fleet"]["pools"][0].update(role="colocated"), "give every pool role"),
        (lambda d: d["fleet"]["pools"][0].update(role="both"), "fleet.pools.0.role"),
        (lambda d: d["fleet"]["kv_transfer"].update(bandwidth_gbps=0), "bandwidth_gbps"),
        (lambda d: d["fleet"]["kv_transfer"].update(on_refusal="drop"), "on_refusal"),
        (lambda d: d["scheduler"].update(preemption="swap"), "preemption swap"),
        (lambda d: d.update(retention={"kind": "fixed", "seconds": 1.0}), "retention"),
    ],
)
def test_a_bad_disaggregated_fleet_is_refused_naming_what_is_wrong(
    change: Any, message: str
) -> None:
    data = pd_data()
    change(data)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data)


def test_a_kv_link_needs_a_disaggregated_fleet() -> None:
    data = colocated()
    data["fleet"]["kv_transfer"] = {"bandwidth_gbps": 100.0}
    with pytest.raises(ScenarioError, match="no pool has role prefill or decode"):
        parse_scenario(data)


def test_a_disaggregated_fleets_router_is_not_replaced_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="not replaced"):
        run(parse_scenario(pd_data()), evenly(2, 1.0), router=LeastOutstanding())
