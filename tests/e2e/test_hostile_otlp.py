"""Hostile OTLP span logs, third round (issue 26.2 and 26.5): `fragsim postmortem` on
span files that are compressed, not UTF-8, deeply nested, given a key or an attribute
twice, hold values out of range or a clock decades off, are not regular files, or
carry a nodes file that contradicts them.

Every refusal is one ``error:`` line naming the file, the line and the attribute (or
JSON key) where there is one, exit status 2, and nothing written; each class is tried
with several values. The valid variants (gzip, zstd, the Collector's zstd records, a
node whose last span lasts no time) replay end to end.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.hostile import refused, special_file
from typer.testing import CliRunner

pytest.importorskip("opentelemetry.proto", reason="the otlp extra (opentelemetry-proto)")

from sim.cli import app
from sim.postmortem import otlp_files
from sim.postmortem.log import LogError
from sim.postmortem.otlp_files import MAX_JSON_DEPTH
from sim.postmortem.otlp_log import MAX_LOG_SPAN_S, MAX_SPAN_DURATION_S, load_otlp_log
from traces.validate import MAX_TOKENS

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem-otlp"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
YEAR_NS = 365 * 86_400 * 10**9


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"key": key, "value": value}
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def span(rid: str, start_s: float, end_s: float, *attrs: dict[str, Any],
         shift_ns: int = 0, **fields: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "name": "llm_request",
        "startTimeUnixNano": str(T0 + shift_ns + round(start_s * 1e9)),
        "endTimeUnixNano": str(T0 + shift_ns + round(end_s * 1e9)),
        "attributes": [
            kv("gen_ai.request.id", rid),
            kv("gen_ai.usage.prompt_tokens", 100),
            kv("gen_ai.usage.completion_tokens", 20),
            *attrs,
        ],
        **fields,
    }


def line(host: str, *spans: dict[str, Any], resource: tuple[Any, ...] = ()) -> str:
    res = [kv("service.instance.id", f"{host}-0"), kv("host.name", host), *resource]
    doc = {"resourceSpans": [{"resource": {"attributes": res}, "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(doc)


GOOD = [
    line("a", span("r1", 0, 2), span("r2", 5, 7)),
    line("b", span("r3", 1, 3), span("r4", 120, 121)),
]
"""Two nodes, a log of 121 s: the lines around a hostile one."""


def folder(tmp_path: Path, *lines: str, name: str = "spans.jsonl") -> Path:
    log = tmp_path / "log"
    log.mkdir()
    (log / name).write_text("\n".join(lines) + "\n")
    return log


def postmortem(log: Path, out: Path, *more: str) -> Any:
    args = ["postmortem", str(log), "-o", str(out), "--no-counterfactuals", "--no-report", *more]
    return runner.invoke(app, args)


def refused_at(tmp_path: Path, log: Path, starts: str) -> str:
    """The one error line of ``fragsim postmortem log``: exit 2, ``starts``, nothing written."""
    out = tmp_path / "out"
    text = refused(postmortem(log, out), starts)
    assert not out.exists(), text
    return text


def bad_third_line(tmp_path: Path, bad: str, field: str) -> str:
    log = folder(tmp_path, *GOOD, bad)
    return refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 3: field {field!r}: ")


# -- bytes: not UTF-8, compressed, damaged ------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff" + GOOD[0].encode(),  # a byte no UTF-8 starts with
        GOOD[0].encode().replace(b'"a-0"', b'"\xe9-0"'),  # Latin-1
        GOOD[0].encode().replace(b'"r1"', b'"r\x80"'),  # a lone continuation byte
        GOOD[0].encode() + b"\xe2\x82",  # a character cut short
        GOOD[0].encode("utf-16"),  # another encoding
    ],
)
def test_a_line_that_is_not_utf8_is_named_with_its_byte(tmp_path: Path, raw: bytes) -> None:
    log = folder(tmp_path, GOOD[1])
    (log / "spans.jsonl").write_bytes(GOOD[1].encode() + b"\n" + raw + b"\n")
    text = refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 2: not UTF-8 text (byte 0x")
    assert "at byte offset" in text


def _zstd(data: bytes) -> bytes:
    return bytes(pa.Codec("zstd").compress(data, asbytes=True))


def _records(data: bytes) -> bytes:
    """The Collector's file exporter, ``compression: zstd`` without native compression."""
    frames = [_zstd(text) for text in data.splitlines()]
    return b"".join(len(f).to_bytes(4, "big") + f for f in frames)


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("spans.jsonl.gz", gzip.compress),
        ("spans.jsonl", gzip.compress),  # by its bytes, whatever the name
        ("spans.json", lambda b: gzip.compress(b[: len(b) // 2]) + gzip.compress(b[len(b) // 2 :])),
        ("spans.jsonl.zst", _zstd),
        ("spans.jsonl", lambda b: _zstd(b[:1000]) + _zstd(b[1000:])),  # two frames
        ("spans.json", _records),
    ],
)  # fmt: skip
def test_compressed_span_files_read_as_the_plain_one(
    tmp_path: Path, name: str, encode: Any
) -> None:
    plain = load_otlp_log(EXAMPLE / "spans.jsonl")
    path = tmp_path / name
    path.write_bytes(encode((EXAMPLE / "spans.jsonl").read_bytes()))
    log = load_otlp_log(path)
    assert log.attempts.equals(plain.attempts) and log.requests.equals(plain.requests)
    assert log.node_events.equals(plain.node_events)


@pytest.mark.parametrize(
    ("encode", "says"),
    [
        (lzma.compress, "a file compressed with xz"),
        (bz2.compress, "a file compressed with bzip2"),
        (lambda b: b"PK\x03\x04" + b, "a file compressed with zip"),
        (lambda b: b"\x04\x22\x4d\x18" + b, "a file compressed with lz4"),
        (lambda b: gzip.compress(b)[:-20], "damaged or truncated gzip"),
        (lambda b: gzip.compress(b)[:40] + b"\0" * 40, "damaged or truncated gzip"),
        (lambda b: _zstd(b)[:-9], "damaged or truncated zstd"),
        (lambda b: _records(b)[:-5], "truncated zstd record"),
        (lambda b: _records(b)[:-3] + b"\1\2\3", "damaged zstd record"),
    ],
)
def test_other_or_damaged_compressions_are_refused_by_name(
    tmp_path: Path, encode: Any, says: str
) -> None:
    log = folder(tmp_path, *GOOD)
    (log / "spans.jsonl").write_bytes(encode(("\n".join(GOOD * 3) + "\n").encode()))
    text = refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line ")
    assert says in text


@pytest.mark.parametrize("encode", [lambda b: b, gzip.compress, _zstd, _records])
def test_a_line_longer_than_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encode: Any
) -> None:
    """A compressed file of zeros without a newline would fill memory: bounded per line
    (here lowered to 2,000 bytes; the lines around it are shorter)."""
    monkeypatch.setattr(otlp_files, "MAX_LINE_BYTES", 2_000)
    log = folder(tmp_path, *GOOD)
    (log / "spans.jsonl").write_bytes(encode((GOOD[0] + "\n" + "0" * 5_000 + "\n").encode()))
    refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 2: line longer than 2,000 bytes")


