"""The P/D router of a disaggregated fleet (Splitwise / DistServe / llm-d's P/D
scheduling): each request is routed twice, to a prefill replica at its arrival
(:meth:`PrefillDecode.choose`, the fleet's one routing call) and to a decode replica when
its prefill ends (:meth:`PrefillDecode.choose_decode`), where its KV will be sent.

The router knows which replicas are which (:meth:`PrefillDecode.assign`, by replica id:
the fleet's pools' roles) and keeps what it has promised each decode replica: the KV
tokens of hand-offs to it that it has not reserved in its own allocator yet
(:meth:`reserve` at the hand-off, :meth:`release` once the replica has reserved or
refused them, at its next step boundary). A decode replica *fits* a request when its
largest free extent, less what is promised to it, holds the request's KV and one more
token per sequence (the first decode step's growth). None fits: the router refuses
(``None``) and the fleet applies the refusal's fate (``fleet.kv_transfer.on_refusal``).

In a colocated fleet (no roles assigned) it is least outstanding over every replica.

Prefill choice: least outstanding requests among the up prefill replicas. Decode
choice (``decode``): ``least_outstanding`` among those that fit, or ``best_fit``: the
one whose free extent left after the KV is smallest (the fragmentation-aware choice).
Ties: the lowest index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from policies.routing.base import Router, RouteRequest, RouterView

DecodeChoice = Literal["least_outstanding", "best_fit"]


class PrefillDecode(Router):
    """See the module docstring."""

    reads_memory = True  # the decode choice reads free extents
    reads_request = False  # the prefill choice reads loads only

    def __init__(self, decode: DecodeChoice = "least_outstanding") -> None:
        self.decode = decode
        self._prefill: frozenset[int] | None = None
        """The prefill replicas' ids (None: not assigned, every replica: a colocated
        fleet, where the router is least outstanding)."""
        self._decode: frozenset[int] = frozenset()
        self.promised_tokens: dict[int, int] = {}
        """Decode replica id -> KV tokens handed to it and not reserved there yet."""

    def assign(self, prefill_ids: Sequence[int], decode_ids: Sequence[int]) -> None:
        """Which replica ids prefill and which decode (the fleet's pools' roles)."""
        self._prefill = frozenset(prefill_ids)
        self._decode = frozenset(decode_ids)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        """The prefill replica: least outstanding among the up prefill replicas (among
        every up replica while no roles are assigned)."""
        prefill = self._prefill
        loads = [
            (v.outstanding_requests, i)
            for i, v in enumerate(views)
            if v.up and (prefill is None or v.replica_id in prefill)
        ]
        return min(loads)[1] if loads else None

    def choose_decode(self, need_tokens: int, views: Sequence[RouterView]) -> int | None:
        """The decode replica that takes ``need_tokens`` of KV (None: none fits)."""
        decode, promised = self._decode, self.promised_tokens
        fits: list[tuple[int, int]] = []
        for i, v in enumerate(views):
            if v.replica_id not in decode or not v.up:
                continue
            room = v.largest_free_extent_tokens - promised.get(v.replica_id, 0)
            if room >= need_tokens:
                key = room - need_tokens if self.decode == "best_fit" else v.outstanding_requests
                fits.append((key, i))
        return min(fits)[1] if fits else None

    def reserve(self, replica_id: int, tokens: int) -> None:
        """``tokens`` of KV are handed to ``replica_id`` (reserved there at its next step
        boundary)."""
        self.promised_tokens[replica_id] = self.promised_tokens.get(replica_id, 0) + tokens

    def release(self, replica_id: int, tokens: int) -> None:
        """``replica_id`` has reserved (or refused, or dropped) ``tokens`` handed to it."""
        left = self.promised_tokens.get(replica_id, 0) - tokens
        assert left >= 0, "released more KV than was promised"
        if left:
            self.promised_tokens[replica_id] = left
        else:
            del self.promised_tokens[replica_id]
