"""Disaggregated prefill and decode (Splitwise, DistServe, llm-d's P/D): a fleet whose pools
are prefill pools and decode pools (``fleet.pools[i].role``). A request goes through:

1. **Prefill.** At its arrival the P/D router (``policies.routing.pd``) picks a prefill
   replica, which runs the request as a *prefill phase*: a group of its own with one
   output token (the prefill and the first token, as vLLM's disaggregated-serving proxy
   ``toy_proxy_server.py`` and llm-d's routing sidecar send the prefill instance the
   request with ``max_tokens = 1``). The request's ``first_token_s`` is that token's
   (where the client's stream comes from the decode instance, as in vLLM's proxy, its
   first token also waits for the transfer: fragsim's TTFT is then a lower bound).
2. **Hand-off.** The prefill phase's end is a decision boundary of the prefill replica:
   a fast fleet's replica hands it back (``sim.engine.driven.Decision.handoffs``, applied in
   ``Fleet.apply``); an exact fleet's outlet hands it over at once. At that instant
   (a SimPy event) the router picks a decode replica that fits the prompt's KV and one
   token per sequence and hands it the KV (``Replica.receive_kv``), promising that room
   in its own accounting (``PrefillDecode.reserve``) until the replica has answered
   (:meth:`Disagg.settle`); the prefill replica keeps the prompt's blocks for one
   transfer's time (its group's retention), as vLLM's ``NixlConnector`` keeps a
   prefill's blocks until the decode side has read them.
3. **Reservation and transfer** (``sim.engine.inbound``). At its next step boundary the
   decode replica allocates the KV's blocks (the prompt, one slot per sequence) in its
   own allocator -- they are its memory and its fragmentation from then on -- and the
   transfer starts: ``kv_bytes = kv_bytes_per_token x prompt_tokens`` (a replica's bytes
   per token: every layer, every tensor-parallel GPU; parallel samples share the
   prompt) over the link, ``latency_s + 8 kv_bytes / (bandwidth_gbps 1e9)`` seconds. A
   reservation the allocator refuses is an allocation failure there and the hand-off's
   refusal (handed back like a prefill's end). A request whose prefill's token is its
   last (one output token) ends on the prefill replica, with no transfer.
4. **Decode.** At the decode replica's first step boundary at or after the transfer's
   end the request joins its batch and decodes in that step (a swap-in with no stall)
   and its remaining tokens after; its record (``replica``) is the decode replica's.

A refusal (no decode replica fits when the hand-off is tried, the chosen one's
allocator refuses the reservation, or it went down before the KV landed) has a *fate* (``fleet.kv_transfer.on_refusal``): ``retry``
the hand-off after ``retry_delay_s``, ``recompute`` (routed to a prefill replica again,
its KV dropped) or ``fail`` (the request is refused: ``rejected-fragmentation`` when the
decode replicas had the free memory but not in one extent, else ``rejected-capacity``;
the client's own retries apply). After ``max_refusals`` refusals every fate is ``fail``.
The cause (``fragmentation``, ``capacity``, ``no-decode-replica``, ``decode-down``) is
recorded per request and counted in the summary; each refusal is an event row
(``kv-transfer-refused``). A decode replica that goes down (:meth:`Disagg.went_down`)
refuses the transfers it had reserved (``decode-down``); a hand-off it had not reserved
yet is handed off again at that instant.

What the model leaves out (docs/disagg.md, "Limits"): the prefill replica holds the KV
for one transfer's time from the prefill's end, not until the decode side has read it
(a reservation waits for the decode replica's step boundary, a refused hand-off's
retries for their delay).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.routing.pd import PrefillDecode
from sim.engine.batch import Group, Status
from sim.engine.driven import Driven
from sim.engine.inbound import InboundKV
from sim.results.frames import RECORD_FIELDS
from sim.scenario.errors import ScenarioError
from sim.scenario.fleet import FleetConfig, KVTransferConfig
from sim.simulate.parts import Parts

if TYPE_CHECKING:
    from sim.engine.replica import Replica
    from sim.fleet.fleet import Fleet

PHASE_FIELDS = tuple(
    name
    for name, _ in RECORD_FIELDS
    if name not in ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "num_seqs")
)
"""A request's record fields its prefill phase writes (what a prefill that ended the
request leaves in its record)."""
_PROGRESS = frozenset({"generated_tokens", "status", "finish_s"})
"""Of those, the ones of the attempt in progress (a phase starts them afresh)."""


@dataclass(slots=True)
class Handoff:
    """One request's way through the P/D fleet (its per-request output columns)."""

    prefill_replica: int = -1
    """The prefill replica its last prefill ran on (-1: none ended)."""
    decode_replica: int = -1
    """The decode replica its KV was last sent to (-1: none)."""
    transfer_s: float = math.nan
    """Its last transfer's time, seconds."""
    kv_transfer_bytes: int = 0
    """KV bytes sent, every transfer together."""
    transfer_refusals: int = 0
    """Hand-offs refused."""
    refusal_cause: str = ""
    """The last refusal's cause."""
    refusal_fate: str = ""
    """What the last refusal did: ``retry``, ``recompute`` or ``fail``."""
    refused_s: float = math.nan
    """When the last refusal was (not an output column: what its diagnosis reads)."""


