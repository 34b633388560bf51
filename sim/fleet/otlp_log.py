"""OpenTelemetry request spans as a ``fragsim postmortem`` log: vLLM's per-request spans,
as the OpenTelemetry Collector's file exporter writes them, read into the same
:class:`~sim.fleet.postmortem_log.PostmortemLog` the CSV/Parquet log gives (the replay
does not know which it got).

Input. A file (``*.json`` / ``*.jsonl``) or a folder of them (read in name order): OTLP
JSON, one ``ExportTraceServiceRequest`` per line (``resourceSpans`` -> ``scopeSpans`` ->
``spans``); blank lines are skipped. Each line is parsed by the OpenTelemetry protobuf
definitions (``opentelemetry-proto``, protobuf's ``json_format``: ``intValue`` and the
``*UnixNano`` times as strings or numbers, enums as numbers or names). ``traceId``,
``spanId`` and ``parentSpanId`` are dropped first: OTLP JSON writes them in hex, not in
protobuf's base64, and the log does not use them. A folder may also hold ``nodes.csv`` or
``nodes.parquet`` (the CSV log's nodes format, :mod:`sim.fleet.postmortem_log`; its
``timestamp`` column, where used, has the same origin as the spans).

Every span is one attempt (:data:`ATTRIBUTES` maps the attribute names; other
attributes and spans' names are ignored). Its arrival is its start time in seconds from
the log start, the earliest span start. Spans sharing ``gen_ai.request.id`` are the
attempts of one request, numbered by start time (ties in file order). A span failed when
its status code is ERROR or it has ``error.type`` (``timeout`` / ``timed-out``:
timed-out; anything else: failed); else it is ok. The replay asks each request for
``gen_ai.usage.completion_tokens`` output tokens (for a span that failed, what it
reported: the log cannot tell what the client asked for).

Nodes. :mod:`sim.fleet.otlp_nodes` infers each node's start, stop and restarts from
its spans (the node: ``k8s.pod.name``, else ``host.name``, else ``service.instance.id``;
the instance: ``service.instance.id``) and merges them with the nodes file where one is
given (the file wins; a conflict is an error naming its line and field).

Errors are one :class:`~sim.fleet.postmortem_log.LogError` line naming the file, line and
attribute (or JSON field), what was expected and what was found.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from sim.fleet.otlp_nodes import NodesFile, Span, span_fleet
from sim.fleet.postmortem_log import (
    NODES,
    LogError,
    PostmortemLog,
    index_requests,
    node_times,
    read_table,
)
from sim.fleet.postmortem_nodes import Fleet, node_events, node_pools
from traces.errors import TraceError
from traces.validate import ReadContext

SPAN_SUFFIXES: Final = (".json", ".jsonl")
STATUS_CODE_ERROR: Final = 2
"""``Status.StatusCode.STATUS_CODE_ERROR`` of the OTLP trace protocol."""
TIMED_OUT: Final = ("timeout", "timed-out")


@dataclass(frozen=True)
class Attribute:
    """One attribute the reader uses: its OTLP value kind, whether a span (or resource)
    must carry it, and what it becomes in the log."""

    kind: str
    """``string``, ``int``, ``double`` or ``string array`` (``stringValue``,
    ``intValue``, ``doubleValue``, ``arrayValue`` of ``stringValue``)."""
    required: bool
    meaning: str


ATTRIBUTES: Final[dict[str, Attribute]] = {
    "gen_ai.request.id": Attribute(
        "string", True, "`request_id` (spans sharing it: attempts of one request)"
    ),
    "gen_ai.usage.prompt_tokens": Attribute("int", True, "`prompt_tokens` (>= 1)"),
    "gen_ai.usage.completion_tokens": Attribute("int", True, "`output_tokens` (>= 0)"),
    "gen_ai.latency.time_in_queue": Attribute("double", False, "checked, not replayed"),
    "gen_ai.latency.time_to_first_token": Attribute("double", False, "checked, not replayed"),
    "gen_ai.latency.e2e": Attribute("double", False, "checked, not replayed"),
    "gen_ai.response.finish_reasons": Attribute("string array", False, "checked, not replayed"),
    "error.type": Attribute("string", False, "`status` failed (timed-out for `timeout`)"),
}
"""Span attribute -> how it is read (the table in docs/postmortem.md)."""
RESOURCE_ATTRIBUTES: Final[dict[str, Attribute]] = {
    "service.instance.id": Attribute(
        "string",
        True,
        "the instance (a new one on a node: a restart); the node without the two below",
    ),
    "k8s.pod.name": Attribute("string", False, "`replica` (the node), first choice"),
    "host.name": Attribute("string", False, "`replica` (the node) without a pod name"),
}
"""Resource attribute -> how it is read."""
_ONEOF: Final = {
    "string": "string_value",
    "int": "int_value",
    "double": "double_value",
    "string array": "array_value",
}
_JSON_NAME: Final = {
    "string_value": "stringValue",
    "int_value": "intValue",
    "double_value": "doubleValue",
    "array_value": "arrayValue",
    "bool_value": "boolValue",
    "kvlist_value": "kvlistValue",
    "bytes_value": "bytesValue",
}
_IDS: Final = ("traceId", "spanId", "parentSpanId")


def is_otlp_log(path: str | Path) -> bool:
    """Whether ``path`` is an OTLP JSON log: a ``*.json``/``*.jsonl`` file, or a folder
    holding one (a CSV/Parquet LOG_DIR holds none)."""
    path = Path(path)
    if path.is_file():
        return path.suffix in SPAN_SUFFIXES
    return path.is_dir() and bool(_span_files(path))


def _span_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SPAN_SUFFIXES)


def load_otlp_log(path: str | Path) -> PostmortemLog:
    """Read, check and index an OTLP JSON log (module docstring)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    files = _span_files(path) if path.is_dir() else [path]
    mixed = [p for p in (folder / "requests.csv", folder / "requests.parquet") if p.exists()]
    if path.is_dir() and mixed:
        raise LogError(
            path,
            f"both OTLP JSON spans ({files[0].name}) and {mixed[0].name}",
            expected="one log format per folder",
        )
    spans = [s for f in files for s in _read_spans(f)]
    if not spans:
        raise LogError(path, "no spans", expected="at least one span")
    origin_ns = min(s.start_ns for s in spans)
    nodes = [folder / f"nodes.{ext}" for ext in ("csv", "parquet")]
    nodes = [p for p in nodes if p.exists()] if path.is_dir() else []
    try:
        if len(nodes) > 1:
            raise LogError(folder, "both nodes.csv and nodes.parquet", expected="at most one")
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
    with path.open(encoding="utf-8") as f:
        for line_no, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise LogError(path, f"not JSON: {exc.msg}", line=line_no) from None
            if not isinstance(doc, dict):
                raise LogError(
                    path, "not a JSON object", line=line_no, expected="an ExportTraceServiceRequest"
                )
            _drop_ids(doc)
            message = ExportTraceServiceRequest()
            try:
                json_format.ParseDict(doc, message)
            except json_format.ParseError as exc:
                why = " ".join(str(exc).split())[:300]
                raise LogError(
                    path, why, line=line_no, expected="OTLP JSON (ExportTraceServiceRequest)"
                ) from None
            spans += _spans_of(message, (path, line_no))
    return spans


