"""The allocator contract: one replica's KV pool, in token slots.

The scheduler asks, the allocator answers. Nothing outside ``policies/allocators``
reads a free list. "Does not fit" is a return value (``None`` / ``False``); a broken
invariant (double free, unknown request, negative refcount) raises.

Units are token slots of one replica's pool; bytes come from ``PoolSpec.kv_bytes_per_token``.

Vocabulary used in every policy:

* *held* tokens: slots holding a prompt or generated token of a live request.
* *reserved* slots: slots a live request owns (held + reserved-but-unused). A paged
  sequence's partly filled last block and a static max-length reservation are reserved.
* *free* slots: owned by no live request. Prefix-cache blocks whose refcount fell to
  zero are free (and counted again in ``cached_free_tokens``): they can be evicted.
* *extent*: a run of free slots one request can use as a whole. For paged policies any
  free block serves any request, so all free memory is one usable extent.

Invariant every policy keeps, checked by the property tests after every operation::

    used_tokens + reserved_unused_tokens + free_tokens == capacity_tokens
    largest_free_extent_tokens <= free_tokens

Engine seam (fast mode): between allocator decisions the engine grows sequences in
closed form. ``headroom_tokens`` says how far a sequence can grow touching only its own
reservation; a *pooled* policy (``policies.allocators.pooled.PooledAllocator``) draws
further growth as interchangeable blocks from a shared pool, so the engine can also
precompute how many steps the pool covers and draw them in bulk. Growth that stays
inside these bounds gives the same state whatever order the ``extend`` calls come in.

A new policy is one module (a subclass of :class:`Allocator`, or of ``PooledAllocator``
for block-pooled growth), its pydantic config in ``config.py`` and one registry line.
Diagnostics that only read the contract live in ``diagnostics.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Container, Sequence

from mypy_extensions import mypyc_attr

from policies.allocators.values import Allocation as Allocation
from policies.allocators.values import AllocStats as AllocStats
from policies.allocators.values import Failure as Failure
from policies.allocators.values import FailureCause as FailureCause
from policies.allocators.values import KvWaste as KvWaste
from policies.allocators.values import LayerKindSpec as LayerKindSpec
from policies.allocators.values import PoolSpec as PoolSpec
from policies.allocators.values import blocks_for as blocks_for
from policies.allocators.values import classify as classify


@mypyc_attr(allow_interpreted_subclasses=True)
class Allocator:
    """Base of every KV-cache allocation policy. See the module docstring.

    Not an ``abc.ABC``: the compiled build's classes would share one ABC instance-check
    cache (``isinstance`` answers wrong across sibling subclasses). The abstract methods
    below raise NotImplementedError; mypy still refuses to instantiate a subclass that
    leaves one out."""

    #: True when a decision (allocate / extend past the headroom) depends on how many
    #: tokens *other* live requests hold (compaction moves only held tokens). The engine
    #: defers growth inside a request's headroom and applies it before such decisions.
    decisions_read_held: bool = False

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self._last_failure: Failure | None = None

    # -- the operations -------------------------------------------------------------
    @abstractmethod
    def allocate(
        self,
        request_id: int,
        tokens: int,
        *,
        reserve_tokens: int | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> Allocation | None:
        """Admit ``request_id`` holding ``tokens`` tokens (its prompt).

        ``reserve_tokens`` is the total length (prompt + output) the caller expects the
        request to reach, where it knows it; policies that reserve ahead use it (static
        oracle / power-of-two) and others ignore it. ``prefix_hashes`` are chained
        prefix-block hashes for prefix caching; policies without a cache ignore them.
        Returns None when the request does not fit; the state is then unchanged and
        ``last_failure()`` says why. Raises if ``request_id`` is already live.
        """
        raise NotImplementedError

    @abstractmethod
    def extend(self, request_id: int, tokens: int) -> bool:
        """Grow a live request by ``tokens`` held tokens (decoding). False when the
        growth cannot be placed; the state is then unchanged."""
        raise NotImplementedError

    @abstractmethod
    def fork(self, parent_id: int, child_id: int) -> bool:
        """Make ``child_id`` a copy of live ``parent_id`` (parallel sampling, beam
        search). Sharing policies share slots (copy-on-write); others copy. False when
        it cannot be placed."""
        raise NotImplementedError

    @abstractmethod
    def free(self, request_id: int) -> None:
        """Release everything ``request_id`` owns. Raises if it is not live."""
        raise NotImplementedError

    @abstractmethod
    def stats(self) -> AllocStats:
        """A snapshot; cheap enough to call after every operation."""
        raise NotImplementedError

    @abstractmethod
    def held_tokens(self, request_id: int) -> int:
        """Tokens the live request holds."""
        raise NotImplementedError

    @abstractmethod
    def reserved_tokens(self, request_id: int) -> int:
        """Slots the live request owns (held + reserved-but-unused; shared slots count
        for every owner)."""
        raise NotImplementedError

    @abstractmethod
    def free_extent_sizes(self) -> list[int]:
        """Sizes of the free extents, in tokens (for histograms; may be O(n))."""
        raise NotImplementedError

    # -- engine seams -----------------------------------------------------------------
    def headroom_tokens(self, request_id: int) -> int:
        """Tokens the request can still add inside what it already owns, with no
        decision by the allocator (and so in any order with other requests)."""
        return self.reserved_tokens(request_id) - self.held_tokens(request_id)

    def caches_prefixes(self) -> bool:
        """Does an admission look the prompt up in a prefix cache (vLLM then counts the
        lookup, ``sim.engine.admission``)? Default: no."""
        return False

    def prefix_hit_tokens(
        self, tokens: int, prefix_hashes: Sequence[int] = (), owner: int = -1
    ) -> int:
        """Leading tokens of a request's first ``tokens`` that ``allocate_chunk`` would
        find in the prefix cache now (read-only); ``owner``: the request's id, for
        blocks of its own generated tokens. Default: none (no prefix cache)."""
        return 0

    def allocate_chunk(
        self,
        request_id: int,
        tokens: int,
        prompt_tokens: int,
        prefix_hashes: Sequence[int] = (),
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> Allocation | None:
        """``allocate`` the first ``tokens`` of a ``prompt_tokens`` prompt placed chunk
        by chunk (later chunks ``extend`` it), taking at most ``max_hit_tokens`` (-1:
        any) from the prefix cache. Default: ``allocate``; a prefix cache also caches
        the blocks later chunks fill."""
        return self.allocate(request_id, tokens, prefix_hashes=prefix_hashes)

    def admission_fits(
        self,
        tokens: int,
        prefix_hashes: Sequence[int] = (),
        keep_free_tokens: int = 0,
        owner: int = -1,
        max_hit_tokens: int = -1,
    ) -> bool:
        """Would ``allocate(tokens, prefix_hashes=...)`` fit now and still leave
        ``keep_free_tokens`` free (vLLM's watermark, its whole-prompt admission gate)?
        Read-only; False records the refusal (``last_failure``). Default: free memory
        covers ``tokens + keep_free_tokens`` (a policy that knows its placement says
        more precisely). ``owner`` and ``max_hit_tokens`` as for ``allocate_chunk``."""
        need = tokens + keep_free_tokens
        if need <= self.free_and_largest_tokens()[0]:
            return True
        self._refuse(need)
        return False

    def layout_notes(self) -> tuple[str, ...]:
        """How a KV manager laid the memory out (groups, padding, pools), one line each;
        empty for a single-pool policy."""
        return ()

    def kv_waste(self) -> KvWaste | None:
        """A KV manager's memory by cause (``policies.allocators.kv_groups``); None for
        a single-pool policy, whose waste the four-way breakdown already says."""
        return None

    def free_and_largest_tokens(self) -> tuple[int, int]:
        """``(stats().free_tokens, stats().largest_free_extent_tokens)``: what decides
        whether a refused request may fit now (policies override it to skip a snapshot)."""
        s = self.stats()
        return s.free_tokens, s.largest_free_extent_tokens

    def copied_tokens_total(self) -> int:
        """``stats().copied_tokens_total + stats().moved_tokens_total`` (the engine reads
        it around every step to charge copy time; policies override it to skip building
        a whole snapshot)."""
        s = self.stats()
        return s.copied_tokens_total + s.moved_tokens_total

    # -- argument checks shared by the policies ------------------------------------------
    @staticmethod
    def _check_new(request_id: int, live: Container[int], tokens: int = 0) -> None:
        """Raise unless ``request_id`` is new and ``tokens`` is not negative."""
        if request_id in live:
            raise ValueError(f"request {request_id} is already live")
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")

    # -- diagnosis --------------------------------------------------------------------
    def last_failure(self) -> Failure | None:
        """Why the most recent refused operation was refused (None if none was)."""
        return self._last_failure

    def _refuse(self, need_tokens: int) -> None:
        """Record a refusal of a ``need_tokens`` placement; policies call this before
        returning None/False."""
        s = self.stats()
        self._last_failure = Failure(
            need_tokens=need_tokens,
            free_tokens=s.free_tokens,
            largest_free_extent_tokens=s.largest_free_extent_tokens,
            cause=classify(need_tokens, s.free_tokens, s.largest_free_extent_tokens),
        )
