"""The routing contract: at each request's arrival the fleet asks a router which replica
takes it; the replica then takes it with ``Replica.submit``.

``Router.choose(request, views)`` returns the index into ``views`` of the chosen replica,
or ``None`` to refuse -- and a router refuses only when no view is ``up``. It reads views
through :class:`RouterView` (``sim.engine.view.ReplicaView`` satisfies it; tests pass
plain objects) and never writes to them. A router may keep its own state: a cursor, an
RNG seeded from its config, a hash ring, what it has sent where.

Ties are broken by the lowest index, always: every ``min`` below sorts by
``(signal, index)``, so the same views give the same answer. Reading a load signal of a
real view brings that replica up to now (``ReplicaView``'s docstring): a router reads a
signal only of the views it considers, and only the signals it needs.
"""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from mypy_extensions import mypyc_attr


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a router knows of one request at its arrival."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    num_seqs: int = 1
    session_id: int | None = None
    prefix_hashes: tuple[int, ...] = ()

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens of one sequence (what length-aware pools compare)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def need_tokens(self) -> int:
        """KV slots the request holds at its end if every sequence keeps its own copy:
        ``(prompt + output) x num_seqs`` (an upper bound where a prompt is shared)."""
        return self.total_tokens * self.num_seqs


NO_REQUEST = RouteRequest(-1, 0.0, 0, 0)
"""What a router with ``reads_request = False`` is passed (it never reads it)."""


class RouterView(Protocol):
    """The replica fields routers read (read-only)."""

    @property
    def replica_id(self) -> int: ...
    @property
    def up(self) -> bool: ...
    @property
    def restarts(self) -> int: ...
    @property
    def waiting_requests(self) -> int: ...
    @property
    def outstanding_requests(self) -> int: ...
    @property
    def in_flight_requests(self) -> int: ...
    @property
    def largest_free_extent_tokens(self) -> int: ...
    @property
    def kv_usage(self) -> float: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class Router:
    """A routing policy. Subclasses implement :meth:`choose` (see the module docstring).
    Compiled with the engine (the routers of ``load`` and ``simple`` too); a router
    defined elsewhere subclasses it as usual."""

    name: ClassVar[str] = "custom"
    """What a run's summary calls this router when it replaces the scenario's (a router
    built from a scenario's config is named by its ``kind``)."""

    reads_request = True
    """Whether :meth:`choose` reads its ``request`` at all. A router that does not sets
    it False, and the fleet then passes :data:`NO_REQUEST` instead of building one."""

    reads_memory = True
    """Whether :meth:`choose` reads a view's memory signals (``free_tokens``,
    ``largest_free_extent_tokens``, ``kv_usage``). The fleet brings replicas to the
    decision's instant before such a router reads them; a router that reads only request
    counts, identity or lifecycle fields sets it False and costs no such step."""

    views_only = False
    """Whether :meth:`choose` is a function of the views' signals alone (it reads no
    request, ``reads_request = False``, and keeps no state of its own): given views
    whose signals have not changed it returns the same choice. The fleet then reuses
    its last choice while its views cannot have changed (stale views between two
    refreshes, no node's routability changed) instead of asking again: a router that
    sets it True is not called once per request."""

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        raise NotImplementedError


def up_indices(views: Sequence[RouterView]) -> list[int]:
    """Indices of the views that are up, in order."""
    return [i for i, v in enumerate(views) if v.up]


def least(
    views: Sequence[RouterView], indices: Sequence[int], signal: Callable[[RouterView], float]
) -> int | None:
    """The index among ``indices`` with the smallest ``signal``, lowest index on ties;
    None when ``indices`` is empty."""
    if not indices:
        return None
    return min([(signal(views[i]), i) for i in indices])[1]


def outstanding(view: RouterView) -> int:
    return view.outstanding_requests


def in_flight(view: RouterView) -> int:
    return view.in_flight_requests