# -- JSON: nesting, keys given twice, numbers JSON does not have --------------------------


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range(levels):
        value = {"arrayValue": {"values": [value]}}
    return value


@pytest.mark.parametrize(
    "bad",
    [
        "[" * 200_000 + "]" * 200_000,
        '{"a":' * 200_000 + "1" + "}" * 200_000,
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
        line("a", span("r9", 9, 10, kv("deep", _nested(MAX_JSON_DEPTH // 3)))),
    ],
)
def test_json_nested_too_deep_is_refused_at_its_line(tmp_path: Path, bad: str) -> None:
    log = folder(tmp_path, *GOOD, bad)
    text = refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 3: JSON nested deeper than")
    assert len(text) < 400


def test_an_attribute_nested_within_the_bound_is_read(tmp_path: Path) -> None:
    log = folder(tmp_path, *GOOD, line("a", span("r9", 9, 10, kv("deep", _nested(12)))))
    assert len(load_otlp_log(log).attempts) == 5


@pytest.mark.parametrize(
    ("bad", "key"),
    [
        (GOOD[0].replace('{"resourceSpans": ', '{"resourceSpans": [], "resourceSpans": ', 1),
         "resourceSpans"),
        (GOOD[0].replace('"name": ', '"startTimeUnixNano": "1", "name": ', 1), "startTimeUnixNano"),
        (GOOD[0].replace('{"stringValue": "r1"}', '{"stringValue": "r1", "stringValue": "r7"}'),
         "stringValue"),
        (GOOD[0].replace('"scopeSpans": [{', '"scopeSpans": [{"spans": [], ', 1), "spans"),
    ],
)  # fmt: skip
def test_a_json_key_given_twice_is_refused(tmp_path: Path, bad: str, key: str) -> None:
    text = bad_third_line(tmp_path, bad, key)
    assert "JSON key given twice" in text


@pytest.mark.parametrize(
    "bad",
    [
        GOOD[0].replace('"intValue": "100"', '"intValue": ' + "1" * 5000, 1),
        GOOD[0].replace('"intValue": "100"', '"doubleValue": NaN', 1),
        GOOD[0].replace('"intValue": "100"', '"doubleValue": -Infinity', 1),
        GOOD[0][:-9],
    ],
)
def test_what_is_not_strict_json_is_refused_at_its_line(tmp_path: Path, bad: str) -> None:
    log = folder(tmp_path, *GOOD, bad)
    refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 3: not JSON: ")


# -- attributes: twice, blank, out of range ------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "key"),
    [
        ((kv("gen_ai.request.id", "r9b"),), "gen_ai.request.id"),
        ((kv("gen_ai.usage.prompt_tokens", 101),), "gen_ai.usage.prompt_tokens"),
        ((kv("service.name", "x"), kv("service.name", "y")), "service.name"),  # unread, too
        ((kv("error.type", "oom"), kv("error.type", "timeout")), "error.type"),
    ],
)
def test_an_attribute_twice_with_different_values_is_refused(
    tmp_path: Path, attrs: tuple[Any, ...], key: str
) -> None:
    text = bad_third_line(tmp_path, line("a", span("r9", 9, 10, *attrs)), key)
    assert "given twice with different values" in text


def test_an_attribute_twice_with_the_same_value_is_read(tmp_path: Path) -> None:
    same = (kv("gen_ai.request.id", "r9"), kv("service.name", "x"), kv("service.name", "x"))
    log = load_otlp_log(folder(tmp_path, *GOOD, line("a", span("r9", 9, 10, *same))))
    assert len(log.attempts) == 5


@pytest.mark.parametrize(
    ("bad", "key"),
    [
        (line("a", span("", 9, 10)), "gen_ai.request.id"),
        (line("a", span(" \t", 9, 10)), "gen_ai.request.id"),
        (line("a", span("r9", 9, 10, kv("error.type", ""))), "error.type"),
        (line("a", span("r9", 9, 10), resource=(kv("k8s.pod.name", ""),)), "k8s.pod.name"),
        (GOOD[0].replace('"stringValue": "a"', '"stringValue": ""', 1), "host.name"),
    ],
)
def test_a_blank_string_attribute_is_refused(tmp_path: Path, bad: str, key: str) -> None:
    text = bad_third_line(tmp_path, bad, key)
    assert "attribute is blank; expected a non-empty stringValue" in text


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("gen_ai.usage.prompt_tokens", 2**63 - 1),
        ("gen_ai.usage.prompt_tokens", MAX_TOKENS + 1),
        ("gen_ai.usage.prompt_tokens", 0),
        ("gen_ai.usage.prompt_tokens", -(2**63)),
        ("gen_ai.usage.completion_tokens", -1),
        ("gen_ai.usage.completion_tokens", 2**62),
        ("gen_ai.latency.time_to_first_token", -5.0),
        ("gen_ai.latency.time_to_first_token", {"doubleValue": "NaN"}),
        ("gen_ai.latency.e2e", {"doubleValue": "Infinity"}),
        ("gen_ai.latency.time_in_queue", MAX_SPAN_DURATION_S + 1),
        ("gen_ai.latency.e2e", 1e308),
    ],
)
def test_a_number_out_of_range_is_refused_at_its_span(
    tmp_path: Path, attr: str, value: Any
) -> None:
    s = span("r9", 9, 10)
    s["attributes"] = [a for a in s["attributes"] if a["key"] != attr] + [kv(attr, value)]
    text = bad_third_line(tmp_path, line("a", s), attr)
    assert "out of range; expected " in text and "row" not in text


@pytest.mark.parametrize("code", [99, 3, -1, 2**31 - 1])
def test_an_unknown_status_code_is_refused(tmp_path: Path, code: int) -> None:
    text = bad_third_line(tmp_path, line("a", span("r9", 9, 10, status={"code": code})),
                          "status.code")  # fmt: skip
    assert f"unknown status code; expected one of 0 (UNSET), 1 (OK), 2 (ERROR), got {code}" in text


# -- times: a span too long, a clock far off -----------------------------------------------


@pytest.mark.parametrize(
    "end_ns",
    [2**64 - 1, T0 + 9 * 10**9 + int(MAX_SPAN_DURATION_S * 1e9) + 1, T0 + 100 * YEAR_NS],
)
def test_a_span_lasting_more_than_a_day_is_refused(tmp_path: Path, end_ns: int) -> None:
    s = span("r9", 9, 10)
    s["endTimeUnixNano"] = str(end_ns)
    text = bad_third_line(tmp_path, line("a", s), "endTimeUnixNano")
    assert "span lasts " in text and f"got {end_ns}" in text


@pytest.mark.parametrize(
    "shift_ns", [40 * YEAR_NS, 2 * YEAR_NS, -YEAR_NS, int(MAX_LOG_SPAN_S * 1e9) + 10**9]
)
def test_one_nodes_clock_far_off_is_named_at_its_span(tmp_path: Path, shift_ns: int) -> None:
    """Not "the run spans 1,261,441,191 s" of a scenario field: the span and its line."""
    off = line("c", span("r8", 2, 3, shift_ns=shift_ns), span("r9", 4, 5, shift_ns=shift_ns))
    log = folder(tmp_path, *GOOD, line("d", span("r6", 10, 11), span("r7", 12, 13)), off)
    field = "endTimeUnixNano" if shift_ns > 0 else "startTimeUnixNano"
    text = refused_at(tmp_path, log, f"{log / 'spans.jsonl'}: line 4: field {field!r}: span ")
    assert "the spans' median start (2026-01-01T00:00:" in text
    assert "expected all spans within 2,592,000 s (30 days" in text


def test_a_log_of_thirty_days_is_read(tmp_path: Path) -> None:
    last = MAX_LOG_SPAN_S - 1
    log = load_otlp_log(folder(tmp_path, *GOOD, line("a", span("r9", last - 1, last))))
    assert log.requests["arrival_s"].max() == pytest.approx(last - 1)


# -- entries that are not regular files ----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("fifo", "a FIFO (named pipe), not a regular file"),
        ("socket", "a socket, not a regular file"),
        ("dangling", "a dangling symlink (to "),
        ("loop", "a symlink loop"),
        ("device", "a character device, not a regular file"),
        ("directory", "a directory, not a regular file"),
    ],
)
@pytest.mark.parametrize("name", ["spans.jsonl", "more.json.gz", "nodes.csv"])
def test_an_entry_that_is_no_regular_file_is_named_not_skipped(
    tmp_path: Path, kind: str, says: str, name: str
) -> None:
    """Never opened (a FIFO would block the reader): refused by name and kind, in the
    folder and given alone."""
    log = folder(tmp_path, *GOOD, name="a.jsonl")
    special_file(log / name, kind)
    text = refused_at(tmp_path, log, f"{log / name}: {says}")
    assert "neither" not in text
    if name != "nodes.csv" and kind != "directory":  # a folder given is a LOG_DIR
        refused_at(tmp_path, log / name, f"{log / name}: {says}")


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("fifo", "not a regular file (a FIFO (named pipe))"),
        ("dangling", "cannot read file (a symlink to "),
        ("loop", "cannot read file (a symlink to requests.csv: Too many levels"),
    ],
)
def test_a_csv_log_dirs_requests_file_that_is_no_file_is_named(
    tmp_path: Path, kind: str, says: str
) -> None:
    """The CSV/Parquet LOG_DIR too: not "neither requests.csv and requests.parquet"."""
    log = tmp_path / "log"
    log.mkdir()
    csv_example = EXAMPLE.parent / "postmortem"
    (log / "nodes.csv").write_bytes((csv_example / "nodes.csv").read_bytes())
    special_file(log / "requests.csv", kind)
    refused_at(tmp_path, log, f"{log / 'requests.csv'}: {says}")


