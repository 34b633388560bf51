"""The fleet, a run's traffic (``sim.simulate.driver``): the arrival process that routes every
request at its arrival (``Router.choose`` over the replicas' views, then
``Replica.submit``), client retries (re-routed, or pinned to the replica that refused),
requests a crash or a killed restart loses, the restart / autoscaling policy ticks and a
script of node actions. Each replica reports through its node's outlet; the fleet reads
replicas through their views only. Node lifecycles (provisioning, loading, warming,
draining, down, gone) are :class:`sim.fleet.lifecycle.Lifecycle`'s. A disaggregated
fleet's hand-offs, prefill to decode replica, are :class:`sim.fleet.disagg.Disagg`'s: the
fleet routes a request's prefill phase, hands a prefill's end to it (``apply``; at once in
exact mode) and ends a phase's request through it.

One clock, ``env.now``, and one loop, SimPy's, in both modes: exact mode's replicas are
SimPy processes; fast mode's arrivals, client retries and replicas' decisions are SimPy
events at exactly their instants (``sim.fleet.loop``); :meth:`Fleet.at` puts any other
callback on that loop at an exact instant. Order at one instant: requests arriving then
are routed first (URGENT events, as a single replica queues its arrivals before anything
else happens), then samples and policy ticks, then the replicas step. Every random draw
comes from a stream seeded by (scenario seed, replica id, purpose), so the same scenario
gives the same bytes.
"""

# fragsim: compiled
from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np
import simpy
from simpy.events import NORMAL, URGENT

from policies.routing.base import NO_REQUEST, Router, RouteRequest
from sim.engine.batch import ClientRetry, Group, SchedEvent, Status
from sim.engine.driven import Decision, Driven
from sim.engine.events import ArrivalTimer
from sim.engine.recorder import Recorder
from sim.engine.replica import Replica, RestartMode
from sim.engine.simpy_adapter import Call, now_of
from sim.fleet.disagg import Disagg, linked_parts
from sim.fleet.lifecycle import Lifecycle
from sim.fleet.loop import ARRIVAL_CHUNK, Arrivals
from sim.fleet.node import Node
from sim.fleet.routeviews import AbsentView, RouteViews
from sim.latency.base import OutOfRange
from sim.results.seed_alerts import FAILURE_KINDS
from sim.scenario import bounds
from sim.scenario.fleet import FleetConfig
from sim.simulate.columns import GroupColumns
from sim.simulate.outlet import RunOutlet
from sim.simulate.parts import Parts
from sim.simulate.records import Records


@dataclass(frozen=True, slots=True)
class NodeAction:
    """A node action at a given time, outside the policies (a postmortem's recorded
    events): ``restart`` / ``crash`` / ``scale_down`` a node by replica id, or
    ``scale_up`` (a node of ``pool_index`` serving at once: the log records when it
    started serving, not when it was bought)."""

    time_s: float
    action: Literal["restart", "crash", "scale_up", "scale_down"]
    replica_id: int = -1
    pool_index: int = 0
    cause: str = "recorded"


