"""Field types for configs a user writes: numbers are numbers, flags are flags.

pydantic's default (lax) mode turns ``seed: '7'`` into 7, ``seed: true`` into 1 and
``chunked_prefill: 'no'`` into False without a word. A scenario is refused instead:

* :data:`Count` -- a whole number: an int, or a float with no fractional part (``1e6``);
  never a string or a boolean.
* :data:`Number` -- a float: an int or a float; never a string or a boolean.
* :data:`Flag` -- ``true`` or ``false`` only.

Bounds (``ge``, ``le``, ...) go on the field as usual: ``seed: Count = Field(0, ge=0)``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Strict


def _no_text_or_flag(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    if isinstance(value, str | bytes):
        raise ValueError("expected a number, not a string (write it without quotes)")
    return value


Count = Annotated[int, BeforeValidator(_no_text_or_flag)]
Number = Annotated[float, BeforeValidator(_no_text_or_flag)]
Flag = Annotated[bool, Strict()]
