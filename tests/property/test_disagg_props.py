"""Disaggregated fleets, drawn: whatever the split, the link, the refusal fate, the
restarts and the crashes, every request ends once in one terminal status, every
transfer ends (landed, or dropped because its decode replica went down), the router's
promises are all released, a finished request was decoded on a decode replica and
prefilled on a prefill one, and fast mode equals exact mode."""

from __future__ import annotations

from typing import Any, get_args

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from support.fast_exact import assert_frames_match, run_mode
from support.fleet import STATUSES, comparable, synthetic_fleet_data

from policies.routing.pd import DecodeChoice
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload


@st.composite
def pd_fleets(draw: st.DrawFn) -> dict[str, Any]:
    prefill = draw(st.integers(1, 2))
    decode = draw(st.integers(1, 3))
    faults: dict[str, Any] = {}
    if draw(st.booleans()):
        faults = {"mtbf_s": draw(st.sampled_from([150.0, 400.0])), "mttr": {"mean_s": 30.0}}
    # A deliberate sample: restarts only as a disturbance of the hand-off (every kind is
    # drawn by test_fleet_props.py and test_fleet_policy_props.py).
    restart = draw(
        st.sampled_from(
            [
                {"kind": "none"},
                {"kind": "scheduled", "every_s": 150.0, "jitter_s": 40.0, "interval_s": 20.0},
            ]
        )
    )
    data = synthetic_fleet_data(
        seed=draw(st.integers(0, 2**16)),
        duration_s=400.0,
        router={"kind": "pd", "decode": draw(st.sampled_from(get_args(DecodeChoice)))},
        router_refresh_s=draw(st.sampled_from([0.0, 0.05])),
        faults=faults,
        restart=restart,
        lifecycle={"provision": {"mean_s": 20.0}, "load": {"mean_s": 10.0}},
        kv_transfer={
            "bandwidth_gbps": draw(st.sampled_from([None, 25.0, 400.0])),
            "latency_s": draw(st.sampled_from([0.0, 0.0013])),
            "on_refusal": draw(st.sampled_from(["retry", "recompute", "fail"])),
            "retry_delay_s": 0.37,
            "max_refusals": draw(st.integers(0, 5)),
        },
    )
    data["fleet"]["pools"] = [
        {"name": "prefill", "role": "prefill", "count": prefill},
        {"name": "decode", "role": "decode", "count": decode},
    ]
    data["workload"]["synth"]["arrival"]["rate_per_s"] = 0.6
    data["scheduler"] = {
        **data["scheduler"],
        "retry_attempts": draw(st.integers(0, 2)),
        "on_admission_failure": draw(st.sampled_from(["reject", "queue"])),
    }
    data["mode"] = draw(st.sampled_from(["fast", "exact"]))
    return data


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pd_fleets())
def test_every_request_and_every_transfer_ends_on_a_drawn_disaggregated_fleet(
    data: dict[str, Any],
) -> None:
    note(f"scenario: {data!r}")
    scenario = parse_scenario(data)
    workload = load_workload(scenario)
    r = run(scenario, workload)
    req = r.requests
    assert req["request_id"].is_unique
    assert sorted(req["request_id"].tolist()) == sorted(workload["request_id"].tolist())
    assert set(req["status"]) <= STATUSES - {"unfinished"}
    assert (req["retries"] <= scenario.scheduler.retry_attempts).all()
    assert r.summary.fleet is not None and r.summary.fleet.disagg is not None
    disagg = r.summary.fleet.disagg
    dropped = disagg.refusals.get("decode-down", 0)
    assert disagg.transfers.started == disagg.transfers.landed + dropped
    assert sum(disagg.refusals.values()) == sum(disagg.fates.values())
    prefill = set(disagg.prefill.replicas)
    decode = set(disagg.decode.replicas)
    ok = req[req["status"] == "ok"]
    assert (ok["generated_tokens"] == ok["output_tokens"].clip(lower=1)).all()
    long = ok[ok["generated_tokens"] > 1]
    assert set(long["replica"]) <= decode and set(long["prefill_replica"]) <= prefill
    assert set(ok[ok["generated_tokens"] == 1]["replica"]) <= prefill
    final = r.timeseries[(r.timeseries["trigger"] == "final") & r.timeseries["up"]]
    assert (final[final["replica"].isin(decode)]["used_tokens"] == 0).all()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pd_fleets())
def test_fast_mode_equals_exact_mode_on_drawn_disaggregated_fleets(data: dict[str, Any]) -> None:
    note(f"scenario: {data!r}")
    workload = load_workload(parse_scenario(data))
    fast = comparable(run_mode(data, workload, "fast"))
    exact = comparable(run_mode(data, workload, "exact"))
    for name, frame in fast.items():
        assert_frames_match(name, frame, exact[name])
