"""User-facing error text shared by the CLI commands and the scenario loader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sim.field_names import fields_at, unknown_field

if TYPE_CHECKING:  # an annotation only: the command line starts without pydantic
    from pydantic import ValidationError

MAX_MESSAGE = 500
"""The longest message a validation error line carries (the value quoted aside)."""


def short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (``...`` marks a cut). The work is
    bounded by ``limit``, not by the value: containers are walked lazily, so a value that
    expands to billions of elements (a YAML alias bomb) costs what its prefix costs."""
    text = ""
    for chunk in _repr_chunks(value):
        text += chunk
        if len(text) > limit:
            return text[: limit - 3] + "..."
    return text


def _repr_chunks(value: object) -> Iterator[str]:
    """``repr(value)`` in pieces, containers depth first (their concatenation equals
    ``repr`` for builtin containers of scalars; a string longer than 4,096 characters is
    cut before quoting)."""
    if isinstance(value, str) and len(value) > 4096:
        yield repr(value[:4096])
    elif isinstance(value, dict) and type(value).__repr__ is dict.__repr__:
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _repr_chunks(k)
            yield ": "
            yield from _repr_chunks(v)
        yield "}"
    elif isinstance(value, list | tuple) and type(value) in (list, tuple):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        yield opening
        for i, v in enumerate(value):
            yield ", " if i else ""
            yield from _repr_chunks(v)
        yield "," + closing if isinstance(value, tuple) and len(value) == 1 else closing
    else:
        yield repr(value)


def clip(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, keeping its start and end (for paths and
    messages that quote user input)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}...{text[-(limit - head - 3) :]}"


def os_error_line(exc: OSError, what: str = "") -> str:
    """``FILE: WHAT: STRERROR`` for an error the file system gave (a name too long, a
    folder that may not be searched, a full disk)."""
    parts = [clip(str(exc.filename))] if exc.filename else []
    if what:
        parts.append(what)
    parts.append(exc.strerror or clip(str(exc)))
    return ": ".join(parts)


def validation_lines(
    source: str, exc: ValidationError, data: object, prefix: str = "", model: object = None
) -> list[str]:
    """One ``SOURCE: field a.b: got VALUE: message`` line per pydantic error
    (``prefix`` names where ``data`` sits in a larger file, e.g. ``workload.synth``).
    A key no field takes reads ``SOURCE: field a.b: unknown field; did you mean NAME?``
    (the names ``model``, the type ``data`` was validated as, takes there; difflib's
    nearest, else the names allowed). Where ``data``'s mappings remember their keys'
    lines (a YAML file loaded ``located``), the line ends ``(line N)``: the line of the
    deepest key of the path the file holds.

    The dotted path follows the user's input (``arrival.rate_per_s``): the union tags
    pydantic inserts (``arrival.poisson.rate_per_s``, ``gpu.inline.memory_bytes``) are
    dropped when the input at that point is a mapping whose ``kind`` is the tag, or that
    holds the key after it. The value quoted is the one ``data`` holds at that path when
    it holds one (a YAML loader's numbers quote themselves as the file wrote them: ``got
    1e9``), else pydantic's input. No pydantic URL is printed.
    """
    lines = []
    for e in exc.errors(include_url=False):
        path: list[str] = []
        node: object = data
        found = True
        line: int | None = None
        loc = e["loc"]
        for i, step in enumerate(loc):
            if isinstance(node, dict) and step in node:
                line = getattr(node, "key_lines", {}).get(step, line)
                node = node[step]
            elif isinstance(node, list | tuple) and isinstance(step, int) and step < len(node):
                node = node[step]
            elif isinstance(node, dict) and (
                node.get("kind") == step or (i + 1 < len(loc) and loc[i + 1] in node)
            ):
                continue  # a union's tag (``roofline``, ``inline``), not a key the user wrote
            else:
                node, found = None, False
            path.append(str(step))
        msg = str(e["msg"]).removeprefix("Value error, ")  # one line, bounded:
        msg = clip(
            "; ".join(" ".join(part.split()) for part in msg.splitlines() if part.strip()),
            MAX_MESSAGE,
        )
        if e["type"] == "extra_forbidden" and loc:
            msg = unknown_field(str(loc[-1]), fields_at(model, loc, data) if model else [])
        if prefix:
            path.insert(0, prefix)
        parts = [source, f"field {'.'.join(path)}" if path else "spec"]
        if e["type"] not in ("missing", "extra_forbidden") and path:
            parts.append(f"got {short(node if found else e.get('input'))}")
        parts.append(msg[:1].lower() + msg[1:])
        lines.append(": ".join(parts) + (f" (line {line})" if line is not None else ""))
    return lines
