"""Which field names a model takes at a point of a pydantic error's ``loc`` -- for a
misspelled key's "did you mean ...?", as a misspelled command gets.

:func:`fields_at` walks a model's annotations along ``loc`` (the error's path, whose
last step is the key that was refused): a model's field, a list's or tuple's index, a
dict's value, and the union members pydantic names in a ``loc`` (a discriminated
union's tag, ``arrival.poisson.rate_per_s``; a plain union's member class name). It
needs no pydantic import: a model is anything with ``model_fields``, so the command line
imports this module without pydantic.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

MAX_LISTED = 12
"""The most field names a message lists when no name is close to the one written."""


def _leaves(t: object) -> list[object]:
    """``t`` with ``Annotated``, ``Optional`` and unions unwrapped: its alternatives."""
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _leaves(typing.get_args(t)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [leaf for arg in typing.get_args(t) for leaf in _leaves(arg)]
    return [t]


def _fields(model: object) -> dict[str, FieldInfo]:
    """The model's fields by the names a user writes (aliases where set)."""
    fields = getattr(model, "model_fields", None)
    if not isinstance(fields, dict):
        return {}
    return {(f.alias or name): f for name, f in fields.items()}


def _tags(model: object) -> set[str]:
    """What pydantic may put in a ``loc`` for ``model`` as a union member: its class name
    and the values its ``kind`` field takes (a discriminated union's tag)."""
    tags = {getattr(model, "__name__", "")}
    kind = _fields(model).get("kind")
    if kind is not None:
        tags |= {a for a in typing.get_args(kind.annotation) if isinstance(a, str)}
        if isinstance(kind.default, str):
            tags.add(kind.default)
    return tags


def _kinds(model: object, data: object) -> list[object]:
    """``model``, or where ``data`` names a ``kind`` that a subclass of ``model`` takes
    (a policy block parsed by its registry: ``RouterConfig`` -> ``LengthPoolsConfig``),
    that subclass."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str) or not isinstance(model, type) or kind in _tags(model):
        return [model]
    stack: list[type] = list(model.__subclasses__())
    seen: set[type] = set()
    while stack:
        sub = stack.pop()
        if sub in seen:
            continue
        seen.add(sub)
        if kind in _tags(sub):
            return [sub]
        stack.extend(sub.__subclasses__())
    return [model]


def _step(candidates: Iterable[object], step: object, data: object) -> list[object]:
    """The types ``step`` leads to from ``candidates`` (a tag keeps the members it names)."""
    leaves = [k for c in candidates for leaf in _leaves(c) for k in _kinds(leaf, data)]
    inner: list[object] = []
    for leaf in leaves:
        field = _fields(leaf).get(step) if isinstance(step, str) else None
        if field is not None:
            inner.append(field.annotation)
            continue
        origin, args = typing.get_origin(leaf), typing.get_args(leaf)
        if isinstance(step, int) and origin in (list, tuple, set, frozenset, Sequence):
            inner.extend(a for a in args if a is not Ellipsis)
        elif origin is dict and len(args) == 2:
            inner.append(args[1])
    if inner:
        return inner
    if isinstance(step, str):  # a union member's tag, not a key
        tagged = [leaf for leaf in leaves if step in _tags(leaf)]
        return tagged or leaves
    return []


def fields_at(model: object, loc: Sequence[object], data: object = None) -> list[str]:
    """The field names the mapping at ``loc[:-1]`` of ``model`` takes (``loc[-1]`` is the
    key refused); empty when the walk leaves the models (a plain ``dict`` field).
    ``data`` (what was validated) picks a policy block's class by its ``kind``."""
    candidates: list[object] = [model]
    for step in loc[:-1]:
        candidates = _step(candidates, step, data)
        if isinstance(data, dict):  # a union's tag is not in the data: stay put
            data = data.get(step, data)
        elif isinstance(data, list | tuple) and isinstance(step, int) and step < len(data):
            data = data[step]
    names: list[str] = []
    for model_there in (k for c in candidates for leaf in _leaves(c) for k in _kinds(leaf, data)):
        names += [n for n in _fields(model_there) if n not in names]
    return names


def unknown_field(written: str, names: Sequence[str]) -> str:
    """The message for a key no field takes: ``unknown field; did you mean NAME?`` when a
    name is close (``difflib``, as click suggests commands), else the names allowed."""
    close = difflib.get_close_matches(written, names, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    if not names:
        return "unknown field"
    listed = ", ".join(sorted(names)[:MAX_LISTED])
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return f"unknown field; expected one of {listed}{more}"
