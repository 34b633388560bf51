"""Capacity planning: per policy variant, the fewest replicas that meet every SLO.

The replica count is ``fleet.pools.0.count``. With ``autoscale=False`` (the default)
``fleet.min_replicas`` and ``fleet.max_replicas`` are both set to it, so an autoscaler
in the scenario cannot move the fleet away from the count under test; with
``autoscale=True`` the count is the autoscaler's floor (``min_replicas``) and its ceiling
is raised to the count where it was below. A single-replica scenario becomes a one-pool
fleet (``fleet: {pools: [{count: N}]}``: the fleet's default router, the scenario's
``initial_uptime_s`` as the pool's); one with a single-replica ``restart`` is refused
(a fleet restarts with ``fleet.restart``).

Search (per variant, assuming more replicas never breaks an SLO that fewer met):
gallop from ``lo`` (``lo``, ``2 lo``, ``4 lo``... capped at ``hi``) to the first count
that meets every SLO, then bisect between it and the last that did not. It evaluates
at most ``2 ceil(log2 n*) + 2`` counts, the cheap small fleets first; every evaluated
count is cached (in memory, and on disk as run folders: a rerun of the same plan runs
nothing again). The variants' searches advance together, one round of runs at a time,
so the executor's workers run every variant's replications at once.

A point meets the SLOs when every replication does (:mod:`sim.sweep.slo`). The cost of
a variant is the mean over replications at its ``n*``; ``cost_vs_cheapest`` is its cost
over the cheapest variant's minus one (0.15: 15 % more fleet cost for the same SLOs).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import pandas as pd

from sim.fields import JsonObject, JsonValue
from sim.scenario.schema import ScenarioError
from sim.sweep.execute import Executor, Outcome, Progress
from sim.sweep.slo import Slo
from sim.sweep.spec import Task, point_tasks
from sim.sweep.summary import Cell, ci95, metrics, param_value, runs_frame

COUNT = "fleet.pools.0.count"
Search = Generator[int, bool, "int | None"]
Axes = Sequence[tuple[str, list[JsonValue]]]
"""The ``--vary`` options: each a dotted path and the values to try there, in order."""

MAX_PLAN_RUNS = 10_000
"""The most simulation runs a plan may need -- its variants x the replica counts its
search may evaluate for one (:func:`most_evaluated`) x the replications -- checked
before anything is validated or run (:func:`check_plan_size`). A sweep may run more
(``sim.sweep.spec.MAX_TASKS``); a plan's search is a question of a few variants."""


class PlanError(ValueError):
    """A plan's ``--vary`` axes or size that no search should start with; the message
    names the option."""


def replica_search(lo: int, hi: int) -> Search:
    """Yields the counts to evaluate; is sent whether each met the SLOs; returns the
    fewest that did (None when ``hi`` did not). Gallop, then bisect (module docstring)."""
    bad, probe = lo - 1, lo
    while not (yield probe):
        bad = probe
        if probe >= hi:
            return None
        probe = min(hi, probe * 2)
    good = probe
    while good - bad > 1:
        mid = (bad + good) // 2
        if (yield mid):
            good = mid
        else:
            bad = mid
    return good


def as_fleet(base: JsonObject, source: str) -> JsonObject:
    """``base`` as a fleet scenario (a single replica becomes a one-pool fleet)."""
    if base.get("fleet") is not None:
        return base
    if base.get("restart") is not None:
        raise ScenarioError(
            f"{source}: field restart: a single-replica restart; plan runs fleets, which "
            f"restart with fleet.restart (give the scenario a fleet block)"
        )
    data = {k: v for k, v in base.items() if k != "initial_uptime_s"}
    pool: JsonObject = {"count": 1}
    if base.get("initial_uptime_s"):
        pool["initial_uptime_s"] = base["initial_uptime_s"]
    data["fleet"] = {"pools": [pool]}
    return data


def count_overrides(base: JsonObject, n: int, autoscale: bool) -> JsonObject:
    """The overrides that give the fleet ``n`` replicas in pool 0."""
    if not autoscale:
        return {COUNT: n, "fleet.min_replicas": n, "fleet.max_replicas": n}
    out: JsonObject = {COUNT: n, "fleet.min_replicas": n}
    fleet = base["fleet"]  # a mapping: as_fleet made one, the schema validated it
    ceiling = fleet.get("max_replicas") if isinstance(fleet, dict) else None
    if isinstance(ceiling, int) and ceiling < n:
        out["fleet.max_replicas"] = n
    return out


def most_evaluated(lo: int, hi: int) -> int:
    """The most replica counts :func:`replica_search` tries for one variant, over every
    answer it may find in ``lo..hi`` or none."""
    most = 0
    for answer in range(lo, hi + 2):  # hi + 1: no count meets the SLOs
        search, tried = replica_search(lo, hi), 0
        try:
            probe = next(search)
            while True:
                tried += 1
                probe = search.send(probe >= answer)
        except StopIteration:
            most = max(most, tried)
    return most


