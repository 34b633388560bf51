"""The OTLP span and resource attributes a ``fragsim postmortem`` log reads
(:data:`ATTRIBUTES`, :data:`RESOURCE_ATTRIBUTES`: the table in docs/postmortem.md) and
how one is read: of its kind, not blank, the same value where a key is given twice.
Errors are one :class:`~sim.postmortem.log.LogError` line naming the file, line and
attribute (:mod:`sim.postmortem.otlp_log` reads the spans).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

from sim.postmortem.log import LogError

if TYPE_CHECKING:  # the optional `otlp` extra, imported where a log is read
    from collections.abc import Iterable

    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass(frozen=True)
class Attribute:
    """One attribute the reader uses: its OTLP value kind, whether a span (or resource)
    must carry it, and what it becomes in the log."""

    kind: str
    """``string``, ``int``, ``double`` or ``string array`` (``stringValue``,
    ``intValue``, ``doubleValue``, ``arrayValue`` of ``stringValue``)."""
    required: bool
    meaning: str


AttrValue: TypeAlias = str | int | float | list[str]
"""An attribute's value as read: a ``string``, ``int``, ``double`` or ``string array``."""

_LATENCY: Final = "checked (seconds, 0 to 86,400), not replayed"
ATTRIBUTES: Final[dict[str, Attribute]] = {
    "gen_ai.request.id": Attribute(
        "string", True, "`request_id` (spans sharing it: attempts of one request)"
    ),
    "gen_ai.usage.prompt_tokens": Attribute("int", True, "`prompt_tokens` (1 to 2^40)"),
    "gen_ai.usage.completion_tokens": Attribute("int", True, "`output_tokens` (0 to 2^40)"),
    "gen_ai.latency.time_in_queue": Attribute("double", False, _LATENCY),
    "gen_ai.latency.time_to_first_token": Attribute("double", False, _LATENCY),
    "gen_ai.latency.e2e": Attribute("double", False, _LATENCY),
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


def int_attribute(attrs: dict[str, AttrValue], name: str) -> int:
    """The ``int`` attribute ``name`` of ``attrs`` (read by :func:`read_attributes`)."""
    value = attrs[name]
    assert isinstance(value, int)  # _value checked its kind (an "int" of ATTRIBUTES)
    return value


def read_attributes(
    kvs: Iterable[KeyValue], table: dict[str, Attribute], where: tuple[Path, int], what: str
) -> dict[str, AttrValue]:
    """The values of ``table``'s attributes among ``kvs``, checked for kind; a key given
    twice (any key) must have the same value both times."""
    path, line = where
    found: dict[str, AttrValue] = {}
    seen: dict[str, AnyValue] = {}
    for kv in kvs:
        spec = table.get(kv.key)
        value = None if spec is None else _value(kv, spec, where, what)
        if seen.setdefault(kv.key, kv.value) != kv.value:
            raise LogError(
                path,
                f"{what}attribute given twice with different values",
                line=line,
                field=kv.key,
                expected="each attribute key once",
            )
        if value is not None:  # an attribute of the table
            found.setdefault(kv.key, value)
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


def _value(kv: KeyValue, spec: Attribute, where: tuple[Path, int], what: str) -> AttrValue:
    """The value of attribute ``kv``, checked to be of ``spec``'s kind (a string: not
    blank)."""
    path, line = where
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
    if got == "array_value":
        return [v.string_value for v in items]
    value: AttrValue = getattr(kv.value, want)
    if isinstance(value, str) and not value.strip():  # a string_value
        raise LogError(
            path, f"{what}attribute is blank", line=line, field=kv.key,
            expected="a non-empty stringValue", written=value,
        )  # fmt: skip
    return value
