"""The one loop that simulates a run, a single replica or a fleet.

A run is *traffic* -- who hands the replicas their requests and changes their lives --
over one SimPy environment, one recorder (timeseries, events) and one set of request
records, sampled on one grid and stopped by one rule:

* :class:`SingleReplica`: one replica fed the trace itself (no router, no SimPy event per
  arrival in fast mode), its clients retrying on it, and the scenario's scheduled
  restart (``restart:``) if any.
* ``sim.fleet.fleet.Fleet``: the fleet's arrival process routing every request, node
  lifecycles, client retries re-routed or pinned, restart policies and autoscalers.

Both give their replicas outlets (``sim.engine.outlet``) built on ``RunOutlet``
(``sim.simulate.outlet``, compiled): events and restarts to the recorder, ended
requests to the records. :func:`simulate`
starts the traffic's processes, a metric sampler (every ``sample_interval_s``: each
replica the traffic samples, then the traffic's own row) and an optional progress
reporter, and runs until every request has ended (at the last finish, which a replica's
clock may reach ahead of the environment's) or ``duration_s``; then takes the final
samples and closes the records. Outputs and the summary are assembled in
``sim.outputs``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from sim.engine.recorder import Recorder
from sim.engine.replica import Replica
from sim.engine.simpy_adapter import drop_pending
from sim.latency.base import OutOfRange
from sim.scenario import bounds
from sim.scenario.schema import RestartOptions, Scenario
from sim.simulate.columns import GroupColumns
from sim.simulate.outlet import RunOutlet
from sim.simulate.parts import Parts
from sim.simulate.records import Records

Process = Generator[simpy.Event, Any, None]


class Traffic(Protocol):
    """What the loop asks of a run's traffic."""

    def processes(self, sampler: Process) -> list[Process]:
        """The SimPy processes that drive it, with the run's ``sampler`` in its place:
        they start in this order, which decides the order of their events at one
        instant (the outputs' order)."""
        ...

    def sampled(self) -> Iterable[Replica]:
        """The replicas a sample records now, in order."""
        ...

    def after_sample(self, trigger: str) -> None:
        """Called after each sample of the replicas (a fleet records its own row)."""
        ...

    def replicas(self) -> list[Replica]:
        """Every replica the run made (for its counters, and to close them)."""
        ...


class SingleReplica:
    """One replica fed the whole trace, with the scenario's scheduled restart."""

    def __init__(
        self,
        env: simpy.Environment,
        scenario: Scenario,
        part: Parts,
        columns: GroupColumns,
        outlet: RunOutlet,
    ) -> None:
        self.env = env
        self.restart = scenario.restart
        self.out_of_range = OutOfRange.for_model(part.latency)
        allocator, spec = part.allocator, part.spec
        self.replica = Replica(
            env,
            0,
            part.scheduler,
            lambda: allocator.build(spec),
            part.latency,
            outlet=outlet,
            exact=scenario.mode == "exact",
            initial_uptime_s=scenario.initial_uptime_s,
            out_of_range=self.out_of_range,
        )
        groups = columns.groups(0, len(columns))
        outlet.records.keep_all(groups)  # the feed holds them all run
        self.replica.feed(groups)

    def processes(self, sampler: Process) -> list[Process]:
        if self.restart is None:
            return [sampler]
        return [sampler, _scheduled_restarts(self.env, self.replica, self.restart)]

    def sampled(self) -> Iterable[Replica]:
        return (self.replica,)

    def after_sample(self, trigger: str) -> None:
        pass

    def replicas(self) -> list[Replica]:
        return [self.replica]


def _scheduled_restarts(
    env: simpy.Environment, replica: Replica, restart: RestartOptions
) -> Process:
    """Restart the replica each time its uptime reaches ``every_s`` (bounded)."""
    for _ in range(bounds.MAX_RESTARTS):
        yield env.timeout(max(0.0, restart.every_s - replica.uptime_s))
        yield replica.request_restart(restart.mode, restart.downtime_s)
    yield env.timeout(max(0.0, restart.every_s - replica.uptime_s))
    raise bounds.restarts_exceeded(env.now)


