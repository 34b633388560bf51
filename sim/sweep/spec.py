"""Sweep files and the tasks they expand to.

A sweep file::

    base: seed-bimodal-paged        # a built-in name, a path (relative to this file),
                                    # or an inline scenario mapping
    grid:                           # cartesian product, in the order written
      allocator.kind: [paged, best_fit]
      workload.rate_scale: [0.5, 1.0]
    list:                           # and/or explicit points (each x every grid point)
      - {scheduler.max_num_seqs: 64}
      - {scheduler.max_num_seqs: 256}
    replications: 3                 # seeds base.seed + 0, 1, 2

Replication ``i`` of a point runs with ``seed = S + i`` where ``S`` is the point's seed
(the base scenario's, or a ``seed`` override's). Every point and replication is built
and validated (:func:`sim.sweep.overrides.build_scenario`) before anything runs.

A task's id is ``SLUG.rI.HASH``: a readable slug of the point's override values, the
replication, and the first 10 hex digits of the SHA-256 of the scenario's canonical JSON
(:func:`scenario_key`), so the same scenario gets the same id whatever the grid around
it, and a changed scenario never reuses a stale run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import clip, validation_lines
from sim.fields import JsonObject, JsonValue
from sim.scenario.builtin import resolve_scenario
from sim.scenario.schema import Scenario, ScenarioError, _rebase_paths, load_scenario
from sim.scenario.yaml_loader import load_yaml, yaml_error_line
from sim.sweep.overrides import build_scenario, describe

MAX_SWEEP_BYTES = 1 << 20
MAX_TASKS = 100_000
"""Scenarios one sweep may expand to (points x replications)."""


class SweepFile(BaseModel):
    """The fields of a sweep file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str | JsonObject = Field(
        description="The base scenario: a built-in name, a path relative to the sweep "
        "file, or an inline scenario mapping."
    )
    grid: dict[str, list[JsonValue]] = Field(
        default_factory=dict, description="Dotted field path -> values (cartesian product)."
    )
    list_: list[JsonObject] = Field(
        default_factory=list, alias="list", description="Explicit override points."
    )
    replications: int = Field(1, ge=1, le=1000, description="Seeds per point.")


@dataclass(frozen=True)
class Task:
    """One scenario to run: a point of the sweep and one replication of it."""

    id: str
    point: int
    replication: int
    params: JsonObject = field(hash=False)
    scenario: Scenario = field(hash=False)
    key: str
    """SHA-256 of the scenario's canonical JSON (written as the run's sweep key)."""


@dataclass(frozen=True)
class Sweep:
    source: str
    params: list[str]
    """The override paths, in column order."""
    tasks: list[Task]


def load_base(base: str | JsonObject, folder: Path, source: str) -> JsonObject:
    """The base scenario as a mapping: what its file wrote (paths rebased), not filled
    in with defaults, so an override of a block's ``kind`` sees only written fields."""
    if isinstance(base, dict):
        data = json.loads(json.dumps(base))
        _rebase_paths(data, folder)
        scenario = build_scenario(data, {}, source)
    else:
        path = folder / base
        scenario = load_scenario(path if path.exists() else resolve_scenario(base))
    return scenario.model_dump(mode="json", exclude_unset=True)


def scenario_key(scenario: Scenario) -> str:
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def slug(params: JsonObject) -> str:
    """A file-name-safe slug of the override values (``paged_4``), at most 48 chars."""
    parts = []
    for path, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        parts.append(f"{path.rsplit('.', 1)[-1]}-{text}")
    text = re.sub(r"[^A-Za-z0-9.\-]+", "_", "_".join(parts)).strip("_.")
    return text[:48].rstrip("_.") or "base"


def expand(
    base: JsonObject,
    points: list[JsonObject],
    replications: int,
    source: str,
) -> Sweep:
    """Every point x replication as a validated Task (ScenarioError on the first bad
    point, naming the source, the override and the field)."""
    if len(points) * replications > MAX_TASKS:
        raise ScenarioError(
            f"{source}: {len(points):,} points x {replications} replications; a sweep "
            f"runs at most {MAX_TASKS:,} scenarios"
        )
    params: list[str] = []
    for point in points:
        params.extend(k for k in point if k not in params)
    tasks: list[Task] = []
    for index, point in enumerate(points):
        tasks.extend(point_tasks(base, point, index, replications, source))
    return Sweep(source, params, tasks)


def point_tasks(
    base: JsonObject, point: JsonObject, index: int, replications: int, source: str
) -> list[Task]:
    """The replications of one point, validated (seeds: the point's seed + 0, 1, ...)."""
    scenario = build_scenario(base, point, source)
    tasks = []
    for rep in range(replications):
        s = scenario
        if rep:
            s = build_scenario(base, {**point, "seed": scenario.seed + rep}, source)
        key = scenario_key(s)
        tasks.append(Task(f"{slug(point)}.r{rep}.{key[:10]}", index, rep, dict(point), s, key))
    return tasks


def grid_points(grid: dict[str, list[JsonValue]], listed: list[JsonObject]) -> list[JsonObject]:
    """Each listed point (or one empty point) x the grid's cartesian product."""
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    out = []
    for item in listed or [{}]:
        for combo in combos:
            both = set(item) & set(combo)
            if both:
                raise ScenarioError(f"list and grid both set {', '.join(sorted(both))}")
            out.append({**item, **combo})
    return out


def load_sweep(path: str | Path) -> Sweep:
    """Read a sweep file, expand and validate every scenario it names."""
    path = Path(path)
    source = clip(str(path))
    try:
        if path.stat().st_size > MAX_SWEEP_BYTES:
            raise ScenarioError(f"{source}: a sweep file is at most {MAX_SWEEP_BYTES:,} bytes")
        text = path.read_text(encoding="utf-8")
        data = load_yaml(text)
    except FileNotFoundError:
        raise ScenarioError(f"{source}: cannot read: no such file") from None
    except OSError as e:
        raise ScenarioError(f"{source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{source}: not UTF-8 text (byte offset {e.start})") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: {yaml_error_line(e, text)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping (base, grid, list, replications)")
    try:
        spec = SweepFile.model_validate(data)
    except ValidationError as e:
        raise ScenarioError("\n".join(validation_lines(source, e, data, model=SweepFile))) from None
    for name, values in spec.grid.items():
        if not values:
            raise ScenarioError(f"{source}: field grid.{name}: an empty list of values")
    folder = path.resolve().parent
    base = load_base(spec.base, folder, source)
    try:
        points = grid_points(spec.grid, spec.list_)
    except ScenarioError as e:
        raise ScenarioError(f"{source}: {e}") from None
    return expand(base, points, spec.replications, source)


__all__ = [
    "Sweep",
    "Task",
    "describe",
    "expand",
    "grid_points",
    "load_base",
    "load_sweep",
    "point_tasks",
]
