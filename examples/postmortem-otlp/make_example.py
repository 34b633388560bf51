"""Write the OTLP example of ``fragsim postmortem`` (spans.jsonl, nodes.csv) by exporting
a simulated fleet's requests as the OpenTelemetry spans vLLM emits, in the OpenTelemetry
Collector file exporter's OTLP JSON (one ``ExportTraceServiceRequest`` per line).

Not production data. The "production" run is that of ``examples/postmortem`` (its
``make_example.py``: the ``seed-postmortem`` stack on ``node-a``, ``node-b``, ``node-c``
with 2.5 % slower GPUs), shortened to :data:`DURATION_S`, with three node events: a
fourth node ``node-d`` added at :data:`SCALE_UP_S`, the routine restart of ``node-a`` at
:data:`RESTART_S` and ``node-c`` removed at :data:`SCALE_DOWN_S`. Each attempt is one
span: ``gen_ai.request.id`` (``req-<id>``; a retry is a second span of the same id),
prompt and completion tokens, the latencies where the attempt ran (queue, time to first
token, end to end), ``finish_reasons`` ``["length"]``; a failed attempt has status ERROR
and ``error.type`` ``oom``. The span starts at the attempt's arrival (from
:data:`ORIGIN_NS`); a finished attempt ends at its finish, a failed one at its failure
(the retry's arrival less the back-off, or the failure event). The resource is the
node: ``host.name`` and ``service.instance.id`` ``<node>-<k>`` (k: restarts so far), so
the restart is also visible in the spans, and so are ``node-d``'s start and ``node-c``'s
stop (first and last spans). One export request per node, instance and :data:`BATCH_S`
of arrivals, in time order. ``nodes.csv`` gives what spans cannot tell: the initial
nodes' uptimes, the restart's and the scale-down's causes (not ``node-d``'s start: the
spans tell it), with ``timestamp``s on the spans' clock (the log starts at the first
span, 1.4 s after the run's start).

Run ``python examples/postmortem-otlp/make_example.py [OUT_DIR]`` (default: this
folder); the same script gives the same bytes.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sim.engine.batch import ClientRetry

ORIGIN_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: the log start
DURATION_S = 1200.0
SCALE_UP_S = 300.0
RESTART_S = 600.0
SCALE_DOWN_S = 900.0
NAMES = ("node-a", "node-b", "node-c", "node-d")
"""The nodes by fleet id: the CSV example's three, then the one added."""
FAILURE_KINDS = ("admission_failure", "growth_failure")
BATCH_S = 60.0
"""Seconds of arrivals per export request (the Collector batches like this)."""
HERE = Path(__file__).resolve().parent
CSV_EXAMPLE = HERE.parent / "postmortem" / "make_example.py"


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool) or not isinstance(value, int | float | str | list):
        raise TypeError(f"{key}: {value!r}")
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    values = [{"stringValue": v} for v in value]
    return {"key": key, "value": {"arrayValue": {"values": values}}}


def span_rows(attempts: pd.DataFrame, result: Any, retry: ClientRetry) -> pd.DataFrame:
    """``attempts`` (one row per attempt, replica names, ``oom`` for a failure) with the
    span's end and latencies from the run (``result.requests``)."""
    req = result.requests.set_index("request_id").loc[attempts["request_id"]]
    arrival = attempts["arrival_s"].to_numpy(np.float64)
    finish = req["finish_s"].to_numpy(np.float64)
    ok = (attempts["status"] == "ok").to_numpy()
    last = attempts.groupby("request_id")["attempt"].transform("max") == attempts["attempt"]
    by_try = attempts.sort_values(["request_id", "attempt"])
    nxt = by_try.groupby("request_id")["arrival_s"].shift(-1).reindex(attempts.index)
    delays_s = [retry.delay_s(int(a) + 1) for a in attempts["attempt"].tolist()]
    retry_end = nxt.to_numpy(np.float64) - np.array(delays_s, dtype=np.float64)
    failed_end = np.where(last.to_numpy(), np.where(np.isnan(finish), arrival, finish), retry_end)
    rows = attempts.copy()
    rows["end_s"] = np.where(ok, finish, failed_end)
    nan = np.full(len(rows), np.nan)
    rows["queue_s"] = np.where(ok, req["admit_s"].to_numpy(np.float64) - arrival, nan)
    rows["ttft_s"] = np.where(ok, req["first_token_s"].to_numpy(np.float64) - arrival, nan)
    rows["e2e_s"] = np.where(ok, finish - arrival, nan)
    return rows


