"""Assertions shared by the hostile-input tests: a refusal is ``error:`` lines only (one
line where the test says so), with the given exit status and no traceback; a summary is
strict JSON (no NaN, no infinity); a hostile value is put at a path of a scenario mapping.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from typer.testing import Result


def put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set ``data[path[0]]...[path[-1]] = value``, replacing whatever on the way is not a
    mapping by an empty one."""
    node: Any = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def error_lines(
    lines: list[str], starts: str | tuple[str, ...], *, aside: tuple[str, ...] = ()
) -> list[str]:
    """The lines of an error message, asserting there is at least one and each starts
    with ``starts`` (lines starting with ``aside`` are left out first)."""
    said = [line for line in lines if line.strip() and not (aside and line.startswith(aside))]
    assert said, lines
    assert all(line.startswith(starts) for line in said), said
    return said


def refusal_lines(
    result: Result, starts: str, *, code: int = 2, aside: tuple[str, ...] = ()
) -> list[str]:
    """The ``error:`` lines of a CLI refusal: exit ``code``, no traceback, and every
    stderr line (``aside`` left out) starting with ``error: {starts}``."""
    assert result.exit_code == code, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return error_lines(result.stderr.splitlines(), f"error: {starts}", aside=aside)


def refused(result: Result, starts: str, *, code: int = 2) -> str:
    """The one ``error:`` line of a CLI refusal (asserting there is exactly one, and no
    traceback)."""
    lines = refusal_lines(result, starts, code=code)
    assert len(lines) == 1, lines
    return lines[0]


def strict_json(text: str, where: object) -> Any:
    """``text`` parsed as JSON, failing on NaN or an infinity (``where`` names it)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{where}: {constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def special_file(path: Path, kind: str) -> None:
    """Put at ``path`` what is not a regular file: ``fifo``, ``socket`` (bound, then left
    behind), ``dangling`` (a symlink to nothing), ``loop`` (a symlink to itself),
    ``device`` (a symlink to /dev/null) or ``directory``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    elif kind == "dangling":
        path.symlink_to(path.parent / "missing-target")
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "device":
        path.symlink_to("/dev/null")
    elif kind == "directory":
        path.mkdir()
    else:
        raise ValueError(f"unknown kind {kind!r}")
