"""Node lifecycles: buying a node (provisioning -> loading -> warming -> active),
restarting one (draining -> loading -> warming -> active), a crash (down for the repair
-> loading -> warming -> active) and scaling down (draining -> gone), with the bill.

Transitions are SimPy timers; each carries the node's ``epoch`` when it was set and does
nothing if the node moved on since (a node scaled down while provisioning). Durations
are drawn from a stream per (scenario seed, replica id, purpose): the same scenario draws
the same durations whatever else happens.

Drain modes (the restart policy's ``drain``): ``wait`` stops admitting and goes down when
the batch is empty, or when ``drain_timeout_s`` runs out (the rest is lost: clients
retry); ``kill`` goes down at the next step boundary and loses every request it holds;
``redirect`` hands its queue back to the router, then waits as ``wait``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import simpy

from policies.autoscale.base import ScaleDecision
from policies.fleet_view import NodeState
from sim.fleet.node import FleetReading, Node, NodeReading
from sim.scenario import bounds
from sim.scenario.fleet import Duration, FleetConfig

if TYPE_CHECKING:
    from sim.engine.batch import Group
    from sim.engine.replica import Replica

_PURPOSES = {"provision": 1, "load": 2, "mttr": 3, "mtbf": 4}


class NodeHost(Protocol):
    """What the lifecycle asks of its owner (the fleet): the lifecycle keeps the nodes,
    their states, timers, draws and the bill; the owner makes replicas, keeps the
    routers' views, logs fleet rows and places redirected requests."""

    def make_replica(self, node: Node, initial_uptime_s: float) -> Replica:
        """A serving process for ``node`` (its model loaded), up ``initial_uptime_s``."""
        ...

    def node_added(self, node: Node) -> None:
        """``node`` joined the fleet (no serving process yet)."""
        ...

    def routability_changed(self) -> None:
        """A node's state or its replica's ``accepting`` changed: whether a router may
        choose it may have (called after every such change)."""
        ...

    def fleet_event(
        self, kind: str, replica_id: int, cause: str, detail: str = "", request_id: int = -1
    ) -> None:
        """A fleet row in the event log (restart, crash, scale, drain timeout)."""
        ...

    def redirect(self, groups: list[Group]) -> None:
        """A stopping replica's queue, to be placed again by the router."""
        ...


