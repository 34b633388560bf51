"""User-facing error text shared by the CLI commands and the scenario loader."""

from __future__ import annotations

from pydantic import ValidationError


def short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_lines(
    source: str, exc: ValidationError, data: object, prefix: str = ""
) -> list[str]:
    """One ``SOURCE: field a.b: got VALUE: message`` line per pydantic error
    (``prefix`` names where ``data`` sits in a larger file, e.g. ``workload.synth``).

    The dotted path follows the user's input (``arrival.rate_per_s``): the union tags
    pydantic inserts (``arrival.poisson.rate_per_s``) are dropped when the input at that
    point is a mapping whose ``kind`` is the tag. No pydantic URL is printed.
    """
    lines = []
    for e in exc.errors(include_url=False):
        path: list[str] = []
        node: object = data
        for step in e["loc"]:
            if isinstance(node, dict) and step in node:  # noqa: SIM114 (mypy: index types)
                node = node[step]
            elif isinstance(node, list | tuple) and isinstance(step, int) and step < len(node):
                node = node[step]
            elif isinstance(node, dict) and node.get("kind") == step:
                continue  # a discriminated union's tag, not a key the user wrote
            else:
                node = None
            path.append(str(step))
        msg = str(e["msg"]).removeprefix("Value error, ")
        if prefix:
            path.insert(0, prefix)
        parts = [source, f"field {'.'.join(path)}" if path else "spec"]
        if e["type"] != "missing" and path:
            parts.append(f"got {short(e.get('input'))}")
        parts.append(msg[:1].lower() + msg[1:])
        lines.append(": ".join(parts))
    return lines