class _NodeOutlet(RunOutlet):
    """One node's replica outlet: the run's recording, the node's failure counters, the
    fleet's clients (retries, lost requests) and the node's lifecycle (a restart's
    rows are the fleet's own: ``Fleet.fleet_event``)."""

    def __init__(self, fleet: Fleet, node: Node, driven: Driven | None) -> None:
        super().__init__(fleet.recorder, fleet.records)
        self.takes_retries = True
        self.fleet = fleet
        self.node = node
        self.driven = driven
        """The replica's driver in fast mode (a prefill replica hands off through it)."""

    def on_done(self, replica: Replica, group: Group) -> None:
        disagg = self.fleet.disagg
        if disagg is None or not disagg.on_done(replica, group, self.driven):
            self.records.end(group, replica.replica_id)

    def on_event(self, replica: Replica, event: SchedEvent) -> None:
        self.recorder.on_event(replica, event)
        if event.kind in FAILURE_KINDS:
            node = self.node
            node.failures_total += 1
            if event.cause == "fragmentation":
                node.fragmentation_failures_total += 1
            if event.free_tokens / replica.capacity_tokens > self.fleet.high_free_share:
                node.high_free_failures_total += 1
                node.last_high_free_failure_s = replica.now_s

    def on_retry(self, replica: Replica, group: Group, delay_s: float) -> None:
        self.fleet.client_retry(replica, group, delay_s)

    def on_lost(self, replica: Replica, groups: list[Group]) -> None:
        self.fleet.lost(replica, groups)

    def on_restart(self, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        self.fleet.went_down(self.node, replica, mode, downtime_s)


class Fleet:
    """A run's traffic (``sim.simulate.driver.Traffic``) when the scenario has a fleet: built with
    its initial nodes; the run starts :meth:`processes`. Its nodes' lives are its
    :class:`Lifecycle`'s (:attr:`life`), for which it is the ``NodeHost``."""

    def __init__(
        self,
        env: simpy.Environment,
        config: FleetConfig,
        parts: Sequence[Parts],
        columns: GroupColumns,
        sessions: dict[int, int] | None,
        recorder: Recorder,
        records: Records,
        *,
        seed: int,
        exact: bool,
        retry: ClientRetry,
        high_free_share: float,
    ) -> None:
        self.env = env
        self.config = config
        self.parts = linked_parts(config, parts) if config.disaggregated else parts
        self.exact = exact
        self.recorder = recorder
        self.columns = columns
        self.records = records
        self.sessions = sessions
        self.router = config.router.build()
        self.restart_policy = config.restart.build()
        self.autoscaler = config.autoscaler.build()
        self.retry = retry
        self.high_free_share = high_free_share
        self.out_of_range = [OutOfRange.for_model(part.latency) for part in parts]
        """Per pool, the steps its replicas simulated outside its latency model's
        validity range (None: a model valid everywhere): the run's count."""
        self.views = RouteViews(partial(now_of, env), config.router_refresh_s)
        self.first_replica = np.full(len(columns), -1, dtype=np.int32)
        self.route_kind: dict[int, str] = {}
        """request id -> how its last placement was made, where not ``routed``."""
        self.route_refusals = 0
        self.fleet_rows: dict[str, list[Any]] = {}
        self.script: list[NodeAction] = []
        """Node actions applied at their times besides the policies' (a postmortem's
        recorded events), sorted by time."""
        self.disagg = Disagg(self, config, self.parts) if config.disaggregated else None
        """A disaggregated fleet's hand-offs (``sim.fleet.disagg``); None: colocated."""
        self.life = Lifecycle(env, config, parts, self, seed=seed)
        self.nodes = self.life.nodes
        """Every node, by replica id (the lifecycle's list)."""
        for i, pool in enumerate(config.pools):
            for j in range(pool.count):
                self.life.add_active(i, pool.uptime_of(j))
        if self.disagg is not None:
            self.disagg.assign_roles()

    @property
    def router(self) -> Router:
        """The routing policy (a postmortem's replay sets its recorded routes')."""
        return self._router

    @router.setter
    def router(self, router: Router) -> None:
        self._router = router
        self._views_only = router.views_only
        self._reads_memory = router.reads_memory

    @property
    def scale_ups(self) -> int:
        return self.life.scale_ups

    @property
    def scale_downs(self) -> int:
        return self.life.scale_downs

    @property
    def restarts_by_cause(self) -> dict[str, int]:
        return self.life.restarts_by_cause

    # -- replicas -------------------------------------------------------------------------
    def make_replica(self, node: Node, initial_uptime_s: float) -> Replica:
        part = self.parts[node.pool_index]
        alloc, spec = part.allocator, part.spec
        driven = None if self.exact else Driven(self.apply)
        replica = Replica(
            self.env,
            node.replica_id,
            part.scheduler,
            lambda: alloc.build(spec),
            part.latency,
            outlet=_NodeOutlet(self, node, driven),
            exact=self.exact,
            initial_uptime_s=initial_uptime_s,
            out_of_range=self.out_of_range[node.pool_index],
            driver=driven,
        )
        self.views.set(node.replica_id, replica.view, replica)
        return replica

    def node_added(self, node: Node) -> None:
        self.views.set(node.replica_id, AbsentView(node.replica_id))

    def routability_changed(self) -> None:
        self.views.invalidate()

    @property
    def now_s(self) -> float:
        """The run's one clock: ``env.now``."""
        return now_of(self.env)

    def at(self, time_s: float, fn: Callable[[], None]) -> Call:
        """``fn()`` at exactly ``time_s`` (not before now), as an ordinary SimPy event:
        after the arrivals and client retries of that instant, before the replicas'
        decisions; among such calls and timers of one instant, in the order they were
        made. Returns its event (``cancel()`` voids it). Fast and exact mode alike:
        ``fn`` may submit to a replica (``Replica.submit`` wakes it) or change a node's
        life through :attr:`life`; it must not call a replica's decision itself."""
        return Call(self.env, time_s, NORMAL, fn)

    # -- arrivals and routing -------------------------------------------------------------
    def arrivals(self) -> Generator[simpy.Event, Any, None]:
        """Exact mode: an arrival event per distinct arrival time, each request routed
        at its own (fast mode: :class:`sim.fleet.loop.Arrivals`)."""
        env, columns, records = self.env, self.columns, self.records
        n = len(columns)
        due_s = env.now
        for start in range(0, n, ARRIVAL_CHUNK):
            # Made a chunk at a time as arrivals come: only requests in flight (and
            # the chunk's not yet arrived) are objects.
            chunk = columns.groups(start, min(n, start + ARRIVAL_CHUNK))
            last = len(chunk) - 1
            after_s = (
                float(columns.arrivals_s[start + last + 1]) if start + last + 1 < n else math.inf
            )
            for j, g in enumerate(chunk):
                records.start(g)
                if g.arrival_s > due_s:
                    yield ArrivalTimer(env, max(0.0, g.arrival_s - env.now))
                    due_s = g.arrival_s
                next_s = chunk[j + 1].arrival_s if j < last else after_s
                self.first_replica[start + j] = self.route(g, next_s, "routed")

    def _request(self, g: Group) -> RouteRequest:
        session = self.sessions.get(g.request_id) if self.sessions is not None else None
        hashes = g.prefix_hashes
        return RouteRequest(
            g.request_id,
            g.arrival_s,
            g.prompt_tokens,
            g.output_tokens,
            g.num_seqs,
            session,
            hashes if isinstance(hashes, tuple) else tuple(hashes),
        )

    def route(self, g: Group, next_s: float, kind: str) -> int:
        """Place ``g`` now with the router; returns the replica id, or -1 (refused: no
        replica takes traffic; the client retries or the request ends
        ``rejected-capacity``)."""
        router = self.router
        request = self._request(g) if router.reads_request else NO_REQUEST
        choice = self.views.choose(router, request, self._views_only, self._reads_memory)
        if choice is None:
            self.route_refusals += 1
            self.fleet_event(
                "route-refused", -1, "no replica takes traffic", request_id=g.request_id
            )
            self._client_error(g, None, "rejected-capacity")
            return -1
        node = self.nodes[choice]
        assert node.replica is not None and node.routable, "router chose a replica that is not up"
        if kind != "routed":
            self.route_kind[g.request_id] = kind
        if self.disagg is not None:
            g = self.disagg.prefill_phase(g)
        node.replica.submit(g, next_s)
        return choice

    def redirect(self, groups: list[Group]) -> None:
        """A draining replica's queue, placed again by the router (not client retries)."""
        for g in groups:
            self.route(g, math.inf, "redirected")

    # -- clients ------------------------------------------------------------------------------
    def client_retry(self, replica: Replica, g: Group, delay_s: float) -> None:
        """Exact mode: a replica refused ``g`` and its client retries after ``delay_s``
        (attempt counted by the scheduler): pinned to that replica while it takes
        traffic, unless retries are re-routed (fast mode: :meth:`apply`)."""
        replica_id = replica.replica_id
        timer = ArrivalTimer(self.env, replica.now_s - self.env.now + delay_s)
        assert timer.callbacks is not None
        timer.callbacks.append(lambda _: self.retry_now(g, replica_id))

    def apply(self, driven: Driven, decision: Decision) -> None:
        """Fast mode: what a replica's decision handed back, applied after it by its
        event (``sim.engine.driven``): its clients' retries (each an URGENT event at its
        due time, pinned to the replica unless re-routed), its prefills' hand-offs (a
        disaggregated fleet, ``sim.fleet.disagg``), then a restart's boundary -- the
        node's lifecycle moves on (its queue may go back to the router), the replica
        goes down, the requests it lost see errors."""
        replica = driven.replica
        replica_id = replica.replica_id
        for due_s, _set_s, g in decision.retries:
            self._retry_at(due_s, g, replica_id)
        if self.disagg is not None:
            for done_s, g in decision.handoffs:
                self.disagg.handed_off(done_s, g)
        if decision.down is None:
            return
        mode, downtime_s = decision.down
        self.went_down(self.nodes[replica_id], replica, mode, downtime_s)
        lost = driven.go_down(mode, downtime_s)
        if lost:
            self.lost(replica, lost)

    def _retry_at(self, due_s: float, g: Group, replica_id: int) -> None:
        """Fast mode: ``g``'s client retries at exactly ``due_s`` (:meth:`retry_now`)."""
        Call(self.env, due_s, URGENT, lambda: self.retry_now(g, replica_id))

    def went_down(self, node: Node, replica: Replica, mode: RestartMode, downtime_s: float) -> None:
        """``node``'s replica goes down now (its requests not taken yet): the lifecycle
        moves on, and the KV inbound to it (a disaggregated fleet's) goes elsewhere."""
        self.life.went_down(node, mode, downtime_s)
        if self.disagg is not None:
            self.disagg.went_down(replica)

    def retry_now(self, g: Group, replica_id: int) -> None:
        """A client's retry of ``g`` arrives now: back to ``replica_id`` (pinned) while
        it takes traffic unless retries are re-routed (-1: the router places it)."""
        if replica_id < 0:
            self.route(g, math.inf, "rerouted-retry")
            return
        node = self.nodes[replica_id]
        pinned = self.disagg is None or not self.disagg.is_decode(
            replica_id
        )  # (P/D: prefill again)
        if pinned and not self.config.retry.reroute and node.routable and node.replica is not None:
            self.route_kind[g.request_id] = "pinned-retry"
            node.replica.submit(g)
            return
        self.route(g, math.inf, "rerouted-retry")

    def lost(self, replica: Replica, groups: list[Group]) -> None:
        """The process holding ``groups`` died (a crash, a killed restart): each
        client sees an error now."""
        for g in groups:
            self._client_error(g, replica, "failed-lost")

    def client_error(self, g: Group, status: Status) -> None:
        """``g`` is refused now, outside any replica (a disaggregated fleet's hand-off):
        its client retries through the router, or it ends with ``status``."""
        self._client_error(g, None, status)

    def _client_error(self, g: Group, replica: Replica | None, status: Status) -> None:
        if self.disagg is not None:
            g = self.disagg.ending(g)  # a prefill phase's error is its request's
        delay_s = self.retry.next_try(g)
        now = self.now_s
        if delay_s is not None:
            if not self.exact:
                self._retry_at(now + delay_s, g, -1)
                return
            timer = ArrivalTimer(self.env, delay_s)
            assert timer.callbacks is not None
            timer.callbacks.append(lambda _: self.retry_now(g, -1))
            return
        g.end(status, now)
        self.records.end(g, -1 if replica is None else replica.replica_id)

    # -- events ---------------------------------------------------------------------------------
    def fleet_event(
        self, kind: str, replica_id: int, cause: str, detail: str = "", request_id: int = -1
    ) -> None:
        """A fleet row in the event log (restart, crash, scale, route refusal) with the
        replica's pool state now where it has one."""
        replica = self.nodes[replica_id].replica if replica_id >= 0 else None
        free = largest = 0
        share = math.nan
        uptime = 0.0
        if replica is not None:
            replica.observe()  # its memory as of now
            view = replica.view
            free, largest = view.free_tokens, view.largest_free_extent_tokens
            share = free / view.capacity_tokens
            uptime = replica.uptime_s
        self.recorder.events.add(
            time_s=self.now_s,
            replica=replica_id,
            kind=kind,
            request_id=request_id,
            free_tokens=free,
            largest_free_extent_tokens=largest,
            free_share=share,
            cause=cause,
            uptime_s=uptime,
            detail=detail,
        )

    # -- periodic processes -----------------------------------------------------------------------
    def processes(self, sampler: Generator[simpy.Event, Any, None]) -> list[Any]:
        """Arrivals, the run's sampler, the policies' ticks and the script, in that
        order (``sim.simulate.driver.Traffic``)."""
        out = [self.arrivals() if self.exact else Arrivals(self).process(), sampler]
        if self.config.restart.kind != "none":
            out.append(self.restart_ticks())
        if self.config.autoscaler.kind != "none":
            out.append(self.autoscale_ticks())
        if self.script:
            out.append(self.play(self.script))
        return out

    def sampled(self) -> list[Replica]:
        """Every node's replica, but scaled-down ones, in replica-id order."""
        return [n.replica for n in self.nodes if n.replica is not None and n.state != "gone"]

    def replicas(self) -> list[Replica]:
        return [n.replica for n in self.nodes if n.replica is not None]

    def after_sample(self, trigger: str) -> None:
        """The fleet table's row now: nodes by state, queue and batch, the bill."""
        now = self.env.now
        rows = self.fleet_rows
        counts = dict.fromkeys(
            ("provisioning", "loading", "warming", "active", "draining", "down"), 0
        )
        waiting = running = 0
        for node in self.nodes:
            if node.state in counts:
                counts[node.state] += 1
            if node.replica is not None and node.state in ("active", "draining"):
                view = node.replica.view
                waiting += view.waiting_requests
                running += view.running_requests
        row: dict[str, Any] = {"time_s": now, "trigger": trigger}
        row.update(counts)
        row["replicas"] = sum(counts.values())
        row["waiting_requests"] = waiting
        row["running_requests"] = running
        row["replica_hours"] = sum(n.billed_s(now) for n in self.nodes) / 3600.0
        row["cost_usd"] = sum(n.cost_usd(now) for n in self.nodes)
        avoidable = [n for n in self.nodes if n.avoidable]
        row["avoidable_replica_hours"] = sum(n.billed_s(now) for n in avoidable) / 3600.0
        row["avoidable_cost_usd"] = sum(n.cost_usd(now) for n in avoidable)
        for key, value in row.items():
            rows.setdefault(key, []).append(value)

    def play(self, actions: Sequence[NodeAction]) -> Generator[simpy.Event, Any, None]:
        """Apply ``actions`` (sorted by time) at their times."""
        env, life = self.env, self.life
        for a in actions:
            if a.time_s > env.now:
                yield env.timeout(a.time_s - env.now)
            if a.action == "scale_up":
                node = life.add_active(a.pool_index, 0.0)
                life.scale_ups += 1
                self.fleet_event("scale-up", node.replica_id, a.cause)
            elif a.action == "restart":
                life.restart(a.replica_id, a.cause)
            elif a.action == "crash":
                life.crash(self.nodes[a.replica_id])
            elif self.nodes[a.replica_id].state != "gone":
                life.scale_downs += 1
                life.retire(self.nodes[a.replica_id], a.cause)

    def restart_ticks(self) -> Generator[simpy.Event, Any, None]:
        policy = self.restart_policy
        for _ in range(bounds.MAX_POLICY_CHECKS):
            yield self.env.timeout(policy.interval_s)
            for decision in policy.decide(self.life.reading()):
                self.life.restart(decision.replica_id, decision.cause)
        yield self.env.timeout(policy.interval_s)
        field, what = "fleet.restart.interval_s", "restart-policy calls"
        raise bounds.count_exceeded(field, bounds.MAX_POLICY_CHECKS, what, self.env.now)

    def autoscale_ticks(self) -> Generator[simpy.Event, Any, None]:
        scaler = self.autoscaler
        for _ in range(bounds.MAX_POLICY_CHECKS):
            yield self.env.timeout(scaler.interval_s)
            decision = scaler.decide(self.life.reading())
            if decision is not None:
                self.life.apply_scale(decision)
        yield self.env.timeout(scaler.interval_s)
        field, what = "fleet.autoscaler.interval_s", "autoscaler calls"
        raise bounds.count_exceeded(field, bounds.MAX_POLICY_CHECKS, what, self.env.now)