# -- nodes.csv contradicting the spans: its line is blamed ---------------------------------


@pytest.mark.parametrize(
    ("nodes", "blamed"),
    [
        ("time_s,replica,event\n-60,b,start\n90,a,start\n", 3),  # a's spans start at 0
        ("time_s,replica,event\n-60,b,start\n90,a,scale_up\n", 3),
        ("time_s,replica,event\n-60,b,start\n-60,a,start\n3,a,scale_down\n", 4),
        ("time_s,replica,event\n60,b,start\n-60,a,start\n", 2),
    ],
)
def test_a_nodes_file_contradicting_the_spans_is_blamed_by_line(
    tmp_path: Path, nodes: str, blamed: int
) -> None:
    """One of them after an instance change: the spans' inferred restart is not blamed."""
    restart = line("a", span("r5", 30, 31)).replace('"a-0"', '"a-1"')
    log = folder(tmp_path, *GOOD, restart)
    (log / "nodes.csv").write_text(nodes)
    refused_at(tmp_path, log, f"{log / 'nodes.csv'}: line {blamed} (row {blamed - 2}): field ")


def test_a_lifecycle_error_says_what_put_the_node_in_its_state(tmp_path: Path) -> None:
    log = folder(tmp_path, *GOOD)
    (log / "nodes.csv").write_text("time_s,replica,event\n-60,a,start\n50,a,crash\n60,a,crash\n")
    text = refused_at(tmp_path, log, f"{log / 'nodes.csv'}: line 4 (row 2): field 'event': ")
    assert "crash of replica 'a' at 60 s, when it is crashed (since its crash at 50 s: " in text
    assert "nodes.csv line 3)" in text


