"""Scenario overrides by dotted field path: ``allocator.kind``, ``fleet.pools.0.count``,
``workload.synth.arrival.rate_per_s``, ``fleet.router`` (a whole mapping).

An override writes one value into a copy of the base scenario's mapping (what its file
wrote, paths rebased, nothing filled in by defaults), then the merged mapping is
validated by :func:`sim.scenario.schema.parse_scenario` like any scenario file. The
rules, in order of the path's keys:

* a key of a mapping that is absent is created as an empty mapping on the way down
  (``fleet.router.kind`` on a scenario without ``fleet.router``), so the schema says
  what is missing rather than this module;
* a key into a list is an index that must exist (``fleet.pools.1`` on a one-pool fleet
  is an error naming the list's length);
* a value written at ``...kind`` that names another kind than the block has replaces the
  block with ``{kind: NEW}``: the old kind's fields would not fit the new one (a
  ``best_fit`` allocator's ``growth_factor`` is no ``paged`` field). Give the new kind's
  fields as further overrides, or override the block whole (``allocator: {kind: ...}``);
* a mapping value replaces what was there whole (no merge).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping

from sim.errors import short
from sim.fields import JsonObject, JsonValue
from sim.scenario.schema import Scenario, ScenarioError, parse_scenario


class OverrideError(ValueError):
    """An override whose path does not lead anywhere in the scenario mapping."""


def set_path(data: JsonObject, path: str, value: JsonValue) -> None:
    """Write ``value`` at the dotted ``path`` of ``data`` (in place; rules above)."""
    keys = path.split(".")
    if not path or any(not k for k in keys):
        raise OverrideError(f"{path!r} is not a dotted field path (a.b.c)")
    node: JsonValue = data
    for depth, key in enumerate(keys):
        where = ".".join(keys[: depth + 1])
        last = depth == len(keys) - 1
        if isinstance(node, dict):
            if last:
                if key == "kind" and node.get("kind", value) != value:
                    node.clear()
                node[key] = copy.deepcopy(value)
                return
            if key not in node or node[key] is None:
                if keys[depth + 1].isdigit():
                    raise OverrideError(
                        f"{where}: the scenario has no list here; override it whole "
                        f"({where}: [...]) or give the base scenario one"
                    )
                node[key] = {}
            node = node[key]
        elif isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise OverrideError(
                    f"{where}: {'.'.join(keys[:depth]) or 'the scenario'} is a list of "
                    f"{len(node)}; expected an index 0..{len(node) - 1}"
                )
            if last:
                node[int(key)] = copy.deepcopy(value)
                return
            node = node[int(key)]
        else:
            parent = ".".join(keys[:depth])
            raise OverrideError(f"{where}: {parent} is {short(node)}, not a mapping or list")


def apply_overrides(
    base: Mapping[str, JsonValue], overrides: Mapping[str, JsonValue]
) -> JsonObject:
    """A deep copy of ``base`` with every override written in, in the order given."""
    data = copy.deepcopy(dict(base))
    for path, value in overrides.items():
        set_path(data, path, value)
    return data


def describe(overrides: Mapping[str, JsonValue]) -> str:
    """``allocator.kind=paged, fleet.pools.0.count=4`` (``base`` when empty)."""
    if not overrides:
        return "base"
    return ", ".join(f"{k}={_text(v)}" for k, v in overrides.items())


def _text(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def build_scenario(
    base: Mapping[str, JsonValue], overrides: Mapping[str, JsonValue], source: str
) -> Scenario:
    """The scenario ``base`` + ``overrides`` names, validated; a ScenarioError whose
    lines each read ``SOURCE: override PATH=VALUE: field F: ...`` (every override of
    the point when the field is not one of them)."""
    data = copy.deepcopy(dict(base))
    for path, value in overrides.items():
        try:
            set_path(data, path, value)
        except OverrideError as e:
            raise ScenarioError(
                f"{source}: override {describe({path: value})}: field {e}"
            ) from None
    try:
        return parse_scenario(data, source=_MARK)
    except ScenarioError as e:
        lines = [line.removeprefix(f"{_MARK}: ") for line in str(e).splitlines()]
        raise ScenarioError(
            "\n".join(f"{_culprit(source, overrides, line)}: {line}" for line in lines)
        ) from None


_MARK = "<sweep-override>"


def _culprit(source: str, overrides: Mapping[str, JsonValue], line: str) -> str:
    """The override(s) a message line is about: those whose path the field starts with
    (or that start with the field); all of the point's when none does."""
    field = line.removeprefix("field ").split(":", 1)[0] if line.startswith("field ") else ""
    hits = {
        k: v
        for k, v in overrides.items()
        if field and (field == k or field.startswith(k + ".") or k.startswith(field + "."))
    }
    return f"{source}: override {describe(hits or overrides)}"
