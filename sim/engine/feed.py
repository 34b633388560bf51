"""A process replica's own arrivals in fast mode (``sim.engine.replica``): requests fed
to it ahead of their arrival times (``Replica.feed``: no SimPy event per arrival) and its
clients' retries when its owner does not take them, each queued at its own time in
exact mode's order: between a fed request and a retry due at the same instant, the one
whose timer would have been set first."""

from __future__ import annotations

import heapq
import math

from sim.engine.batch import Group
from sim.engine.scheduler import Scheduler


class Feed:
    """Fed requests (sorted by arrival) and client retries not queued yet."""

    def __init__(self, start_s: float) -> None:
        self.groups: list[Group] = []
        self.next = 0
        """The next fed request not queued yet."""
        self.start_s = start_s
        """When the first fed request's arrival timer would have been set."""
        self.caller_next_s = math.inf
        """The next arrival a caller announced (``Replica.submit``), for fast mode's cuts."""
        self.retries: list[tuple[float, float, int, Group]] = []
        """(due time, time the retry was set, tie-breaker, group)."""
        self._retry_tie = 0

    def pending(self) -> bool:
        """Whether a fed request or a retry is not queued yet."""
        return self.next < len(self.groups) or len(self.retries) > 0

    def extend(self, groups: list[Group], now_s: float) -> None:
        """More requests, arriving at their ``arrival_s`` (sorted, not before ``now_s``)."""
        if self.next >= len(self.groups):
            self.start_s = now_s
        self.groups.extend(groups)

    def add_retry(self, due_s: float, set_s: float, group: Group) -> None:
        """A client retries ``group`` at ``due_s`` (its timer set at ``set_s``)."""
        heapq.heappush(self.retries, (due_s, set_s, self._retry_tie, group))
        self._retry_tie += 1

    def clear(self) -> None:
        self.groups = []
        self.retries = []

    def next_s(self, clock_s: float) -> float:
        """When the next fed request or retry arrives, or the caller's announced next
        arrival when it is sooner and after ``clock_s`` (inf: none pending)."""
        t = math.inf
        if self.next < len(self.groups):
            t = self.groups[self.next].arrival_s
        if self.retries and self.retries[0][0] < t:
            t = self.retries[0][0]
        caller = self.caller_next_s
        if clock_s < caller < t:
            t = caller
        return t

    def submit_due(self, now: float, sched: Scheduler) -> None:
        """Queue on ``sched`` every fed request and retry due by ``now``, each at its
        own time."""
        feed = self.groups
        i = self.next
        retries = self.retries
        while True:
            a = feed[i].arrival_s if i < len(feed) else math.inf
            r = retries[0][0] if retries else math.inf
            if r < a or (r == a != math.inf and self._retry_first(i)):
                if r > now:
                    break
                sched.submit(heapq.heappop(retries)[3], r)
            elif a <= now:
                sched.submit(feed[i], a)
                i += 1
            else:
                break
        self.next = i

    def _retry_first(self, i: int) -> bool:
        """At equal times, does the next retry come before fed request ``i``? In exact
        mode the earlier-set timer fires first: the arrival's was set at the previous
        arrival, the retry's when the request was refused (an arrival set at that same
        instant was set first: the arrival process runs before the step it wakes)."""
        feed = self.groups
        if i > 0 and feed[i - 1].arrival_s == feed[i].arrival_s:
            return False  # one timer brought both: the earlier one went first already
        arrival_set_s = feed[i - 1].arrival_s if i > 0 else self.start_s
        return self.retries[0][1] < arrival_set_s
