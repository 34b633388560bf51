"""Reading a summary a run folder holds: :func:`parse_summary` gives the typed
:class:`~sim.results.summary_model.Summary` or refuses a summary no run could have
written with one :class:`RunFolderError` line naming the file and the field (``field
fleet.pools.0: expected an object, got a string``)."""

from __future__ import annotations

from pydantic import ValidationError

from sim.errors import clip, short
from sim.fields import JsonObject
from sim.results.folder_errors import RunFolderError
from sim.results.summary_model import Summary

SECTIONS = ("requests", "throughput", "latency_s", "failures", "memory", "alerts")
"""The sections every summary has (checked first, so a file that is not a summary at
all says so rather than naming a field deep inside)."""


def parse_summary(data: JsonObject, shown: str) -> Summary:
    """``data`` (read from the file named ``shown``) as the typed summary, unless no run
    could have written it (:mod:`sim.results.summary_model`): one
    :class:`RunFolderError` line naming the field."""
    for key in (*SECTIONS, "scenario", "allocator"):
        if key not in data:
            raise RunFolderError(f"{shown}: not a fragsim summary: no {key!r}")
    for key in ("fleet", "digests"):
        if key in data and data[key] is None:
            raise RunFolderError(f"{shown}: field {key}: expected an object, got null")
    try:
        return Summary.from_json_dict(data)
    except ValidationError as e:
        raise RunFolderError(f"{shown}: {_first_error(e)}") from None


_EXPECTED = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
}
"""pydantic's type errors, said as what a run writes."""


def _first_error(error: ValidationError) -> str:
    """The first of pydantic's errors as ``field a.b.0: what (got VALUE)``."""
    first = error.errors(include_url=False)[0]
    # a union's member is named in the location (``kv_bytes_per_token.int``): drop it
    where = ".".join(str(part) for part in first["loc"] if part not in ("int", "float"))
    message = first["msg"]
    kind = first["type"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "missing":
        message = "missing (every run writes it)"
    elif kind in ("model_type", "dict_type"):
        message = f"expected an object, got {json_type(first['input'])}"
    elif kind == "list_type":
        message = f"expected an array, got {json_type(first['input'])}"
    elif kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {short(first['input'], 40)}"
    else:
        message = f"{message[:1].lower()}{message[1:]} (got {short(first['input'], 40)})"
    return clip(f"field {where or '(top)'}: {message}", 300)


def json_type(value: object) -> str:
    """How JSON names ``value``'s type, with an article (``an object``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"