# -- valid variants, end to end ------------------------------------------------------------


def test_a_node_whose_last_span_lasts_no_time_replays(tmp_path: Path) -> None:
    """b's last span, at 100 s, lasts 0 s (so does c's only span): b is scaled down just
    after it, not before; the replay routes it to b."""
    log = folder(
        tmp_path,
        line("a", span("r1", 0, 2), span("r2", 150, 152), span("r3", 300, 301)),
        line("b", span("r4", 1, 4), span("r5", 100, 100)),
        line("c", span("r6", 200, 200)),
    )
    out = tmp_path / "out"
    result = postmortem(log, out, "-q")
    assert result.exit_code == 0, result.output
    record = json.loads((out / "postmortem.json").read_text())
    events = [(e["replica"], e["event"], e["time_s"]) for e in record["node_events"]]
    assert [e[:2] for e in events] == [("b", "scale_down"), ("c", "start"), ("c", "scale_down")]
    assert 100.0 < events[0][2] < 100.0 + 1e-9 and 200.0 < events[2][2] < 200.0 + 1e-9
    assert record["router_fallbacks"] == 0


def test_a_gzip_folder_replays_as_the_plain_one(tmp_path: Path) -> None:
    records = []
    for sub, compress in (("plain", False), ("gzip", True)):
        log = tmp_path / sub / "log"
        log.mkdir(parents=True)
        data = (EXAMPLE / "spans.jsonl").read_bytes()
        name = "spans.jsonl.gz" if compress else "spans.jsonl"
        (log / name).write_bytes(gzip.compress(data) if compress else data)
        (log / "nodes.csv").write_bytes((EXAMPLE / "nodes.csv").read_bytes())
        result = postmortem(log, tmp_path / sub / "out", "-q")
        assert result.exit_code == 0, result.output
        records.append(json.loads((tmp_path / sub / "out" / "postmortem.json").read_text()))
    assert records[0] == records[1] and records[0]["recall"] == 1.0


