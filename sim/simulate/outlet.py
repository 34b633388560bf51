"""The run's replica outlet (``sim.engine.outlet``): a replica's events and restarts to
the run's recorder, its ended requests to the run's records. Compiled with the engine,
so every ended request and failure event is handed on natively (a fleet's node outlet,
``sim.fleet.fleet``, subclasses it in interpreted code)."""

# fragsim: compiled
from __future__ import annotations

from mypy_extensions import mypyc_attr

from sim.engine.batch import Group, SchedEvent
from sim.engine.outlet import ReplicaOutlet
from sim.engine.recorder import Recorder
from sim.engine.replica import Replica, RestartMode
from sim.simulate.records import Records


@mypyc_attr(allow_interpreted_subclasses=True)
class RunOutlet(ReplicaOutlet):
    """A replica's outlet in a run: its events and restarts to the run's recorder, its
    ended requests to the run's records."""

    def __init__(self, recorder: Recorder, records: Records) -> None:
        self.recorder = recorder
        self.records = records

    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        self.recorder.on_event(replica, event)

    def on_done(self, replica: Replica, group: Group) -> None:
        self.records.end(group, replica.replica_id)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        self.recorder.on_restart(replica, mode, downtime_s)
