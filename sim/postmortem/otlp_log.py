"""OpenTelemetry request spans as a ``fragsim postmortem`` log: vLLM's per-request spans,
as the OpenTelemetry Collector's file exporter writes them, read into the same
:class:`~sim.postmortem.log.PostmortemLog` the CSV/Parquet log gives (the replay
does not know which it got).

Input. A file (``*.json`` / ``*.jsonl``, maybe ``.gz`` / ``.zst``) or a folder of them
(read in name order): OTLP JSON, one ``ExportTraceServiceRequest`` per line
(``resourceSpans`` -> ``scopeSpans`` -> ``spans``), plain, gzip or zstd as the bytes say;
:mod:`sim.postmortem.otlp_files` takes the files to JSON objects (entries that are not regular
files, compressions, UTF-8, duplicate keys, nesting). Each line is parsed by the
OpenTelemetry protobuf
definitions (``opentelemetry-proto``, protobuf's ``json_format``: ``intValue`` and the
``*UnixNano`` times as strings or numbers, enums as numbers or names). ``traceId``,
``spanId`` and ``parentSpanId`` are dropped first: OTLP JSON writes them in hex, not in
protobuf's base64, and the log does not use them. A folder may also hold ``nodes.csv`` or
``nodes.parquet`` (the CSV log's nodes format, :mod:`sim.postmortem.log`; its
``timestamp`` column, where used, has the same origin as the spans).

Every span is one attempt (:data:`sim.postmortem.otlp_attributes.ATTRIBUTES` maps the attribute names; other
attributes and spans' names are ignored, but no attribute key may be given twice with
different values). Its arrival is its start time in seconds from
the log start, the earliest span start. Spans sharing ``gen_ai.request.id`` are the
attempts of one request, numbered by start time (ties in file order). A span failed when
its status code is ERROR or it has ``error.type`` (``timeout`` / ``timed-out``:
timed-out; anything else: failed); else it is ok. The replay asks each request for
``gen_ai.usage.completion_tokens`` output tokens (for a span that failed, what it
reported: the log cannot tell what the client asked for).

Nodes. :mod:`sim.postmortem.otlp_nodes` infers each node's start, stop and restarts from
its spans (the node: ``k8s.pod.name``, else ``host.name``, else ``service.instance.id``;
the instance: ``service.instance.id``) and merges them with the nodes file where one is
given (the file wins; a conflict is an error naming its line and field).

Ranges, each refused at its span (file, line and attribute): status code 0, 1 or 2;
token counts at most ``traces.validate.MAX_TOKENS``; the latencies finite, 0 to
:data:`MAX_SPAN_DURATION_S`; strings read non-blank; a span lasting at most
:data:`MAX_SPAN_DURATION_S` (zero is fine); all spans within :data:`MAX_LOG_SPAN_S` of
one another (else the span farthest from the median start is named: a node's clock set
wrong, say, not a run too long to simulate).

Errors are one :class:`~sim.postmortem.log.LogError` line naming the file, line and
attribute (or JSON field), what was expected and what was found.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa

from sim.fields import JsonObject
from sim.postmortem.log import NODES, LogError, node_times, read_table
from sim.postmortem.log_requests import PostmortemLog, index_requests
from sim.postmortem.nodes import Fleet, node_events, node_pools
from sim.postmortem.otlp_attributes import (
    ATTRIBUTES,
    RESOURCE_ATTRIBUTES,
    AttrValue,
    int_attribute,
    read_attributes,
)
from sim.postmortem.otlp_files import (
    SPAN_SUFFIXES,
    check_regular,
    documents,
    is_span_name,
    objects,
    present,
    span_entries,
)
from sim.postmortem.otlp_nodes import NodesFile, Span, span_fleet
from traces.errors import TraceError
from traces.validate import MAX_TOKENS, ReadContext

if TYPE_CHECKING:  # the optional `otlp` extra, imported where a log is read
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

__all__ = ["SPAN_SUFFIXES", "is_otlp_log", "load_otlp_log"]
STATUS_CODE_ERROR: Final = 2
"""``Status.StatusCode.STATUS_CODE_ERROR`` of the OTLP trace protocol."""
STATUS_CODES: Final = {0: "UNSET", 1: "OK", 2: "ERROR"}
MAX_SPAN_DURATION_S: Final = 86_400.0
"""The longest a span (and any latency attribute) may last: one day."""
MAX_LOG_SPAN_S: Final = 30 * 86_400.0
"""The longest time all of a log's spans may cover, first start to last end: 30 days."""
TIMED_OUT: Final = ("timeout", "timed-out")


_IDS: Final = ("traceId", "spanId", "parentSpanId")