def _drop_ids(doc: dict[str, Any]) -> None:
    """Remove the hex span/trace ids (OTLP JSON's, not protobuf JSON's encoding)."""
    for rs in doc.get("resourceSpans") or ():
        for ss in (rs.get("scopeSpans") if isinstance(rs, dict) else None) or ():
            for span in (ss.get("spans") if isinstance(ss, dict) else None) or ():
                if isinstance(span, dict):
                    for key in _IDS:
                        span.pop(key, None)
                    for link in span.get("links") or ():
                        if isinstance(link, dict):
                            link.pop("traceId", None)
                            link.pop("spanId", None)


def _spans_of(message: Any, where: tuple[Path, int]) -> list[Span]:
    out = []
    for rs in message.resource_spans:
        res = _attributes(rs.resource.attributes, RESOURCE_ATTRIBUTES, where, "resource ")
        instance = str(res["service.instance.id"])
        node = str(res.get("k8s.pod.name") or res.get("host.name") or instance)
        for ss in rs.scope_spans:
            for span in ss.spans:
                out.append(_span(span, where, node, instance))
    return out


def _span(span: Any, where: tuple[Path, int], node: str, instance: str) -> Span:
    path, line = where
    start, end = int(span.start_time_unix_nano), int(span.end_time_unix_nano)
    if start <= 0:
        raise LogError(path, "missing", line=line, field="startTimeUnixNano", expected="> 0")
    if end < start:
        raise LogError(
            path, "span ends before it starts", line=line, field="endTimeUnixNano",
            expected=f">= startTimeUnixNano ({start})", got=end,
        )  # fmt: skip
    attrs = _attributes(span.attributes, ATTRIBUTES, where, "span ")
    for name in ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"):
        low = 1 if name.endswith("prompt_tokens") else 0
        if attrs[name] < low:
            raise LogError(
                path, "out of range", line=line, field=name, expected=f">= {low}", got=attrs[name]
            )
    error = attrs.get("error.type")
    failed = span.status.code == STATUS_CODE_ERROR or error is not None
    status = "ok" if not failed else "timed-out" if str(error).lower() in TIMED_OUT else "failed"
    return Span(
        where,
        start,
        end,
        str(attrs["gen_ai.request.id"]),
        int(attrs["gen_ai.usage.prompt_tokens"]),
        int(attrs["gen_ai.usage.completion_tokens"]),
        status,
        node,
        instance,
    )


def _attributes(
    kvs: Any, table: dict[str, Attribute], where: tuple[Path, int], what: str
) -> dict[str, Any]:
    """The values of ``table``'s attributes among ``kvs``, checked for kind."""
    path, line = where
    found: dict[str, Any] = {}
    for kv in kvs:
        spec = table.get(kv.key)
        if spec is None:
            continue
        got = kv.value.WhichOneof("value")
        want = _ONEOF[spec.kind]
        items = list(kv.value.array_value.values) if got == "array_value" else []
        if got != want or any(v.WhichOneof("value") != "string_value" for v in items):
            shown = _JSON_NAME.get(got or "", "no value")
            raise LogError(
                path,
                f"{what}attribute of the wrong type",
                line=line,
                field=kv.key,
                expected=f"{_JSON_NAME[want]}" + (" of stringValue" if items else ""),
                written=shown if got != want else "arrayValue with a non-string value",
            )
        value = getattr(kv.value, want)
        found[kv.key] = [v.string_value for v in items] if got == "array_value" else value
    for name, spec in table.items():
        if spec.required and name not in found:
            raise LogError(
                path,
                f"{what}attribute missing",
                line=line,
                field=name,
                expected=f"an attribute with {_JSON_NAME[_ONEOF[spec.kind]]}",
            )
    return found


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