def _keys(path: str) -> tuple[str, ...]:
    """A dotted path's keys, list indices as numbers write them (``pools.00`` is
    ``pools.0``)."""
    return tuple(str(int(k)) if k.isdigit() else k for k in path.strip().split("."))


def _value_key(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def check_axes(vary: Axes, *, autoscale: bool) -> None:
    """Refuse (PlanError) ``--vary`` axes a plan cannot search, before anything else:
    a path the plan sets itself (the replica count ``fleet.pools.0.count``,
    ``fleet.min_replicas``, and ``fleet.max_replicas`` without ``--autoscale``: the
    variant's value would be overwritten), a path given twice or inside another axis
    (``fleet.router`` with ``fleet.router.kind``: one would overwrite the other), and a
    value given twice in one axis (two variants that are one)."""
    owned = {_keys(COUNT): "the replica count under search", _keys("fleet.min_replicas"): ""}
    if not autoscale:
        owned[_keys("fleet.max_replicas")] = ""
    seen: list[tuple[tuple[str, ...], str]] = []
    for path, values in vary:
        keys = _keys(path)
        if keys in owned:
            what = owned[keys] or "set to the replica count under search"
            raise PlanError(
                f"--vary {path}: the plan sets it ({what}); --replicas gives the counts to "
                "search, --vary the policies to compare"
            )
        for other_keys, other in seen:
            if keys == other_keys:
                also = "" if other == path else f" (as {other})"
                raise PlanError(
                    f"--vary {path}: given twice{also}; give one --vary per path, with every "
                    "value (PATH=V1,V2,...)"
                )
            short, long = sorted((keys, other_keys), key=len)
            if long[: len(short)] == short:
                raise PlanError(
                    f"--vary {path}: overlaps --vary {other} (one lies inside the other, "
                    "whose value would overwrite it); vary one of them"
                )
        seen.append((keys, path))
        given: set[str] = set()
        for value in values:
            key = _value_key(value)
            if key in given:
                raise PlanError(f"--vary {path}: the value {key} is given twice")
            given.add(key)


def check_plan_size(vary: Axes, *, lo: int, hi: int, replications: int) -> int:
    """The most simulation runs the plan may need (variants x :func:`most_evaluated` x
    replications), counted without listing the variants; PlanError past
    :data:`MAX_PLAN_RUNS`."""
    count = math.prod(len(values) for _, values in vary)
    per_variant = most_evaluated(lo, hi)
    most = count * per_variant * replications
    if most > MAX_PLAN_RUNS:
        raise PlanError(
            f"--vary: {count:,} variants x up to {per_variant} replica counts in {lo}..{hi} "
            f"x {replications} replications make up to {most:,} runs; a plan runs at most "
            f"{MAX_PLAN_RUNS:,}: fewer --vary values, a narrower --replicas or fewer "
            "--replications"
        )
    return most


def variants(vary: Axes) -> list[JsonObject]:
    """The cartesian product of the ``--vary`` options (one empty variant without)."""
    paths = [p for p, _ in vary]
    return [dict(zip(paths, c, strict=True)) for c in itertools.product(*(v for _, v in vary))]


def check_plan(
    base: JsonObject,
    vary: Axes,
    *,
    lo: int,
    hi: int,
    autoscale: bool,
    source: str,
) -> JsonObject:
    """Validate every variant at the extreme counts ``lo`` and ``hi`` (ScenarioError
    naming the override and the field: a ``--vary`` path or value that is wrong), before
    anything is run or written; returns ``base`` as a fleet (:func:`as_fleet`)."""
    base = as_fleet(base, source)
    for variant in variants(vary):
        for n in sorted({lo, hi}):
            point_tasks(base, {**variant, **count_overrides(base, n, autoscale)}, 0, 1, source)
    return base


@dataclass(frozen=True)
class PlanResult:
    plan: pd.DataFrame
    """One row per variant: its parameters, ``meets_slos`` (False when even ``hi`` did
    not meet the SLOs), ``replicas`` (n*; missing then), ``evaluated``, cost and
    replica-hours means, each SLO metric's mean at n*, ``cost_vs_cheapest``,
    ``replica_hours_vs_least``."""
    points: pd.DataFrame
    """One row per evaluated (variant, count): ``met`` and each SLO metric's worst
    replication."""
    runs: pd.DataFrame
    outcomes: list[Outcome]


def plan(
    base: JsonObject,
    slos: Sequence[Slo],
    vary: Axes,
    executor: Executor,
    *,
    lo: int = 1,
    hi: int = 64,
    replications: int = 1,
    autoscale: bool = False,
    source: str = "<scenario>",
    progress: Progress | None = None,
) -> PlanResult:
    """Search each variant's fewest replicas in ``lo..hi`` meeting every SLO. Every
    variant's extreme counts are validated before anything runs (:func:`check_plan`)."""
    base = check_plan(base, vary, lo=lo, hi=hi, autoscale=autoscale, source=source)
    points = variants(vary)
    params = [p for p, _ in vary]
    searches = {i: replica_search(lo, hi) for i in range(len(points))}
    asked = {i: next(s) for i, s in searches.items()}
    cache: dict[tuple[int, int], tuple[bool, list[Outcome]]] = {}
    answers: dict[int, int | None] = {}
    order: list[tuple[int, int]] = []
    while asked:
        batch: dict[tuple[int, int], list[Task]] = {}
        for i, n in asked.items():
            if (i, n) not in cache:
                point = {**points[i], **count_overrides(base, n, autoscale)}
                index = len(order) + len(batch)
                batch[(i, n)] = point_tasks(base, point, index, replications, source)
        outcomes = executor.run([t for ts in batch.values() for t in ts], progress)
        by_id = {o.task.id: o for o in outcomes}
        for (i, n), tasks in batch.items():
            got = [by_id[t.id] for t in tasks]
            cache[(i, n)] = (_meets(got, slos), got)
            order.append((i, n))
        for i, n in list(asked.items()):
            try:
                asked[i] = searches[i].send(cache[(i, n)][0])
            except StopIteration as stop:
                answers[i] = stop.value
                del asked[i]
    all_outcomes = [o for key in order for o in cache[key][1]]
    runs = runs_frame(all_outcomes, [*params, COUNT])
    runs = runs.rename(columns={COUNT: "replicas"})
    evaluated = {i: sum(1 for j, _ in order if j == i) for i in range(len(points))}
    table = _plan_frame(points, params, answers, evaluated, cache, slos)
    return PlanResult(table, _points_frame(points, params, order, cache, slos), runs, all_outcomes)


def _meets(outcomes: list[Outcome], slos: Sequence[Slo]) -> bool:
    if any(o.summary is None for o in outcomes):
        return False  # a run that failed meets nothing
    values = [metrics(o.summary) for o in outcomes if o.summary is not None]
    return all(slo.met_by(v[slo.metric]) for slo in slos for v in values)


def _metric(outcomes: list[Outcome], column: str) -> list[float]:
    return [metrics(o.summary)[column] for o in outcomes if o.summary is not None]


def _plan_frame(
    points: list[JsonObject],
    params: list[str],
    answers: dict[int, int | None],
    evaluated: dict[int, int],
    cache: dict[tuple[int, int], tuple[bool, list[Outcome]]],
    slos: Sequence[Slo],
) -> pd.DataFrame:
    rows = []
    for i, variant in enumerate(points):
        n = answers[i]
        row: dict[str, Cell] = {p: param_value(variant[p]) for p in params}
        row["meets_slos"] = n is not None
        row["replicas"] = n
        row["evaluated"] = evaluated[i]
        got = cache[(i, n)][1] if n is not None else []
        for column in ("replica_hours", "cost_usd"):
            mean, low, high = ci95(pd.Series(_metric(got, column), dtype=float).to_numpy())
            row[f"{column}_mean"] = mean
            row[f"{column}_ci95_low"] = low
            row[f"{column}_ci95_high"] = high
        for slo in slos:
            values = _metric(got, slo.metric)
            row[f"{slo.metric}_mean"] = sum(values) / len(values) if values else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["replicas"] = frame["replicas"].astype("Int64")
    for column, name in (
        ("cost_usd_mean", "cost_vs_cheapest"),
        ("replica_hours_mean", "replica_hours_vs_least"),
    ):
        least = frame[column].min()
        frame[name] = frame[column] / least - 1 if least and least > 0 else math.nan
    return frame


def _points_frame(
    points: list[JsonObject],
    params: list[str],
    order: list[tuple[int, int]],
    cache: dict[tuple[int, int], tuple[bool, list[Outcome]]],
    slos: Sequence[Slo],
) -> pd.DataFrame:
    rows = []
    for i, n in order:
        met, got = cache[(i, n)]
        row: dict[str, Cell] = {p: param_value(points[i][p]) for p in params}
        row.update({"replicas": n, "met": met, "runs": len(got)})
        row["failed_runs"] = sum(o.summary is None for o in got)
        for slo in slos:
            values = _metric(got, slo.metric)
            worst = max if slo.op in ("<=", "<") else min
            row[f"{slo.metric}_worst"] = worst(values) if values else math.nan
        rows.append(row)
    return pd.DataFrame(rows)