@dataclass
class Simulated:
    """A simulated run, before its outputs are assembled (``sim.outputs``)."""

    env: simpy.Environment
    recorder: Recorder
    records: Records
    traffic: Any
    """The :class:`Traffic` (a :class:`SingleReplica` or a ``Fleet``)."""
    processes: list[Process]

    @property
    def end_s(self) -> float:
        return float(self.env.now)

    def engine_counters(self) -> tuple[int, int]:
        """(steps, wake-ups) of every replica the run made."""
        replicas = self.traffic.replicas()
        return sum(r.steps_total for r in replicas), sum(r.wakeups_total for r in replicas)

    def release(self) -> None:
        """Break the reference cycles a finished run leaves -- the environment's pending
        events hold processes whose suspended generators hold the environment, replicas
        and their schedulers' callbacks and outlets hold each other -- so reference
        counting frees the run's objects (every request's record included) as soon as
        the caller drops them. Cyclic collection is paused during a run (``sim.runner``);
        without this they would wait for a full collection."""
        for replica in self.traffic.replicas():
            replica.close()
        for process in self.processes:
            process.close()
        self.records.on_all_ended = None
        drop_pending(self.env)


def simulate(
    env: simpy.Environment,
    scenario: Scenario,
    traffic: Traffic,
    recorder: Recorder,
    records: Records,
    last_arrival_s: float,
    *,
    progress: Callable[[float, float], None] | None = None,
    beyond_duration: int = 0,
) -> Simulated:
    """Run ``traffic`` until every request of the run (``records``' capacity) has ended (the
    run ends at the last finish, which a replica's clock may reach ahead of
    ``env.now``) or at ``duration_s``; then the final samples, and the records closed
    (requests still queued or running are ``unfinished``). Requests left out (arriving
    after ``duration_s``, ``beyond_duration``) could not have ended by then: with any,
    the run stops at ``duration_s``, as it would with them."""
    processes = traffic.processes(
        _sampler(env, recorder, traffic, scenario.metrics.sample_interval_s)
    )
    all_done = env.event()
    total = records.capacity

    def on_all_ended() -> None:
        if not all_done.triggered:
            timer = env.timeout(max(0.0, records.last_finish_s - env.now))
            assert timer.callbacks is not None
            timer.callbacks.append(lambda _: _succeed(all_done))

    records.on_all_ended = on_all_ended
    if progress is not None:
        end_hint = scenario.duration_s or max(last_arrival_s, 1.0)  # the run may drain past it
        processes.append(_progress(env, progress, end_hint))
    for process in processes:
        env.process(process)
    if total == 0:
        all_done.succeed()
    stop: simpy.Event = all_done
    if scenario.duration_s is not None:
        cut = env.timeout(scenario.duration_s)
        stop = cut if beyond_duration else all_done | cut
    env.run(until=stop)
    _sample_all(recorder, traffic, "final")
    records.close()
    return Simulated(env, recorder, records, traffic, processes)


def _succeed(event: simpy.Event) -> None:
    event.succeed()


def _sample_all(recorder: Recorder, traffic: Traffic, trigger: str) -> None:
    for replica in traffic.sampled():
        recorder.sample(replica, trigger=trigger)
    traffic.after_sample(trigger)


def _sampler(
    env: simpy.Environment, recorder: Recorder, traffic: Traffic, interval_s: float
) -> Process:
    for _ in range(bounds.MAX_SAMPLES + 1):
        _sample_all(recorder, traffic, "periodic")
        yield env.timeout(interval_s)
    raise bounds.samples_exceeded(interval_s, env.now)


def _progress(
    env: simpy.Environment, report: Callable[[float, float], None], end_s: float
) -> Process:
    while True:
        report(env.now, end_s)
        yield env.timeout(end_s / 100)
