"""sim.postmortem.otlp_nodes: node starts and stops from first and last spans, restarts from
instance changes, the merge with a nodes file (the file wins, nothing counted twice,
conflicts one line naming file, line and field), and attributes of the wrong type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto", reason="the otlp extra (opentelemetry-proto)")

from sim.postmortem.log import LogError, PostmortemLog
from sim.postmortem.otlp_log import load_otlp_log
from sim.postmortem.otlp_nodes import EDGE_S, START_LEAD_S, TOLERANCE_S

T0 = 1_767_225_600_000_000_000


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"key": key, "value": value}
    kind = "stringValue" if isinstance(value, str) else "intValue"
    return {"key": key, "value": {kind: str(value)}}


def span(rid: str, start_s: float, end_s: float, extra: tuple[Any, ...] = ()) -> dict[str, Any]:
    return {
        "startTimeUnixNano": str(T0 + round(start_s * 1e9)),
        "endTimeUnixNano": str(T0 + round(end_s * 1e9)),
        "attributes": [
            kv("gen_ai.request.id", rid),
            kv("gen_ai.usage.prompt_tokens", 100),
            kv("gen_ai.usage.completion_tokens", 20),
            *extra,
        ],
    }


def line(instance: str, times: list[tuple[float, float]], host: str | None = None,
         resource: tuple[Any, ...] = (), extra: tuple[Any, ...] = ()) -> str:  # fmt: skip
    res = [kv("service.instance.id", instance), *resource]
    res += [kv("host.name", host)] if host else []
    spans = [span(f"{instance}-{k}", a, b, extra) for k, (a, b) in enumerate(times)]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": res},
                                          "scopeSpans": [{"spans": spans}]}]})  # fmt: skip


def load(folder: Path, *lines: str, nodes: str | None = None) -> PostmortemLog:
    folder.mkdir(exist_ok=True)
    (folder / "spans.jsonl").write_text("\n".join(lines) + "\n")
    if nodes is not None:
        (folder / "nodes.csv").write_text(nodes)
    return load_otlp_log(folder)


def events(log: PostmortemLog) -> list[list[Any]]:
    rows = log.node_events.to_dict("records")
    return [[r["time_s"], log.replica_names[r["replica"]], r["event"], r["detail"]] for r in rows]


def test_a_node_is_up_from_its_first_span_to_its_last(tmp_path: Path) -> None:
    """``a`` spans the log; ``b`` serves from 300 s to 500 s of 1000: it starts just
    before its first span and stops at its last span's end; ``c``'s first span and last
    end lie within EDGE_S of the log's ends: up from the start to the end."""
    log = load(
        tmp_path,
        line("a-0", [(0, 5), (990, 1000)], host="a"),
        line("b-0", [(300, 320), (400, 500)], host="b"),
        line("c-0", [(EDGE_S - 10, EDGE_S), (900, 1000 - EDGE_S + 5)], host="c"),
    )
    assert log.replica_names == ["a", "b", "c"]
    assert log.up_at_start.tolist() == [True, False, True]
    assert log.initial_uptime_s.tolist() == [0.0, 0.0, 0.0]
    assert events(log) == [
        [300 - START_LEAD_S, "b", "start", "first span"],
        [500.0, "b", "scale_down", "last span"],
    ]


def test_a_new_instance_on_a_node_is_a_restart_and_without_a_node_name_a_new_node(
    tmp_path: Path,
) -> None:
    spans = [line("h-0", [(0, 4), (200, 260)], host="h"), line("h-1", [(400, 1000)], host="h")]
    log = load(tmp_path / "host", *spans)
    assert log.replica_names == ["h"] and log.up_at_start.tolist() == [True]
    assert events(log) == [[260.0, "h", "restart", "instance h-0 -> h-1"]]  # h-0's last end
    # An old span still running when the new instance serves: just before the new one.
    overlap = [line("h-0", [(0, 4), (100, 300)], host="h"), line("h-1", [(250, 1000)], host="h")]
    log = load(tmp_path / "overlap", *overlap)
    assert events(log) == [[250 - START_LEAD_S, "h", "restart", "instance h-0 -> h-1"]]
    # The same spans without host.name: each instance is a node of its own.
    bare = [line("h-0", [(0, 4), (200, 260)]), line("h-1", [(400, 1000)])]
    log = load(tmp_path / "bare", *bare)
    assert log.replica_names == ["h-0", "h-1"] and log.up_at_start.tolist() == [True, False]
    assert events(log) == [
        [260.0, "h-0", "scale_down", "last span"],
        [400 - START_LEAD_S, "h-1", "start", "first span"],
    ]


SPANS = (
    line("h-0", [(0, 4), (400, 430)], host="h"),
    line("h-1", [(600, 1000)], host="h"),
    line("b-0", [(300, 320), (400, 500)], host="b"),
)


