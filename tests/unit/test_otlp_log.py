"""sim.postmortem.otlp_log: OTLP JSON spans read into the postmortem log, the restart rule, the
nodes file beside the spans, and one-line refusals naming file, line and attribute."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto", reason="the otlp extra (opentelemetry-proto)")

from sim.postmortem.log import LogError
from sim.postmortem.otlp_attributes import ATTRIBUTES, RESOURCE_ATTRIBUTES
from sim.postmortem.otlp_log import is_otlp_log, load_otlp_log

T0 = 1_767_225_600_000_000_000
DOCS = Path(__file__).resolve().parents[2] / "docs" / "postmortem.md"


def attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def span(rid: str, start_s: float, end_s: float, *, prompt: Any = 100, error: bool = False,
         extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    attrs = [
        attr("gen_ai.request.id", rid),
        attr("gen_ai.usage.prompt_tokens", prompt),
        attr("gen_ai.usage.completion_tokens", 20),
        *(extra or []),
    ]
    out: dict[str, Any] = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "llm_request",
        "startTimeUnixNano": str(T0 + int(start_s * 1e9)),
        "endTimeUnixNano": str(T0 + int(end_s * 1e9)),
        "attributes": attrs,
    }
    if error:
        out["status"] = {"code": 2}
    return out


def line(instance: str, spans: list[dict[str, Any]], host: str | None = None) -> str:
    res = [attr("service.instance.id", instance)] + ([attr("host.name", host)] if host else [])
    doc = {"resourceSpans": [{"resource": {"attributes": res}, "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(doc)


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_spans_become_attempts_requests_and_nodes(tmp_path: Path) -> None:
    f = write(
        tmp_path / "spans.jsonl",
        line("a", [span("r1", 5, 6), span("r2", 7, 7.5, error=True)]),
        "",
        line("b", [span("r2", 9, 10), span("r3", 8, 9, extra=[attr("error.type", "timeout")])]),
    )
    log = load_otlp_log(f)
    assert log.replica_names == ["a", "b"] and log.pools == ["default", "default"]
    assert log.up_at_start.tolist() == [True, True] and log.node_events.empty
    assert log.requests["arrival_s"].tolist() == [0.0, 2.0, 3.0]  # from the earliest span
    assert log.requests["attempts"].tolist() == [1, 2, 1]
    assert log.routes.tolist() == [0, 0, 1]  # r2's first attempt was on a
    assert log.recorded_status.tolist() == ["ok", "ok", "timed-out"]
    assert log.attempts["status"].tolist() == ["ok", "failed", "timed-out", "ok"]
    assert log.attempts["attempt"].tolist() == [0, 0, 0, 1]


def test_an_instance_change_on_a_host_is_a_restart_when_the_old_instance_is_done(
    tmp_path: Path,
) -> None:
    f = write(
        tmp_path / "s.json",
        line("h-0", [span("r1", 0, 4), span("r2", 2, 9)], host="h"),
        line("h-1", [span("r3", 12, 13)], host="h"),
        line("g-0", [span("r4", 1, 2)], host="g"),
    )
    log = load_otlp_log(f)
    assert log.replica_names == ["h", "g"]
    assert log.node_events.to_dict("records") == [
        {"time_s": 9.0, "replica": 0, "event": "restart", "detail": "instance h-0 -> h-1"}
    ]


def test_two_instances_of_a_host_at_once_are_refused(tmp_path: Path) -> None:
    f = write(
        tmp_path / "s.json",
        line("h-1", [span("r3", 3, 4)], host="h"),
        line("h-0", [span("r1", 0, 1), span("r2", 5, 6)], host="h"),
    )
    with pytest.raises(LogError, match=r"s\.json: line 2: field 'service\.instance\.id'"):
        load_otlp_log(f)


def test_a_nodes_file_beside_the_spans_gives_its_node_events(tmp_path: Path) -> None:
    write(tmp_path / "spans.jsonl", line("a-0", [span("r1", 0, 1)], host="a"))
    nodes = "time_s,replica,event,pool,detail\n-3600,a,start,main,\n30,a,restart,main,oom\n"
    (tmp_path / "nodes.csv").write_text(nodes)
    log = load_otlp_log(tmp_path)
    assert log.pools == ["main"] and log.initial_uptime_s.tolist() == [3600.0]
    assert log.node_events[["time_s", "event", "detail"]].values.tolist() == [
        [30.0, "restart", "oom"]
    ]
    (tmp_path / "nodes.csv").write_text("time_s,replica,event\n0,b,start\n30,a,restart\n")
    log = load_otlp_log(tmp_path)  # a's start is the spans' (test_otlp_nodes)
    assert log.replica_names == ["b", "a"] and log.up_at_start.tolist() == [True, True]


def test_format_detection(tmp_path: Path) -> None:
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    (csv_dir / "requests.csv").write_text("x\n")
    spans = write(tmp_path / "spans.jsonl", line("a", [span("r1", 0, 1)]))
    assert is_otlp_log(spans) and is_otlp_log(tmp_path) and not is_otlp_log(csv_dir)
    assert not is_otlp_log(csv_dir / "requests.csv") and not is_otlp_log(tmp_path / "nope")
    write(csv_dir / "spans.json", line("a", [span("r1", 0, 1)]))
    with pytest.raises(LogError, match=r"both OTLP JSON spans \(spans\.json\) and requests\.csv"):
        load_otlp_log(csv_dir)


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ('{"resourceSpans": [', r"line 2: not JSON"),
        ("[1]", r"line 2: not a JSON object"),
        ('{"resourceSpans": [{"nope": 1}]}', r"line 2: .*no field named \"nope\""),
        (line("a", [span("r", 0, 1, prompt=1.5)]), r"line 2: field 'gen_ai\.usage\.prompt_"),
        (line("a", [span("r", 0, 1, prompt=0)]), r"line 2: field 'gen_ai\.usage\.prompt_"),
        (line("a", [span("r", 2, 1)]), r"line 2: field 'endTimeUnixNano'"),
        (json.dumps({"resourceSpans": [{"scopeSpans": []}]}), r"line 2: field 'service\.inst"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_line_and_attribute(
    tmp_path: Path, bad: str, where: str
) -> None:
    f = write(tmp_path / "x.jsonl", line("a", [span("r", 0, 1)]), bad)
    with pytest.raises(LogError) as info:
        load_otlp_log(f)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{f}: ") and re.search(where, text), text


def test_a_missing_or_mistyped_attribute_names_it_and_the_type(tmp_path: Path) -> None:
    s = span("r", 0, 1)
    s["attributes"] = [a for a in s["attributes"] if a["key"] != "gen_ai.usage.completion_tokens"]
    with pytest.raises(LogError, match=r"line 1: field 'gen_ai.usage.completion_tokens': span "
                       r"attribute missing; expected an attribute with intValue"):  # fmt: skip
        load_otlp_log(write(tmp_path / "a.json", line("a", [s])))
    s = span("r", 0, 1, extra=[attr("gen_ai.latency.e2e", "1.0")])
    with pytest.raises(LogError, match=r"'gen_ai.latency.e2e': .*expected doubleValue, got "):
        load_otlp_log(write(tmp_path / "b.json", line("a", [s])))


def test_the_attribute_table_is_in_the_docs() -> None:
    rows = {}
    lines = DOCS.read_text().splitlines()
    start = lines.index("| attribute | kind | required | read as |")
    end = lines.index("", start)
    for text in lines[start + 2 : end]:
        if m := re.match(r"\| `([\w.]+)`( \(resource\))? \|(.*)\|$", text):
            rows[m[1]] = (bool(m[2]), [c.strip() for c in m[3].split("|")])
    for table, resource in ((ATTRIBUTES, False), (RESOURCE_ATTRIBUTES, True)):
        for name, spec in table.items():
            kind = {"string": "stringValue", "int": "intValue", "double": "doubleValue"}
            assert rows.get(name) == (
                resource,
                [
                    kind.get(spec.kind, "arrayValue of stringValue"),
                    "yes" if spec.required else "no",
                    spec.meaning,
                ],
            ), name
    assert len(rows) == len(ATTRIBUTES) + len(RESOURCE_ATTRIBUTES)
