"""What a replica reports, through one object: its *outlet*, given by its owner (the run
for a single replica, the fleet for one of its nodes). The replica reports and goes on;
the owner records and acts, and never calls back into the replica from inside a report
(a report comes from the middle of the replica's step: its state is current, but it is
not at a step boundary).

Reports, each with the replica that makes it:

* ``on_event``: an allocation failure or a preemption (``SchedEvent``), as it happens.
* ``on_done``: a request ended for good (its status and finish time are final).
* ``on_retry``: a request refused here whose client tries again after ``delay_s``
  (the attempt already counted, ``ClientRetry.next_try``); only when the owner takes its
  clients' retries (``takes_retries``): otherwise the client retries on this replica.
* ``on_lost``: the process died (a crash, a killed restart) holding these requests: each
  client sees an error now.
* ``on_restart``: the process goes down now (mode and downtime), after queueing what has
  arrived by now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from sim.engine.batch import Group, SchedEvent
    from sim.engine.replica import Replica, RestartMode


@mypyc_attr(allow_interpreted_subclasses=True)
class ReplicaOutlet:
    """An outlet that records nothing; owners subclass it (compiled with the engine, so
    the run's own outlet is called natively; interpreted owners may subclass it too).
    Its defaults: no retries taken (clients retry on the replica), and lost requests
    end ``failed-lost`` at once (reported ``on_done``)."""

    takes_retries: bool = False
    """Whether refused requests go to :meth:`on_retry` (the owner's clients retry)
    instead of waiting on the replica for their retry. An owner sets it on the instance
    (in its ``__init__``): the compiled build reads the instance's attribute, never a
    subclass's class attribute."""

    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        """An allocation failure or a preemption on ``replica`` now."""

    def on_done(self, replica: Replica, group: Group) -> None:
        """``group`` ended for good on ``replica``."""

    def on_retry(self, replica: Replica, group: Group, delay_s: float) -> None:
        """``replica`` refused ``group``; its client tries again ``delay_s`` after now
        (on ``replica``'s clock). Called only when :attr:`takes_retries`."""
        raise NotImplementedError("an outlet that takes retries implements on_retry")

    def on_lost(self, replica: Replica, groups: list[Group]) -> None:
        """``replica``'s process died holding ``groups`` (its batch, then its queue)."""
        for g in groups:
            g.end("failed-lost", replica.now_s)
            self.on_done(replica, g)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        """``replica``'s process goes down now, for ``downtime_s`` (inf: for good)."""