def is_otlp_log(path: str | Path) -> bool:
    """Whether ``path`` is an OTLP JSON log: named as a span file (whatever it is: a FIFO
    of that name is refused as one), or a folder holding an entry so named (a CSV/Parquet
    LOG_DIR holds none)."""
    path = Path(path)
    if path.is_dir():
        return bool(span_entries(path))
    return is_span_name(path.name)


def load_otlp_log(path: str | Path) -> PostmortemLog:
    """Read, check and index an OTLP JSON log (module docstring)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    files = span_entries(path) if path.is_dir() else [path]
    for f in files:
        check_regular(f)
    mixed = [p for p in (folder / "requests.csv", folder / "requests.parquet") if present(p)]
    if path.is_dir() and mixed:
        raise LogError(
            path,
            f"both OTLP JSON spans ({files[0].name}) and {mixed[0].name}",
            expected="one log format per folder",
        )
    nodes = [folder / f"nodes.{ext}" for ext in ("csv", "parquet")]
    nodes = [p for p in nodes if present(p)] if path.is_dir() else []
    if len(nodes) > 1:
        raise LogError(folder, "both nodes.csv and nodes.parquet", expected="at most one")
    for p in nodes:
        check_regular(p)
    spans = [s for f in files for s in _read_spans(f)]
    if not spans:
        raise LogError(path, "no spans", expected="at least one span")
    _check_log_span(spans)
    origin_ns = min(s.start_ns for s in spans)
    try:
        nodes_file = None
        if nodes:
            node_ctx, table = read_table(nodes[0], NODES, "time_s")
            time_s = node_times(node_ctx, table, origin_ns)
            events = node_events(node_ctx, table, time_s)
            nodes_file = NodesFile(nodes[0].name, events, node_pools(node_ctx, table))
        fleet = span_fleet(spans, origin_ns, nodes_file)
        return _log(path, spans, origin_ns, fleet)
    except LogError:
        raise
    except TraceError as exc:
        raise LogError(
            exc.path,
            exc.message,
            row=exc.row,
            line=exc.line,
            field=exc.field,
            expected=exc.expected,
            got=exc.got,
            written=exc.written,
        ) from None


def _read_spans(path: Path) -> list[Span]:
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        raise LogError(
            path,
            "reading OTLP JSON needs the opentelemetry-proto package",
            expected="pip install 'fragsim[otlp]'",
        ) from None

    spans = []
    for line_no, doc in documents(path):
        _drop_ids(doc)
        message = ExportTraceServiceRequest()
        try:
            json_format.ParseDict(doc, message)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            why = " ".join(str(exc).split())[:300] or type(exc).__name__
            raise LogError(
                path, why, line=line_no, expected="OTLP JSON (ExportTraceServiceRequest)"
            ) from None
        spans += _spans_of(message, (path, line_no))
    return spans


def _drop_ids(doc: JsonObject) -> None:
    """Remove the hex span/trace ids (OTLP JSON's, not protobuf JSON's encoding); what is
    not a list of objects where one is due is left for the protobuf parser to refuse."""
    for rs in objects(doc, "resourceSpans"):
        for ss in objects(rs, "scopeSpans"):
            for span in objects(ss, "spans"):
                for key in _IDS:
                    span.pop(key, None)
                for link in objects(span, "links"):
                    link.pop("traceId", None)
                    link.pop("spanId", None)


def _spans_of(message: ExportTraceServiceRequest, where: tuple[Path, int]) -> list[Span]:
    out = []
    for rs in message.resource_spans:
        res = read_attributes(rs.resource.attributes, RESOURCE_ATTRIBUTES, where, "resource ")
        instance = str(res["service.instance.id"])
        node = str(res.get("k8s.pod.name") or res.get("host.name") or instance)
        for ss in rs.scope_spans:
            for span in ss.spans:
                out.append(_span(span, where, node, instance))
    return out


def _span(span: OtlpSpan, where: tuple[Path, int], node: str, instance: str) -> Span:
    path, line = where
    start, end = int(span.start_time_unix_nano), int(span.end_time_unix_nano)
    if start <= 0:
        raise LogError(path, "missing", line=line, field="startTimeUnixNano", expected="> 0")
    if end < start:
        raise LogError(
            path, "span ends before it starts", line=line, field="endTimeUnixNano",
            expected=f">= startTimeUnixNano ({start})", got=end,
        )  # fmt: skip
    if end - start > MAX_SPAN_DURATION_S * 1e9:
        raise LogError(
            path, f"span lasts {(end - start) / 1e9:.4g} s", line=line, field="endTimeUnixNano",
            expected=f"at most {MAX_SPAN_DURATION_S:,.0f} s after startTimeUnixNano ({start}; "
            "otlp_log.MAX_SPAN_DURATION_S)", got=end,
        )  # fmt: skip
    code = int(span.status.code)
    if code not in STATUS_CODES:
        shown = ", ".join(f"{k} ({v})" for k, v in STATUS_CODES.items())
        raise LogError(
            path, "unknown status code", line=line, field="status.code",
            expected=f"one of {shown}", got=code,
        )  # fmt: skip
    attrs = read_attributes(span.attributes, ATTRIBUTES, where, "span ")
    _check_ranges(attrs, where)
    error = attrs.get("error.type")
    failed = code == STATUS_CODE_ERROR or error is not None
    status = "ok" if not failed else "timed-out" if str(error).lower() in TIMED_OUT else "failed"
    return Span(
        where,
        start,
        end,
        str(attrs["gen_ai.request.id"]),
        int_attribute(attrs, "gen_ai.usage.prompt_tokens"),
        int_attribute(attrs, "gen_ai.usage.completion_tokens"),
        status,
        node,
        instance,
    )


def _check_ranges(attrs: dict[str, AttrValue], where: tuple[Path, int]) -> None:
    """Token counts within [low, MAX_TOKENS]; latencies finite, 0 to MAX_SPAN_DURATION_S."""
    path, line = where
    for name in ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"):
        low = 1 if name.endswith("prompt_tokens") else 0
        if not low <= int_attribute(attrs, name) <= MAX_TOKENS:
            raise LogError(
                path, "out of range", line=line, field=name,
                expected=f"a whole number from {low} to {MAX_TOKENS:,} (2^40, "
                "traces.validate.MAX_TOKENS)", got=attrs[name],
            )  # fmt: skip
    for name, spec in ATTRIBUTES.items():
        value = attrs.get(name)
        if spec.kind != "double" or value is None:
            continue
        assert isinstance(value, float)  # _value checked its kind
        if not (math.isfinite(value) and 0 <= value <= MAX_SPAN_DURATION_S):
            raise LogError(
                path, "out of range", line=line, field=name,
                expected=f"seconds from 0 to {MAX_SPAN_DURATION_S:,.0f} (finite)", got=value,
            )  # fmt: skip


def _check_log_span(spans: list[Span]) -> None:
    """All spans within MAX_LOG_SPAN_S of one another; else the one farthest from the
    median start (by its start or its end) is the error: its node's clock, most likely."""
    first, last = min(s.start_ns for s in spans), max(s.end_ns for s in spans)
    if last - first <= MAX_LOG_SPAN_S * 1e9:
        return
    median = sorted(s.start_ns for s in spans)[len(spans) // 2]

    def off(s: Span) -> int:
        return max(abs(s.start_ns - median), abs(s.end_ns - median))

    worst = max(spans, key=off)
    late = abs(worst.end_ns - median) >= abs(worst.start_ns - median)
    ns = worst.end_ns if late else worst.start_ns
    side = "after" if ns > median else "before"
    path, line = worst.where
    raise LogError(
        path,
        f"span {'ends' if late else 'starts'} at {_utc(ns)}, {abs(ns - median) / 1e9:,.0f} s "
        f"{side} the spans' median start ({_utc(median)}): the log would span "
        f"{(last - first) / 1e9:,.0f} s (a node's clock set wrong?)",
        line=line,
        field="endTimeUnixNano" if late else "startTimeUnixNano",
        expected=f"all spans within {MAX_LOG_SPAN_S:,.0f} s (30 days; otlp_log.MAX_LOG_SPAN_S) "
        "of one another",
        got=ns,
    )


def _utc(ns: int) -> str:
    """``ns`` after the Unix epoch as an ISO UTC time (to the second)."""
    try:
        return datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{ns} ns after the Unix epoch"


def _log(path: Path, spans: list[Span], origin_ns: int, fleet: Fleet) -> PostmortemLog:
    """The requests table the CSV reader would build, then its indexing."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i].request, spans[i].start_ns, i))
    attempt = np.zeros(len(spans), np.int64)
    for prev, i in itertools.pairwise(order):
        if spans[prev].request == spans[i].request:
            attempt[i] = attempt[prev] + 1
    rid_of = {r: k for k, r in enumerate(dict.fromkeys(s.request for s in spans))}
    table = pa.table(
        {
            "request_id": pa.array([rid_of[s.request] for s in spans], pa.int64()),
            "attempt": pa.array(attempt.astype(np.float64)),
            "prompt_tokens": pa.array([s.prompt_tokens for s in spans], pa.int64()),
            "output_tokens": pa.array([s.output_tokens for s in spans], pa.int64()),
            "replica": pa.array([s.node for s in spans], pa.string()),
            "status": pa.array([s.status for s in spans], pa.string()),
            "arrival_s": pa.array([(s.start_ns - origin_ns) / 1e9 for s in spans]),
        }
    )
    arrival_s = table.column("arrival_s").to_numpy()
    return index_requests(ReadContext(path, line_base=None), table, arrival_s, fleet, "the spans")