def test_the_nodes_file_wins_a_restart_both_describe(tmp_path: Path) -> None:
    """The file's restart of ``h`` inside the change's window (400 s .. 600 s, widened by
    TOLERANCE_S) is the change: one restart, the file's time and cause; its restart at
    100 s is one the spans cannot tell; ``b`` (not in the file) keeps its inferred
    start and stop and joins the file's only pool; the file's uptime is kept."""
    late_s = 600 + TOLERANCE_S - 1
    nodes = "time_s,replica,event,pool,detail\n-7200,h,start,main,\n100,h,restart,main,oom\n"
    log = load(tmp_path, *SPANS, nodes=nodes + f"{late_s},h,restart,main,upgrade\n")
    assert log.replica_names == ["h", "b"] and log.pools == ["main", "main"]  # its only pool
    assert log.initial_uptime_s.tolist() == [7200.0, 0.0]
    assert events(log) == [
        [100.0, "h", "restart", "oom"],
        [300 - START_LEAD_S, "b", "start", "first span"],
        [500.0, "b", "scale_down", "last span"],
        [late_s, "h", "restart", "upgrade"],
    ]
    # A restart of the file outside the window is another restart: both are kept.
    log = load(tmp_path, *SPANS, nodes=nodes + "900,h,restart,main,upgrade\n")
    assert [e[0] for e in events(log) if e[2] == "restart"] == [100.0, 430.0, 900.0]


def test_the_nodes_file_adds_scale_events_the_spans_cannot_tell(tmp_path: Path) -> None:
    """Scale events of a node without spans, and a restart by cause of a node the file
    does not start (its start is the spans'), without a detail column."""
    nodes = "time_s,replica,event\n200,x,scale_up\n700,x,scale_down\n350,b,restart\n"
    log = load(tmp_path, *SPANS, nodes=nodes)
    assert log.replica_names == ["x", "b", "h"]
    assert log.up_at_start.tolist() == [False, False, True]
    assert events(log) == [
        [200.0, "x", "scale_up", ""],
        [300 - START_LEAD_S, "b", "start", "first span"],
        [350.0, "b", "restart", ""],
        [430.0, "h", "restart", "instance h-0 -> h-1"],
        [500.0, "b", "scale_down", "last span"],
        [700.0, "x", "scale_down", ""],
    ]


@pytest.mark.parametrize(
    ("nodes", "where"),
    [
        # b scaled down while its spans go on
        ("time_s,replica,event\n-60,b,start\n350,b,scale_down\n", "line 3 (row 1): field "
         "'time_s': scale_down of replica 'b' at 350 s, before its span at 400 s (spans.jsonl line 3)"),
        # b started after its first span
        ("time_s,replica,event\n310,b,start\n", "line 2 (row 0): field 'time_s': start of "
         "replica 'b' at 310 s, after its span at 300 s (spans.jsonl line 3)"),
        # the file names the nodes otherwise than the spans
        ("time_s,replica,event\n-60,pod-h,start\n", "line 2 (row 0): field 'replica': no "
         "replica of the nodes file has spans; expected the spans' node names"),
        # the file's own lifecycle, with the spans' events in it: h crashes twice
        ("time_s,replica,event\n100,h,crash\n150,h,crash\n", "line 3 (row 1): field 'event': "
         "crash of replica 'h' at 150 s, when it is crashed"),
    ],
)  # fmt: skip
def test_a_conflict_is_one_line_naming_the_file_line_and_field(
    tmp_path: Path, nodes: str, where: str
) -> None:
    with pytest.raises(LogError) as info:
        load(tmp_path, *SPANS, nodes=nodes)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{tmp_path / 'nodes.csv'}: {where}"), text


@pytest.mark.parametrize(
    ("resource", "extra", "field", "want", "got"),
    [
        ((kv("host.name", {"intValue": "7"}),), (), "host.name", "stringValue", "intValue"),
        ((kv("k8s.pod.name", {"boolValue": True}),), (), "k8s.pod.name", "stringValue",
         "boolValue"),
        ((), (kv("error.type", {"intValue": "500"}),), "error.type", "stringValue", "intValue"),
        ((), (kv("gen_ai.request.id", {"intValue": "5"}),), "gen_ai.request.id", "stringValue",
         "intValue"),
        ((), (kv("gen_ai.response.finish_reasons", {"arrayValue": {"values": [
            {"intValue": "1"}]}}),), "gen_ai.response.finish_reasons",
         "arrayValue of stringValue", "arrayValue with a non-string value"),
    ],
)  # fmt: skip
def test_an_attribute_of_the_wrong_type_is_one_line_naming_file_line_and_attribute(
    tmp_path: Path, resource: tuple[Any, ...], extra: tuple[Any, ...], field: str, want: str,
    got: str,
) -> None:  # fmt: skip
    good = line("a-0", [(0, 1)], host="a")
    bad = line("a-0", [(2, 3)], resource=resource, extra=extra)
    with pytest.raises(LogError) as info:
        load(tmp_path, good, good, bad)
    text = str(info.value)
    assert "\n" not in text, text
    assert text.startswith(f"{tmp_path / 'spans.jsonl'}: line 3: field '{field}': "), text
    assert text.endswith(f"expected {want}, got {got}"), text
