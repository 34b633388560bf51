"""The base class of a replica's drivers (:class:`Driver`): a native class, so the
replica's calls to its driver -- its clock, its horizon, its next arrival, several per
request -- are compiled method calls, not Python ones through a Protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.engine.batch import Group
    from sim.engine.replica import Replica


class Driver:
    """What advances a replica's time (``sim.engine.replica``): a SimPy process of its own
    (``sim.engine.process``) or one event per decision (``sim.engine.driven.Driven``). The
    replica calls these; the driver calls the replica's step mechanics. Every driver
    subclasses it and overrides each method (these raise NotImplementedError)."""

    def attach(self, replica: Replica) -> None:
        """Drive ``replica`` (called once, first thing in its construction: read nothing
        of it yet)."""
        raise NotImplementedError

    def clock_s(self) -> float:
        """The time observers read the replica at: ``env.now``, the run's one clock."""
        raise NotImplementedError

    def horizon_s(self) -> float:
        """The next time anything else may act or read the replica: a step or a run
        that ends before it is applied at once."""
        raise NotImplementedError

    def next_arrival_s(self) -> float:
        """When the next request the driver holds arrives (inf: none or unknown)."""
        raise NotImplementedError

    def submit(self, group: Group, next_arrival_s: float) -> None:
        """A request arrives now (:meth:`Replica.submit`)."""
        raise NotImplementedError

    def feed(self, groups: list[Group]) -> None:
        """Requests that arrive at their own times (:meth:`Replica.feed`)."""
        raise NotImplementedError

    def queue_due(self) -> None:
        """Queue the requests the driver holds that have arrived by now."""
        raise NotImplementedError

    def retry(self, group: Group, delay_s: float) -> None:
        """The scheduler refused ``group``; its client tries again after ``delay_s``."""
        raise NotImplementedError

    def wake(self) -> None:
        """Something for the replica to decide came now (KV handed over): it decides at
        its next step boundary (now when idle)."""
        raise NotImplementedError

    def restart_requested(self, changed: bool) -> None:
        """A restart was requested (``changed``: the pending restart changed)."""
        raise NotImplementedError

    def close(self) -> None:
        """The run is over: drop whatever keeps the replica alive."""
        raise NotImplementedError