class Lifecycle:
    """The fleet's nodes and their lives (the module docstring), a collaborator of the
    fleet (``sim.fleet.fleet.Fleet`` owns one and is its :class:`NodeHost`)."""

    def __init__(
        self,
        env: simpy.Environment,
        config: FleetConfig,
        parts: Sequence[Any],
        host: NodeHost,
        *,
        seed: int,
    ) -> None:
        self.env = env
        self.config = config
        self.parts = parts
        self.host = host
        self.seed = seed
        self.nodes: list[Node] = []
        self._rngs: dict[tuple[int, int], np.random.Generator] = {}
        self.scale_ups = 0
        self.scale_downs = 0
        self.restarts_by_cause: dict[str, int] = {}
        self.fault_draws = 0
        """Crash-clock timers fired, all nodes (bounded: ``bounds.MAX_FAULT_DRAWS``)."""

    # -- draws ------------------------------------------------------------------------------
    def _rng(self, replica_id: int, purpose: str) -> np.random.Generator:
        key = (replica_id, _PURPOSES[purpose])
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = np.random.default_rng([self.seed, replica_id, key[1]])
        return rng

    def _draw(self, d: Duration, replica_id: int, purpose: str) -> float:
        if d.sd_s <= 0:
            return float(d.mean_s)
        return max(0.0, float(self._rng(replica_id, purpose).normal(d.mean_s, d.sd_s)))

    # -- nodes ------------------------------------------------------------------------------
    def _new_node(self, pool_index: int, state: NodeState) -> Node:
        pool = self.config.pools[pool_index]
        part = self.parts[pool_index]
        now = self.env.now
        node = Node(
            replica_id=len(self.nodes),
            pool=pool.name,
            pool_index=pool_index,
            gpus=part.spec.tensor_parallel,
            usd_per_gpu_hour=pool.price_usd_per_gpu_hour(part.gpu_usd_per_hour),
            state=state,
            state_since_s=now,
            billed_from_s=now,
        )
        self.nodes.append(node)
        self.host.node_added(node)
        return node

    def add_active(self, pool_index: int, initial_uptime_s: float) -> Node:
        """A node serving at t = 0, up for ``initial_uptime_s`` already."""
        node = self._new_node(pool_index, "active")
        node.replica = self.host.make_replica(node, initial_uptime_s)
        self._start_faults(node)
        return node

    def _set(self, node: Node, state: NodeState) -> None:
        node.state = state
        node.state_since_s = self.env.now
        self.host.routability_changed()

    def _after(self, delay_s: float, node: Node, action: Any) -> None:
        """``action()`` after ``delay_s`` unless the node's epoch changes meanwhile."""
        epoch = node.epoch
        timer = self.env.timeout(delay_s)
        assert timer.callbacks is not None
        timer.callbacks.append(lambda _: action() if node.epoch == epoch else None)

    def reading(self) -> FleetReading:
        """What the restart policy and the autoscaler read now: every serving replica
        brought to now first (its views only read)."""
        for node in self.nodes:
            if node.replica is not None and node.state != "gone":
                node.replica.observe()
        config = self.config
        return FleetReading(
            self.env.now,
            [NodeReading(n) for n in self.nodes if n.state != "gone"],
            config.floor,
            config.ceiling,
        )

    # -- scale up -------------------------------------------------------------------------
    def buy(self, cause: str, avoidable: bool) -> Node:
        node = self._new_node(self.config.scale_pool_index, "provisioning")
        node.bought_cause = cause
        node.avoidable = avoidable
        lc = self.config.lifecycle
        provision_s = self._draw(lc.provision, node.replica_id, "provision")
        self._after(provision_s, node, lambda: self._loading(node))
        detail = f"provision_s={provision_s:.1f}" + ("; avoidable" if avoidable else "")
        self.host.fleet_event("scale-up", node.replica_id, cause, detail)
        return node

    def _loading(self, node: Node) -> None:
        self._set(node, "loading")
        load_s = self._draw(self.config.lifecycle.load, node.replica_id, "load")
        self._after(load_s, node, lambda: self._loaded(node))

    def _loaded(self, node: Node) -> None:
        self._set(node, "warming")
        replica = node.replica = self.host.make_replica(node, 0.0)
        replica.accepting = False
        self.host.routability_changed()
        self._after(self.config.lifecycle.warmup_s, node, lambda: self._ready(node))

    def _ready(self, node: Node) -> None:
        self._set(node, "active")
        assert node.replica is not None
        node.replica.accepting = True
        self.host.routability_changed()
        if node.crashes_total == 0 and node.restarts_total == 0:
            self._start_faults(node)

    # -- restarts ---------------------------------------------------------------------------
    def restart(self, replica_id: int, cause: str) -> bool:
        """Restart an active node (False: it is not active; nothing done)."""
        node = self.nodes[replica_id]
        if node.state != "active" or node.replica is None:
            return False
        drain, timeout_s = self._drain()
        replica = node.replica
        replica.accepting = False
        self.host.routability_changed()
        self._set(node, "draining")
        node.pending = "restart"
        node.restarts_total += 1
        key = cause.split(":")[0]
        self.restarts_by_cause[key] = self.restarts_by_cause.get(key, 0) + 1
        self.host.fleet_event("restart", replica_id, cause, f"drain={drain}")
        load_s = self._draw(self.config.lifecycle.load, replica_id, "load")
        downtime_s = load_s + self.config.lifecycle.warmup_s
        node.down_load_s = load_s
        if drain == "kill":
            replica.request_restart("lose", downtime_s)
            return True
        if drain == "redirect":
            self.host.redirect(replica.take_waiting())
        replica.request_restart("drain", downtime_s)
        self._drain_deadline(node, timeout_s, downtime_s)
        return True

    def _drain(self) -> tuple[str, float]:
        """(drain mode, drain timeout) of the restart policy."""
        c = self.config.restart
        return c.drain, c.drain_timeout_s

    def _drain_deadline(self, node: Node, timeout_s: float, downtime_s: float) -> None:
        replica = node.replica
        assert replica is not None

        def expire() -> None:
            if node.state == "draining":
                self.host.fleet_event("drain-timeout", node.replica_id, node.pending)
                replica.request_restart("lose", downtime_s)

        self._after(timeout_s, node, expire)

    def crash(self, node: Node) -> None:
        replica = node.replica
        if replica is None or node.state not in ("active", "draining"):
            return
        lc = self.config.lifecycle
        repair_s = self._draw(self.config.faults.mttr, node.replica_id, "mttr")
        load_s = self._draw(lc.load, node.replica_id, "load")
        node.crashes_total += 1
        replica.accepting = False
        self.host.routability_changed()
        self.host.fleet_event("crash", node.replica_id, "node fault", f"repair_s={repair_s:.1f}")
        if node.pending == "scale-down":
            replica.request_restart("lose", math.inf)
            return
        node.pending = "crash"
        node.down_load_s = load_s
        node.repair_s = repair_s
        replica.request_restart("lose", repair_s + load_s + lc.warmup_s)

    def went_down(self, node: Node, mode: str, downtime_s: float) -> None:
        """The replica's process went down (a restart, a crash or a scale-down). A
        process that stops (``drain``) hands its queue back to the router; one that
        dies (``lose``) loses it with its batch (``Replica`` hands both to the fleet's
        clients)."""
        node.epoch += 1  # a pending drain deadline is void
        if downtime_s == math.inf:
            self._set(node, "gone")
            node.gone_s = self.env.now
            if node.replica is not None and mode != "lose":
                # Scaled down: requests still queued there (a drain stops admitting)
                # are placed again, or they would wait for a replica that never returns.
                self.host.redirect(node.replica.take_waiting())
            return
        replica = node.replica
        assert replica is not None
        if node.pending == "crash":
            self._set(node, "down")
            repair_s = node.repair_s
            self._after(repair_s, node, lambda: self._set(node, "loading"))
            warm_at_s = repair_s + node.down_load_s
        else:
            self._set(node, "loading")
            warm_at_s = node.down_load_s
            # A restart's queue goes back to the router as the process stops (the
            # gateway retries requests not yet started) rather than waiting out the
            # model load.
            if mode != "lose":
                self.host.redirect(replica.take_waiting())
        self._after(warm_at_s, node, lambda: self._set(node, "warming"))
        epoch = node.epoch
        back = replica.back_up
        assert back is not None

        def up(_: Any) -> None:
            if node.epoch == epoch:
                self._set(node, "active")
                replica.accepting = True
                self.host.routability_changed()
                node.pending = ""

        assert back.callbacks is not None
        back.callbacks.append(up)

    # -- faults -------------------------------------------------------------------------------
    def _start_faults(self, node: Node) -> None:
        mtbf_s = self.config.faults.mtbf_s
        if mtbf_s is not None:
            self.env.process(self._faults(node, mtbf_s))

    def _faults(self, node: Node, mtbf_s: float) -> Any:
        rng = self._rng(node.replica_id, "mtbf")
        while node.state != "gone":
            yield self.env.timeout(float(rng.exponential(mtbf_s)))
            self.fault_draws += 1
            if self.fault_draws > bounds.MAX_FAULT_DRAWS:
                what = "crash-clock draws"
                raise bounds.count_exceeded(
                    "fleet.faults.mtbf_s", bounds.MAX_FAULT_DRAWS, what, self.env.now
                )
            self.crash(node)

    # -- scaling --------------------------------------------------------------------------------
    def apply_scale(self, decision: ScaleDecision) -> None:
        for replica_id in decision.restart:
            self.restart(replica_id, decision.cause)
        live = [n for n in self.nodes if n.state != "gone" and n.pending != "scale-down"]
        if decision.delta > 0:
            room = self.config.ceiling - len(live)
            avoidable = decision.fragmentation_failures > 0 and decision.capacity_failures == 0
            for _ in range(min(decision.delta, room)):
                self.scale_ups += 1
                self.buy(decision.cause, avoidable)
        elif decision.delta < 0:
            room = len(live) - self.config.floor
            for _ in range(min(-decision.delta, room)):
                victim = self._victim(live)
                if victim is None:
                    break
                live.remove(victim)
                self.scale_downs += 1
                self.retire(victim, decision.cause)

    def _victim(self, live: list[Node]) -> Node | None:
        """Nodes not serving yet first (newest first), then the active node with the
        fewest outstanding requests (newest on ties)."""
        pending = [n for n in live if n.state in ("provisioning", "loading", "warming")]
        if pending:
            return max(pending, key=lambda n: n.replica_id)
        active = [n for n in live if n.state == "active" and n.replica is not None]
        if not active:
            return None
        return min(active, key=lambda n: (n.replica.view.outstanding_requests, -n.replica_id))  # type: ignore[union-attr]

    def retire(self, node: Node, cause: str) -> None:
        """Scale ``node`` down: drained (or lost at the drain timeout), then gone."""
        self.host.fleet_event("scale-down", node.replica_id, cause)
        node.pending = "scale-down"
        replica = node.replica
        if node.state in ("provisioning", "loading") or replica is None or not replica.up:
            node.epoch += 1
            self._set(node, "gone")
            node.gone_s = self.env.now
            return
        replica.accepting = False
        self.host.routability_changed()
        if node.state == "warming":
            node.epoch += 1
            replica.request_restart("kill", math.inf)
            return
        self._set(node, "draining")
        drain, timeout_s = self._drain()
        if drain == "redirect":
            self.host.redirect(replica.take_waiting())
        replica.request_restart("lose" if drain == "kill" else "drain", math.inf)
        if drain != "kill":
            self._drain_deadline(node, timeout_s, math.inf)