def otlp_lines(rows: pd.DataFrame, instances: dict[str, list[float]]) -> list[str]:
    """One ``ExportTraceServiceRequest`` JSON line per node and batch. ``instances``:
    node -> restart times (the instance id counts the restarts before a span's start)."""
    rows = rows.assign(batch=(rows["arrival_s"] // BATCH_S).astype(int))
    lines = []
    for (_, node), group in rows.groupby(["batch", "replica"], sort=True):
        restarts = instances.get(str(node), [])
        by_instance: dict[str, list[dict[str, Any]]] = {}
        for r in group.itertuples(index=False):
            arrival_s: Any = r.arrival_s
            k = sum(t <= arrival_s for t in restarts)
            by_instance.setdefault(f"{node}-{k}", []).append(_span(r))
        for instance, spans in by_instance.items():
            resource = {"attributes": [_attr("service.name", "vllm"), _attr("host.name", node)]}
            resource["attributes"].append(_attr("service.instance.id", instance))
            scope = {"scope": {"name": "vllm.tracing"}, "spans": spans}
            doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}
            lines.append(json.dumps(doc, separators=(",", ":")))
    return lines


def _span(r: Any) -> dict[str, Any]:
    ok = r.status == "ok"
    attrs = [
        _attr("gen_ai.request.id", f"req-{r.request_id}"),
        _attr("gen_ai.usage.prompt_tokens", int(r.prompt_tokens)),
        _attr("gen_ai.usage.completion_tokens", int(r.output_tokens)),
    ]
    if ok:
        attrs += [
            _attr("gen_ai.latency.time_in_queue", round(float(r.queue_s), 6)),
            _attr("gen_ai.latency.time_to_first_token", round(float(r.ttft_s), 6)),
            _attr("gen_ai.latency.e2e", round(float(r.e2e_s), 6)),
            _attr("gen_ai.response.finish_reasons", ["length"]),
        ]
    else:
        attrs.append(_attr("error.type", "oom"))
    span = {
        "traceId": f"{r.request_id + 1:032x}",
        "spanId": f"{(r.request_id + 1) * 8 + r.attempt:016x}",
        "name": "llm_request",
        "kind": 2,
        "startTimeUnixNano": str(ORIGIN_NS + round(r.arrival_s * 1e9)),
        "endTimeUnixNano": str(ORIGIN_NS + round(r.end_s * 1e9)),
        "attributes": attrs,
        "status": {"code": 1} if ok else {"code": 2, "message": "KV cache allocation failed"},
    }
    return span


def simulate(
    csv_example: dict[str, Any], mem_efficiency: float | None = None
) -> tuple[Any, ClientRetry]:
    """The CSV example's production fleet over :data:`DURATION_S` with the module
    docstring's node events (``mem_efficiency``: the GPUs' instead of the example's): a
    :class:`sim.RunResult` and its clients' retries."""
    import sim
    from sim.fleet.fleet import NodeAction
    from sim.runner import run

    data = csv_example["production_scenario"]().model_dump(exclude_none=True)
    data["workload"]["synth"]["duration_s"] = DURATION_S
    data["fleet"]["max_replicas"] = len(NAMES)
    if mem_efficiency is not None:
        data["latency"]["mem_efficiency"] = mem_efficiency
    scenario = sim.parse_scenario(data)
    script = [
        NodeAction(SCALE_UP_S, "scale_up", pool_index=0, cause="autoscaler: queue"),
        NodeAction(RESTART_S, "restart", replica_id=0, cause="routine restart"),
        NodeAction(SCALE_DOWN_S, "scale_down", replica_id=2, cause="autoscaler: idle"),
    ]
    result = run(scenario, sim.load_workload(scenario), script=script)
    return result, scenario.scheduler.client_retry()


def attempt_rows(result: Any, retry: ClientRetry) -> pd.DataFrame:
    """One row per attempt (the CSV example's ``attempt_rows`` on :data:`NAMES`): a
    failed attempt is an allocation failure event of its request; the retry after
    failure k arrives ``retry.delay_s(k + 1)`` later, on the same node."""
    req, ev = result.requests, result.events
    fails = ev[ev["kind"].isin(FAILURE_KINDS)].sort_values(["request_id", "time_s"])
    fail_times = fails.groupby("request_id")["time_s"].apply(list).to_dict()
    rows = []
    for r in req.itertuples(index=False):
        failed = r.status != "ok"
        times = fail_times.get(r.request_id, [])
        assert len(times) == r.retries + failed, f"request {r.request_id}: attempts and events"
        assert r.first_replica == r.replica, "a retry left its node: not a pinned retry"
        retries = [t + retry.delay_s(k + 1) for k, t in enumerate(times[: r.retries])]
        for attempt, t in enumerate([r.arrival_s, *retries]):
            status = "oom" if failed or attempt < r.retries else "ok"
            name = NAMES[r.replica]
            rows.append((r.request_id, attempt, t, r.prompt_tokens, r.output_tokens, name, status))
    cols = ["request_id", "attempt", "arrival_s", "prompt_tokens", "output_tokens", "replica"]
    out = pd.DataFrame(rows, columns=[*cols, "status"])
    return out.sort_values(["arrival_s", "request_id", "attempt"], kind="stable")


def spans_of(result: Any, retry: ClientRetry) -> tuple[pd.DataFrame, list[str]]:
    """The run's attempts as span rows (:func:`span_rows`) and as OTLP JSON lines."""
    rows = span_rows(attempt_rows(result, retry), result, retry)
    return rows, otlp_lines(rows, {"node-a": [RESTART_S]})


def _iso(run_s: float) -> str:
    """The wall-clock time of run second ``run_s`` (ISO-8601, UTC)."""
    return pd.Timestamp(ORIGIN_NS + round(run_s * 1e9), tz="UTC").isoformat()


def write_example(out_dir: Path) -> None:
    csv_example = runpy.run_path(str(CSV_EXAMPLE))
    _, lines = spans_of(*simulate(csv_example))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spans.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    nodes = ["timestamp,replica,event,pool,detail"]
    for name, up in zip(csv_example["REPLICAS"], csv_example["UPTIME_S"], strict=True):
        nodes.append(f"{_iso(-up)},{name},start,main,")
    nodes.append(f"{_iso(RESTART_S)},node-a,restart,main,routine restart")
    nodes.append(f"{_iso(SCALE_DOWN_S)},node-c,scale_down,main,autoscaler: idle")
    (out_dir / "nodes.csv").write_text("\n".join(nodes) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_example(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
