"""Values a user writes: numbers are numbers, flags are flags.

pydantic's default (lax) mode turns ``seed: '7'`` into 7, ``seed: true`` into 1 and
``chunked_prefill: 'no'`` into False without a word. A scenario is refused instead. Its
data is validated as JSON in pydantic's strict mode (:func:`strict_json`), which holds
every model a scenario embeds (hardware, allocator, synthetic workload, arrivals) to
it: an integer field takes an integer, a float field a number, a flag ``true`` or
``false``; strings still name paths and arrays still fill tuples. The types below say
it once more on the scenario's own fields, with a message that says what was wrong:

* :data:`Count` -- an integer; never a string or a boolean.
* :data:`Number` -- an int or a float; never a string or a boolean.
* :data:`Flag` -- ``true`` or ``false`` only.

Parsed JSON or YAML whose shape is truly open (a sweep override's value, a scenario
mapping as its file wrote it, an OTLP document before it is read) is a
:data:`JsonValue`; a mapping of them a :data:`JsonObject`.

Bounds (``ge``, ``le``, ...) go on the field as usual: ``seed: Count = Field(0, ge=0)``.
Every number field has an upper bound, so an absurd value (``99999999999999999999``, past
64 bits) is refused at the field, with its value and the limit, before anything is
built; the common limits are named below (docs/errors-and-bounds.md lists them).
"""

from __future__ import annotations

import json
import numbers
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from pydantic import BaseModel, BeforeValidator, Strict

MAX_TOKENS = 1 << 40
"""A token count (a KV pool, a sequence length, a step's token budget): 1.1e12, far
above any GPU's pool and within 64 bits with room for sums."""
MAX_COUNT = 10**9
"""A count of things (requests kept from a trace)."""
MAX_SECONDS = 10**9
"""A span of simulated time, in seconds (about 31.7 years; ``traces.bounds.MAX_ARRIVAL_S``)."""
MAX_BYTES = 1 << 50
"""A memory term of one GPU, in bytes (1 PiB)."""
MAX_BYTES_PER_S = 10**15
"""A bandwidth, in bytes per second (1 PB/s)."""
MAX_SEED = 2**63 - 1
"""The largest seed (a signed 64-bit integer)."""

# JsonValue: a value of parsed JSON or YAML (``yaml_loader`` keeps dates as text); for the
# type checker the recursive union of JSON's types, which ``isinstance`` narrows.
# JsonObject: a mapping of them. At run time they are ``Any`` and ``dict[str, Any]``, so a
# pydantic model with such a field accepts what it accepted before (its schema checks).
if TYPE_CHECKING:
    JsonValue: TypeAlias = (
        dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None
    )
    JsonObject: TypeAlias = dict[str, JsonValue]
else:
    JsonValue = Any
    JsonObject = dict[str, Any]


def _no_text_or_flag(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    if isinstance(value, str | bytes):
        raise ValueError(
            "expected a number, not a string (a number is written in decimal, without "
            "quotes, underscores or a 0x/0o prefix)"
        )
    return value


Count = Annotated[int, BeforeValidator(_no_text_or_flag)]
Number = Annotated[float, BeforeValidator(_no_text_or_flag)]
Flag = Annotated[bool, Strict()]


def strict_json(data: object) -> str:
    """``data`` as JSON text for ``model_validate_json(..., strict=True)``: the values a
    user wrote (YAML's and JSON's types), and what an API caller may pass besides
    (numpy numbers, paths, sets, pydantic models) as their plain equivalents. Raises
    TypeError for a mapping key that is not a string or a number."""
    return json.dumps(data, default=_plain)


def _plain(value: object) -> JsonValue:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)  # a path, a date: as its text