def test_the_bounds_page_states_the_readers_bounds() -> None:
    """docs/errors-and-bounds.md's OTLP section, held to the constants."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "errors-and-bounds.md").read_text()
    section = page[page.index("\n## OTLP span logs") :]
    section = section[: section.index("\n## ", 1)]
    assert f"nested more than {MAX_JSON_DEPTH} levels" in section
    assert f"over {MAX_SPAN_DURATION_S:,.0f} s" in section and MAX_SPAN_DURATION_S == 86_400
    assert "to 2^40" in section and MAX_TOKENS == 2**40
    assert "more than 30 days" in section and MAX_LOG_SPAN_S == 30 * 86_400


# -- any value anywhere: a LogError or a log, never another exception ----------------------

HOSTILE_VALUES: list[Any] = [
    None, True, 5, -1, 2**64, 1e308, "", "x", "NaN", "-5", [], {}, [5], {"x": 1},
    {"intValue": "9223372036854775807"}, {"doubleValue": "-Infinity"}, {"stringValue": ""},
    {"arrayValue": {"values": [{"kvlistValue": {}}]}},
]  # fmt: skip


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        out += _paths(child, (*at, key))
    return out


def test_any_value_at_any_place_is_a_log_or_one_error_line(tmp_path: Path) -> None:
    """Each place of a span line (every key's value, every list item) given each hostile
    value in turn: the reader gives a log or one LogError line, nothing else."""
    base = json.loads(line("a", span("r9", 9, 10, kv("gen_ai.latency.e2e", 1.0)),
                           resource=(kv("k8s.pod.name", "a"),)))  # fmt: skip
    refused_n = 0
    for k, path in enumerate(_paths(base)[1:]):
        for value in HOSTILE_VALUES:
            doc = json.loads(json.dumps(base))
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            f = tmp_path / f"{k}.jsonl"
            f.write_text(GOOD[0] + "\n" + json.dumps(doc) + "\n")
            try:
                load_otlp_log(f)
            except LogError as exc:
                assert "\n" not in str(exc) and str(exc).startswith(f"{f}: line 2: ")
                refused_n += 1
    assert refused_n > 200