def linked_parts(config: FleetConfig, parts: Sequence[Parts]) -> list[Parts]:
    """The pools' parts with each decode pool's swap-in stall removed
    (``swap_s_per_token`` 0): a request joins a decode replica's batch with its KV placed
    whole (``sim.engine.inbound``), its bytes came over the link (their time is the
    transfer's), and no path may charge them a swap-in. Swap preemption is refused in a
    disaggregated fleet, so nothing else reads it."""
    out = list(parts)
    for i, pool in enumerate(config.pools):
        if pool.role == "decode":
            part = out[i]
            out[i] = dataclasses.replace(
                part, scheduler=dataclasses.replace(part.scheduler, swap_s_per_token=0.0)
            )
    return out


class Disagg:
    """A disaggregated fleet's hand-offs (the module docstring), owned by its
    :class:`~sim.fleet.fleet.Fleet` (built before its nodes)."""

    def __init__(self, fleet: Fleet, config: FleetConfig, parts: Sequence[Parts]) -> None:
        link = config.kv_transfer
        assert link is not None, "a disaggregated fleet has a KV link"
        self.fleet = fleet
        self.link: KVTransferConfig = link
        self.roles = [p.role for p in config.pools]
        per_token = {p.spec.kv_bytes_per_token for p in parts}
        if len(per_token) != 1:
            raise ScenarioError(
                "field fleet.pools: a disaggregated fleet's pools must hold the same KV "
                f"(one model): KV bytes per token {sorted(per_token)} differ by pool"
            )
        self.kv_bytes_per_token = per_token.pop()
        self.phases: dict[int, Group] = {}
        """Request id -> its prefill phase in flight (queued, running, or held for a retry)."""
        self.requests: dict[int, Group] = {}
        """Request id -> the request itself while its prefill phase is in flight."""
        self.handoffs: dict[int, Handoff] = {}
        """Request id -> its way through the fleet (every request that reached a prefill)."""
        self.inbound: dict[int, InboundKV] = {}
        """Request id -> its KV handed to a decode replica, until it joins the batch there
        (or is refused, or dropped)."""
        self._unsettled: list[tuple[InboundKV, int]] = []
        """Hand-offs the decode replica has not answered yet (as :meth:`settle` saw them),
        with the KV tokens the router promised for each."""
        self.transfers: list[InboundKV] = []
        """Every transfer started (reserved), in the order :meth:`settle` saw them."""
        self.kv_bytes_total = 0
        self.refusals: Counter[str] = Counter()
        """Refusals by cause."""
        self.fates: Counter[str] = Counter()
        """Refusals by fate."""

    @property
    def router(self) -> PrefillDecode:
        router = self.fleet.router
        if not isinstance(router, PrefillDecode):
            raise ScenarioError(
                "a disaggregated fleet routes with router kind pd (a replayed or custom "
                f"router cannot place its hand-offs: got {type(router).__name__})"
            )
        return router

    def assign_roles(self) -> None:
        """Tell the router which replicas prefill and which decode (after the fleet has
        made its initial nodes)."""
        nodes = self.fleet.nodes
        self.router.assign(
            [n.replica_id for n in nodes if self.roles[n.pool_index] == "prefill"],
            [n.replica_id for n in nodes if self.roles[n.pool_index] == "decode"],
        )

    def is_decode(self, replica_id: int) -> bool:
        return self.roles[self.fleet.nodes[replica_id].pool_index] == "decode"

    # -- prefill ------------------------------------------------------------------------
    def prefill_phase(self, g: Group) -> Group:
        """What goes to a prefill replica for ``g``: its prefill phase (made now for a
        request, the same for a phase placed again)."""
        rid = g.request_id
        if self.phases.get(rid) is g:
            return g
        # The request starts (again) from its prompt: nothing of a landed attempt stays.
        g.swapped = False
        g.seq_ids = []
        g.held_tokens = g.generated_tokens = g.prefill_left_tokens = 0
        phase = Group(rid, g.arrival_s, g.prompt_tokens, 1, g.num_seqs, g.prefix_hashes)
        for name in PHASE_FIELDS:  # what earlier attempts counted (a recompute's)
            if name not in _PROGRESS:
                setattr(phase, name, getattr(g, name))
        phase.retain_s = self.link.transfer_s(self._kv_bytes(g))  # held for its transfer
        self.phases[rid] = phase
        self.requests[rid] = g
        self.handoffs.setdefault(rid, Handoff())
        return phase

    def on_done(self, replica: Replica, group: Group, driven: Driven | None) -> bool:
        """A group ended on ``replica`` (its outlet's report). A prefill phase's ``ok``
        end is a hand-off (handed back through ``driven``'s decision in fast mode; at
        once in exact mode); any other end of a phase ends its request with the phase's
        record. A refused reservation on a decode replica (``rejected-*``) is handed back
        the same way, for its fate; the end of a request that had joined a decode
        replica's batch is its own. True: handled here (the record is not ``group``'s)."""
        rid = group.request_id
        kv = self.inbound.get(rid)
        if kv is not None and kv.group is group:
            if not kv.refused:  # it had joined the batch: its own end
                del self.inbound[rid]
                return False
            if driven is None:
                self.handed_off(group.finish_s, group)
            else:
                driven.hand_off(group, group.finish_s)
            return True
        if self.phases.get(rid) is not group:
            return False
        if group.status == "ok":
            self.handoffs[group.request_id].prefill_replica = replica.replica_id
        if group.status != "ok" or self._prefill_ends(group, replica):
            self.fleet.records.end(self.ending(group), replica.replica_id)
            return True
        if driven is None:
            self.handed_off(group.finish_s, group)
        else:
            driven.hand_off(group, group.finish_s)
        return True

    def _prefill_ends(self, phase: Group, replica: Replica) -> bool:
        """Whether the prefill's token is the request's last (it asks for at most one, or
        its prompt leaves one token below the maximum sequence length): it ends on the
        prefill replica, with no transfer."""
        request = self.requests[phase.request_id]
        left = replica.sched.config.max_seq_tokens - request.prompt_tokens
        return min(request.output_tokens, left) <= 1

    def ending(self, g: Group) -> Group:
        """The request whose end ``g`` is: ``g``'s request with the phase's record when
        ``g`` is a prefill phase, else ``g`` itself."""
        rid = g.request_id
        if self.phases.get(rid) is not g:
            return g
        del self.phases[rid]
        request = self.requests.pop(rid)
        for name in PHASE_FIELDS:
            setattr(request, name, getattr(g, name))
        return request

    def handed_off(self, done_s: float, phase: Group) -> None:
        """``phase`` ended its prefill at ``done_s`` (at or after the fleet's instant):
        its hand-off is tried at that instant (:meth:`Fleet.at`). Also a decode replica's
        refused reservation of a request's KV (``phase`` is then the request): its fate
        applies at that instant."""
        self.fleet.at(done_s, lambda: self._handed(phase))

    def _handed(self, g: Group) -> None:
        """What a decision handed back at this instant: a prefill phase's end, or a
        decode replica's refused reservation."""
        if self.phases.get(g.request_id) is g:
            self._start(g)
        else:
            self._reservation_refused(g)

    def _start(self, phase: Group) -> None:
        rid = phase.request_id
        del self.phases[rid]
        g = self.requests.pop(rid)
        for name in PHASE_FIELDS:
            if name not in _PROGRESS or name == "generated_tokens":
                setattr(g, name, getattr(phase, name))
        self._try_decode(g)

    # -- transfer -----------------------------------------------------------------------
    def _kv_bytes(self, g: Group) -> int:
        return self.kv_bytes_per_token * g.prompt_tokens

    def need_tokens(self, g: Group) -> int:
        """KV slots ``g`` needs on its decode replica: the prompt (shared by its
        sequences) and each sequence's first decode step."""
        return g.prompt_tokens + g.num_seqs

    def _try_decode(self, g: Group) -> None:
        """Pick a decode replica for ``g`` now and hand it its KV (reserved there at its
        next step boundary), or refuse."""
        fleet = self.fleet
        self.settle()
        need = self.need_tokens(g)
        router = self.router
        views = fleet.views.current(router.reads_memory)
        choice = router.choose_decode(need, views)
        if choice is None:
            self._refused(g, self._cause(need))
            return
        decode_id = views[choice].replica_id
        replica = fleet.nodes[decode_id].replica
        assert replica is not None, "router chose a decode replica that is not up"
        router.reserve(decode_id, need)  # until the replica has answered
        g.swapped = False
        g.seq_ids = []
        g.prefill_left_tokens = 0
        g.held_tokens = g.prompt_tokens + g.generated_tokens - 1
        g.retain_s = 0.0
        kv = replica.receive_kv(g, self.link.transfer_s(self._kv_bytes(g)))
        self.inbound[g.request_id] = kv
        self._unsettled.append((kv, need))

    def settle(self) -> None:
        """Fold in what decode replicas answered since (reservations made, refused or
        dropped): the router's promises released, reserved transfers counted and
        recorded on their requests (their last transfer, every transfer's bytes)."""
        keep: list[tuple[InboundKV, int]] = []
        router = self.router
        for kv, need in self._unsettled:
            if not kv.settled:
                keep.append((kv, need))
                continue
            router.release(kv.replica_id, need)
            if math.isnan(kv.reserved_s):
                continue
            kv_bytes = self._kv_bytes(kv.group)
            record = self.handoffs[kv.group.request_id]
            record.decode_replica = kv.replica_id
            record.transfer_s = kv.transfer_s
            record.kv_transfer_bytes += kv_bytes
            self.transfers.append(kv)
            self.kv_bytes_total += kv_bytes
        self._unsettled = keep

    @property
    def transfers_started(self) -> int:
        """Transfers whose blocks a decode replica reserved (after :meth:`settle`)."""
        return len(self.transfers)

    @property
    def transfers_landed(self) -> int:
        """Transfers whose request joined its decode replica's batch."""
        return sum(1 for kv in self.transfers if not math.isnan(kv.joined_s))

    @property
    def transfer_times_s(self) -> list[float]:
        return [kv.transfer_s for kv in self.transfers]

    def _reservation_refused(self, g: Group) -> None:
        """``g``'s decode replica refused to reserve its KV (at ``g.finish_s``, now): the
        refusal's fate applies (the request goes on: not ended)."""
        kv = self.inbound.pop(g.request_id)
        assert kv.refused and kv.group is g
        cause = g.status.removeprefix("rejected-")
        g.status = "unfinished"
        g.finish_s = math.nan
        g.seq_ids = []
        self._refused(g, cause)

    def went_down(self, replica: Replica) -> None:
        """``replica`` goes down now (before its allocator goes): the KV inbound to it
        that has not joined its batch is lost with it. A transfer that had started is
        refused (``decode-down``); one still waiting for its reservation is handed off
        again at this instant (nothing was refused)."""
        for kv in replica.take_inbound():
            g = kv.group
            del self.inbound[g.request_id]
            g.seq_ids = []
            if math.isnan(kv.reserved_s):
                self._hand_off_again(g)
            else:
                self._refused(g, "decode-down")

    def _hand_off_again(self, g: Group) -> None:
        """``g``'s hand-off is tried again at this instant (a SimPy event: after the
        replica that was chosen has gone down)."""
        again = self.fleet.env.timeout(0.0)
        assert again.callbacks is not None
        again.callbacks.append(lambda _: self._try_decode(g))

    def _cause(self, need: int) -> str:
        """Why no decode replica fits ``need`` tokens now: none is up, one has that much
        free memory but not in one extent (``fragmentation``), or none has it."""
        router = self.router
        ups = [
            n.replica
            for n in self.fleet.nodes
            if n.replica is not None and n.routable and self.roles[n.pool_index] == "decode"
        ]
        if not ups:
            return "no-decode-replica"
        for replica in ups:
            promised = router.promised_tokens.get(replica.replica_id, 0)
            if replica.view.free_tokens - promised >= need:
                return "fragmentation"
        return "capacity"

    def _refused(self, g: Group, cause: str) -> None:
        """A hand-off of ``g`` was refused for ``cause``: its fate applies now."""
        fleet = self.fleet
        rid = g.request_id
        record = self.handoffs[rid]
        record.transfer_refusals += 1
        fate = self.link.on_refusal
        if record.transfer_refusals > self.link.max_refusals:
            fate = "fail"
        record.refusal_cause = cause
        record.refusal_fate = fate
        record.refused_s = fleet.now_s
        self.refusals[cause] += 1
        self.fates[fate] += 1
        fleet.fleet_event("kv-transfer-refused", -1, cause, detail=fate, request_id=rid)
        if fate == "retry":
            later = fleet.env.timeout(float(self.link.retry_delay_s))
            assert later.callbacks is not None
            later.callbacks.append(lambda _: self._try_decode(g))
            return
        if fate == "recompute":
            fleet.route(g, math.inf, "pd-recompute")
            return
        status: Status = (
            "rejected-fragmentation" if cause == "fragmentation" else "rejected-capacity"
        )
        fleet.client_error(g, status)
