"""``run(scenario, requests) -> RunResult``: every way into a run goes through here
(``sim.run``, ``fragsim run`` / ``compare`` / ``postmortem`` / ``sweep`` / ``plan``).

1. What the run will cost is checked (``sim.scenario.cost``) and what it builds is built
   (``sim.simulate.parts``: one set of parts per pool, one pool for a single replica) -- every
   error before anything is simulated.
2. One loop simulates it (``sim.simulate.driver.simulate``) with its traffic: a single replica
   fed the trace (``sim.simulate.driver.SingleReplica``), or the fleet (``sim.fleet.fleet``).
3. One place assembles the outputs and the summary (``sim.outputs``).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pandas as pd
import simpy

from policies.routing.base import Router
from sim.engine.recorder import Recorder
from sim.fleet.fleet import Fleet, NodeAction
from sim.outputs import fleet_result, single_result
from sim.results.io import RunResult
from sim.scenario.cost import check_run_cost, within_duration
from sim.scenario.schema import Scenario, ScenarioWarning
from sim.scenario.workload import load_workload
from sim.simulate.columns import group_columns, sessions_of
from sim.simulate.driver import SingleReplica, Traffic, simulate
from sim.simulate.outlet import RunOutlet
from sim.simulate.parts import Parts, run_parts
from sim.simulate.records import Records


def run(
    scenario: Scenario,
    requests: pd.DataFrame | None = None,
    *,
    progress: Callable[[float, float], None] | None = None,
    parts: Sequence[Parts] | None = None,
    router: Router | None = None,
    script: Sequence[NodeAction] = (),
) -> RunResult:
    """Simulate ``requests`` (canonical trace frame, sorted by arrival; by default the
    scenario's own workload, ``load_workload(scenario)``) under ``scenario``.

    ``progress(now_s, end_s)`` is called every 1 % of simulated time when given;
    ``parts`` (from :func:`sim.simulate.parts.run_parts`) skips building them again. A fleet's
    ``router`` replaces the scenario's (a postmortem replays recorded routes) and
    ``script`` lists node actions applied at their times besides the policies' (a
    postmortem's recorded restarts, crashes and scale events). A run that would cost
    more than the bounds of :mod:`sim.scenario.bounds` raises ScenarioError, before
    simulating (:func:`sim.scenario.cost.check_run_cost`) or as soon as the run passes one."""
    if requests is None:
        requests = load_workload(scenario)
    check_run_cost(scenario, requests)
    note = scenario.retention.warning(requests)
    if note is not None:
        warnings.warn(note, ScenarioWarning, stacklevel=2)
    if (router is not None or script) and scenario.fleet is None:
        raise ValueError("a router or a script replaces a fleet's: the scenario has none")
    if router is not None and scenario.fleet is not None and scenario.fleet.disaggregated:
        raise ValueError("a disaggregated fleet's router (pd) places its hand-offs: not replaced")
    built = list(parts) if parts is not None else run_parts(scenario, requests)
    requests, beyond = within_duration(scenario, requests)
    with _gc_paused():
        return _simulate(scenario, requests, built, beyond, progress, router, script)


def _simulate(
    scenario: Scenario,
    requests: pd.DataFrame,
    parts: list[Parts],
    beyond_duration: int,
    progress: Callable[[float, float], None] | None,
    router: Router | None,
    script: Sequence[NodeAction],
) -> RunResult:
    env = simpy.Environment()
    recorder = Recorder()
    records = Records(len(requests))
    columns = group_columns(requests, scenario.retention, scenario.seed)
    traffic: Traffic
    if scenario.fleet is None:
        traffic = SingleReplica(env, scenario, parts[0], columns, RunOutlet(recorder, records))
    else:
        fleet = Fleet(
            env,
            scenario.fleet,
            parts,
            columns,
            sessions_of(requests),
            recorder,
            records,
            seed=scenario.seed,
            exact=scenario.mode == "exact",
            retry=scenario.scheduler.client_retry(),
            high_free_share=scenario.metrics.high_free_share,
        )
        if router is not None:
            fleet.router = router
        fleet.script = sorted(script, key=lambda a: a.time_s)
        traffic = fleet
    last_arrival_s = float(columns.arrivals_s[-1]) if len(columns) else 0.0
    done = simulate(
        env,
        scenario,
        traffic,
        recorder,
        records,
        last_arrival_s,
        progress=progress,
        beyond_duration=beyond_duration,
    )
    if scenario.fleet is None:
        result = single_result(scenario, done, parts[0], beyond_duration)
    else:
        result = fleet_result(scenario, done, parts, beyond_duration, router)
    done.release()
    return result


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while simulating. The run allocates a Group and a
    few small objects per request that all stay alive until it ends (no cycles become
    garbage before that), so collections would only rescan them: 15-20 % of the run's
    wall time on long traces. The run breaks its own reference cycles when it ends
    (``Simulated.release``), so reference counting frees its objects and the first
    collection after re-enabling has nearly nothing to scan. The previous state is
    restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
