"""A decode replica reserves the KV a prefill hands it (``sim.engine.inbound``): its
blocks are allocated at the decode replica's next step boundary and held there while the
transfer runs, so its memory shows the inbound KV; a reservation the allocator refuses
is the hand-off's refusal (an allocation failure there, then the fate); both modes
agree."""

from __future__ import annotations

from typing import Any

import pandas as pd
from support.fleet import fleet_data, run_fleet_data
from support.scenarios import request_frame

from sim.fleet.fleet import NodeAction
from sim.runner import run
from sim.scenario.schema import parse_scenario

KV_BYTES_PER_TOKEN = 524_288  # llama-2-7b's, the test fleets' model


def _pd(mode: str = "fast", *, refresh_s: float = 0.0, **link: Any) -> dict[str, Any]:
    data = fleet_data(
        pools=[
            {"name": "p", "role": "prefill", "count": 1},
            {"name": "d", "role": "decode", "count": 1},
        ],
        router="pd",
        kv_transfer={"latency_s": 0.0, **link},
        sample_interval_s=0.5,
        mode=mode,
    )
    data["fleet"]["router_refresh_s"] = refresh_s
    return data


def test_the_decode_replica_holds_the_inbound_kv_while_the_transfer_runs() -> None:
    # 1,000 tokens of KV over 1 Gb/s: 4.19 s, reserved when the prefill ends at 0.01 s.
    df = request_frame([0.0], [1000], [20])
    r = run_fleet_data(_pd(bandwidth_gbps=1.0), df)
    transfer_s = 8 * 1000 * KV_BYTES_PER_TOKEN / 1e9
    row = r.requests.iloc[0]
    assert row["status"] == "ok" and row["transfer_s"] == transfer_s
    ts = r.timeseries[(r.timeseries["replica"] == 1) & (r.timeseries["trigger"] == "periodic")]
    during = ts[(ts["time_s"] > 0.01) & (ts["time_s"] < 0.01 + transfer_s)]
    assert len(during) == 8
    # The prompt and the first decode step's slot, owned by no running request yet.
    assert (during["used_tokens"] == 1001).all()
    assert (during["running_requests"] == 0).all()
    assert row["finish_s"] > 0.01 + transfer_s
    assert (ts[ts["time_s"] > row["finish_s"]]["used_tokens"] == 0).all()


def _overcommitted(mode: str) -> Any:
    # Stale router views (refreshed every 100 s) show the decode replica empty; the
    # router's promise lasts until the replica reserves. The test fleets' oracle
    # allocator reserves a request's whole length (1,500 + 300): the third hand-off
    # meets 4,096 - 2 x 1,800 = 496 free slots there, and its reservation is refused.
    df = request_frame([0.0, 0.5, 1.0], [1500, 1500, 1500], [300, 300, 300])
    return run_fleet_data(_pd(mode, refresh_s=100.0, bandwidth_gbps=400.0, on_refusal="fail"), df)


def test_a_refused_reservation_is_the_hand_offs_refusal_and_the_decode_sides_failure() -> None:
    r = _overcommitted("fast")
    req = r.requests
    assert req["status"].tolist() == ["ok", "ok", "rejected-capacity"]
    third = req.iloc[2]
    assert third["transfer_refusals"] == 1 and third["refusal_cause"] == "capacity"
    assert third["decode_replica"] == -1 and third["kv_transfer_bytes"] == 0
    assert third["diagnosis"] == "KV hand-off refused (capacity)"
    failures = r.events[(r.events["kind"] == "admission_failure") & (r.events["replica"] == 1)]
    assert failures["request_id"].tolist() == [2]
    assert failures["free_tokens"].tolist() == [4096 - 2 * 1800]
    refused = r.events[r.events["kind"] == "kv-transfer-refused"]
    assert refused["request_id"].tolist() == [2]
    assert refused["time_s"].tolist() == failures["time_s"].tolist()
    disagg = r.summary.fleet.disagg  # type: ignore[union-attr]
    assert disagg.transfers.started == disagg.transfers.landed == 2
    assert disagg.decode.allocation_failures == 1


def test_fast_and_exact_mode_agree_when_a_reservation_is_refused() -> None:
    fast, exact = _overcommitted("fast"), _overcommitted("exact")
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(fast.timeseries, exact.timeseries, check_exact=False, rtol=1e-9)


def test_kv_not_reserved_when_its_decode_replica_dies_is_handed_off_again() -> None:
    # Decode replicas 1 and 2 each decode a long request; request 2's prefill ends at
    # 1.0103 s, inside a step of replica 1 (least outstanding, lowest index), which
    # crashes at 1.0105 s: it dies at that step's end, before reserving request 2's KV,
    # which goes to replica 2 at that instant -- nothing refused.
    data = _pd(bandwidth_gbps=None)
    data["fleet"]["pools"][1]["count"] = 2
    df = request_frame([0.0, 0.5, 1.0003], [100, 100, 100], [1000, 1000, 20])
    scenario = parse_scenario(data)
    r = run(scenario, df, script=[NodeAction(1.0105, "crash", 1)])
    req = r.requests.set_index("request_id")
    assert req.loc[0, "status"] == "failed-lost" and req.loc[0, "decode_replica"] == 1
    assert req.loc[2, "status"] == "ok" and req.loc[2, "transfer_refusals"] == 0
    assert req.loc[2, "decode_replica"] == 2 and req.loc[2, "replica"] == 2
    disagg = r.summary.fleet.disagg  # type: ignore[union-attr]
    assert disagg.refusals == {} and disagg.transfers.started == disagg.transfers.landed == 3
