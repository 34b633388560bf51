"""Decode ticks: the running batch's decoding groups advanced by one global counter.

Every decoding group of a continuous batch decodes in every step, so instead of adding
one to each group's held and generated tokens per step the scheduler keeps two global
counters — ``tick`` (steps begun: every member grew one slot) and ``done`` (steps ended:
every member emitted one token) — and each registered group stores its *bases*::

    held_tokens      = group.held_base + tick
    generated_tokens = group.generated_base  + done

A step that needs no decision then costs O(1) in the batch size, and a run of ``m`` such
steps (fast mode) is ``tick += m; done += m``. Decisions come from two heaps:

* finishes: the ``done`` value at which a group has emitted its last token;
* growth decisions: the ``tick`` at which a group's growth first leaves the room its
  allocator already covers (``limit_tokens``), for policies whose growth is a decision.

Pooled growth (paged blocks, vAttention pages) needs no decision while free blocks last:
a member whose growth is pooled (``Allocator.growth_is_pooled``) holds exactly
``ceil(held / B)`` blocks, so all pooled members together hold::

    H(T) = sum_i ceil((held_base_i + T) / B) = Q + n * (T // B) + #{i : r_i >= B - T % B}

with ``q_i, r_i = divmod(held_base_i + B - 1, B)`` and ``Q = sum q_i`` — O(B) from a
histogram of the ``r_i``. The scheduler draws ``H(T) - reserved_blocks`` blocks into the
allocator's growth reservoir before each step (or run of steps) and each sequence takes
its own blocks from there when it is next synced (``Allocator.extend_reserved``): the
allocator sees the same draws, in the same order relative to every free and admission,
as one ``extend`` per block boundary would have made.

``sim.engine.growth`` decides when groups join and leave (a group leaves with its fields
materialised and its pooled growth taken from the reservoir) and handles a step whose
growth needs a decision; this module keeps the books and talks to the allocator only
for growth that needs none.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Literal

from policies.allocators.pooled import PooledAllocator, as_pooled
from sim.engine.batch import admission_order

if TYPE_CHECKING:
    from policies.allocators.base import Allocator
    from sim.engine.batch import Group

_REGISTRATIONS = itertools.count(1)
"""Registration numbers (``Group.tick_id``), unique across every ``DecodeTicks`` of the
process: a heap entry left behind by a group that moved to another replica of a fleet
must not match the group's registration there (heap entries are dropped lazily, by
this number)."""

TickGrowth = Literal["grown", "short"]
"""What ``DecodeTicks.try_grow`` found: the members grew (their pooled blocks drawn), or
the pool cannot cover the pooled growth (nothing changed)."""


def sync_deferred(allocator: Allocator, g: Group) -> int:
    """Tell the allocator of a group's growth deferred inside its sequences' headroom
    (no decision, no change to free memory); returns the tokens told (all sequences)."""
    pending = g.held_tokens - g.synced_tokens
    if not pending:
        return 0
    for sid in g.seq_ids:
        ok = allocator.extend(sid, pending)
        assert ok, "growth inside the headroom was refused"
    g.synced_tokens = g.held_tokens
    return pending * len(g.seq_ids)


class DecodeTicks:
    """The books of registered (ticking) decoding groups. See the module docstring."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self.pool: PooledAllocator | None = as_pooled(allocator)
        """The allocator as a pooled policy (None: no pooled growth)."""
        block_tokens = None if self.pool is None else self.pool.pool_block_tokens
        self.tick = 0
        """Steps begun (every member's held tokens grew by one per step)."""
        self.done = 0
        """Steps ended (every member's generated tokens grew by one per step)."""
        self.members = 0
        self.seqs = 0
        """Sequences of the members (a group of n samples or beams counts n)."""
        self.held_base_sum = 0
        """Sum of members' held bases, per sequence: they hold ``held_base_sum + seqs *
        tick`` tokens."""
        self.synced_sum = 0
        """Sum of members' ``synced_tokens``, per sequence."""
        self.finishes: list[tuple[int, int, int, Group]] = []
        """(done value of the last token, admission order, registration, group)."""
        self.decisions: list[tuple[int, int, int, Group]] = []
        """(tick whose growth needs the allocator, admission order, registration, group)."""
        self.block_tokens = block_tokens
        self.pooled = 0
        """Pooled member sequences."""
        self._q_sum = 0
        self._r_hist = [0] * (block_tokens or 1)
        self.reserved_blocks = 0
        """``H`` up to which blocks have been drawn (members' own blocks + the reservoir)."""

    # -- membership -------------------------------------------------------------------
    def join(self, g: Group) -> None:
        """A decoding group (fields current, ``tick == done``) joins. A multi-sequence
        group's growth limit is its tightest sequence's (its sequences grow together)."""
        alloc = self.allocator
        ids = g.seq_ids
        pool = self.pool
        pooled = pool is not None and all(pool.growth_is_pooled(s) for s in ids)
        if pooled:
            sync_deferred(alloc, g)
        elif len(ids) > 1:  # explicit multi-sequence groups are always synced
            g.limit_tokens = g.held_tokens + min(alloc.headroom_tokens(s) for s in ids)
        self._register(g, pooled)

    def leave(self, g: Group, *, leaving_batch: bool = False) -> None:
        """A member leaves with its fields current and its pooled growth taken from the
        reservoir (its growth limit re-read unless it is leaving the batch too)."""
        self.materialize(g)
        if g.pooled:
            self._sync_pooled(g)
            if not leaving_batch:
                g.limit_tokens = g.held_tokens + self.allocator.headroom_tokens(g.seq_ids[0])
        elif g.num_seqs > 1:  # the reference path grows them eagerly: sync now
            self.synced_sum += sync_deferred(self.allocator, g)
        self._unregister(g)

    def sync(self, g: Group) -> None:
        """Bring a member's fields up to date and tell the allocator of its growth."""
        self.materialize(g)
        if g.pooled:
            self._sync_pooled(g)
        else:
            self.synced_sum += sync_deferred(self.allocator, g)

    def grew_explicitly(self, g: Group) -> None:
        """A pooled member's one-slot growth this step went through ``extend`` itself
        (its fields were materialised before the step's tick)."""
        g.synced_tokens = g.held_tokens + 1
        self.synced_sum += 1
        self.reserved_blocks += 1

    def _sync_pooled(self, g: Group) -> None:
        pending = g.held_tokens - g.synced_tokens
        if pending:
            pool = self.pool
            assert pool is not None
            for sid in g.seq_ids:
                pool.extend_reserved(sid, pending)
            g.synced_tokens = g.held_tokens
            self.synced_sum += pending * len(g.seq_ids)

    def _register(self, g: Group, pooled: bool) -> None:
        """Add a decoding group whose fields are current (``tick == done`` here). A pooled
        group must be synced (the allocator knows its held tokens)."""
        g.held_base = g.held_tokens - self.tick
        g.generated_base = g.generated_tokens - self.done
        g.tick_id = tick_id = next(_REGISTRATIONS)
        g.pooled = pooled
        n = g.num_seqs
        self.members += 1
        self.seqs += n
        self.held_base_sum += n * g.held_base
        self.synced_sum += n * g.synced_tokens
        heapq.heappush(self.finishes, (g.target_tokens - g.generated_base, g.order, tick_id, g))
        if pooled:
            bt = self.block_tokens
            assert bt is not None
            q, r = _split(g.held_base + bt - 1, bt)
            self._q_sum += n * q
            self._r_hist[r] += n
            self.pooled += n
            self.reserved_blocks += n * -(-g.held_tokens // bt)
        else:
            heapq.heappush(self.decisions, (g.limit_tokens - g.held_base + 1, g.order, tick_id, g))

    def _unregister(self, g: Group) -> None:
        """Remove a member whose fields were materialised and (if pooled) synced."""
        g.tick_id = 0
        n = g.num_seqs
        self.members -= 1
        self.seqs -= n
        self.held_base_sum -= n * g.held_base
        self.synced_sum -= n * g.synced_tokens
        if g.pooled:
            bt = self.block_tokens
            assert bt is not None
            q, r = _split(g.held_base + bt - 1, bt)
            self._q_sum -= n * q
            self._r_hist[r] -= n
            self.pooled -= n
            self.reserved_blocks -= n * -(-g.held_tokens // bt)
            g.pooled = False

    def clear_heaps(self) -> None:
        """Forget every heap entry (after every member left)."""
        assert self.members == self.seqs == self.reserved_blocks == self.synced_sum == 0, (
            "ticks leaked"
        )
        assert self.pool is None or self.pool.pool_reserved_blocks() == 0, "growth reservoir leaked"
        self.finishes.clear()
        self.decisions.clear()

    # -- steps --------------------------------------------------------------------------
    def try_grow(self) -> TickGrowth:
        """Before ``tick += 1``, with no member ``due``: draw the pooled blocks the next
        step's growth needs, unless the pool is short (then nothing changes)."""
        due = self.next_decision_tick()
        assert due is None or due > self.tick + 1, "growth decisions are taken first"
        need = self.pooled_need()
        if need > 0 and not self.reserve(need):
            return "short"
        return "grown"

    def any_due(self) -> bool:
        """Whether the next step's growth may need the allocator for some member (an
        entry is due; it may be stale: :meth:`due` drops those)."""
        heap = self.decisions
        return bool(heap) and heap[0][0] <= self.tick + 1

    def due(self) -> list[Group]:
        """Members whose next step's growth needs the allocator, in admission order
        (their decision entries are consumed; they stay members until they leave)."""
        nxt = self.tick + 1
        heap = self.decisions
        out: list[Group] = []
        while heap and heap[0][0] <= nxt:
            _, _, tick_id, g = heapq.heappop(heap)
            if g.tick_id == tick_id:
                out.append(g)
        if len(out) > 1:
            out.sort(key=admission_order)
        return out

    def pooled_need(self) -> int:
        """Blocks the next step's pooled growth draws beyond those already drawn."""
        return self.pooled_blocks(self.tick + 1) - self.reserved_blocks if self.pooled else 0

    def reserve(self, blocks: int) -> bool:
        """Draw ``blocks`` into the allocator's growth reservoir (False: too few free)."""
        pool = self.pool
        assert pool is not None
        if not pool.reserve_pool_blocks(blocks):
            return False
        self.reserved_blocks += blocks
        return True

    def crossing(self, running: list[Group]) -> list[Group]:
        """Pooled members whose next step's growth needs a new block, in ``running``'s
        order."""
        bt, tick = self.block_tokens, self.tick
        assert bt is not None
        return [g for g in running if g.pooled and (g.held_base + tick) % bt == 0]

    def steady_steps(self) -> int:
        """Steps every member can take with no decision (members finish at the last of
        them at the earliest; pooled growth fits the free blocks)."""
        finish = self.next_finish_done()
        assert finish is not None, "no member"
        k = finish - self.done
        due = self.next_decision_tick()
        if due is not None:
            k = min(k, due - self.tick - 1)
        if k <= 0 or not self.pooled:
            return max(k, 0)
        pool = self.pool
        assert pool is not None
        free = pool.pool_free_blocks() + self.reserved_blocks
        return max(0, min(k, self.last_tick_within(free) - self.tick))

    def last_tick_within(self, blocks: int) -> int:
        """The largest tick ``T`` with ``H(T) <= blocks`` (pooled members only; ``H``
        as in the module docstring), in O(B) instead of a bisection over ``H``.

        With ``T = B * a + s`` (``0 <= s < B``), ``H(T) = Q + n * a + C(s)`` where
        ``C(s)`` -- the members whose ``r_i >= B - s`` -- grows with ``s`` from
        ``C(0) = 0`` and stays ``<= n``. So the largest ``a`` with ``Q + n * a <= blocks``
        is the last whole block count, and ``s`` the largest with ``C(s)`` within what
        is left. Below ``Q`` (nothing fits at any tick) the answer is ``-1``."""
        bt = self.block_tokens
        n = self.pooled
        assert bt is not None and n > 0, "no pooled member"
        room = blocks - self._q_sum
        if room < 0:
            return -1
        a = room // n
        left = room - n * a
        hist = self._r_hist
        s, crossed = 0, 0
        while s + 1 < bt:
            crossed += hist[bt - s - 1]
            if crossed > left:
                break
            s += 1
        return bt * a + s

    def advance(self, grow: int, steps: int) -> None:
        """``grow`` steps begun and ``steps`` ended at once (inside ``steady_steps``)."""
        self.tick += grow
        self.done += steps
        if self.pooled:
            need = self.pooled_blocks(self.tick) - self.reserved_blocks
            if need > 0:
                ok = self.reserve(need)
                assert ok, "pooled growth inside the steady bound was refused"

    def unsynced_tokens(self) -> int:
        """Members' growth the allocator has not been told of."""
        return self.kv_tokens() - self.synced_sum

    # -- reading ------------------------------------------------------------------------
    def materialize(self, g: Group) -> None:
        """Write a member's current held and generated tokens into its fields."""
        g.held_tokens = g.held_base + self.tick
        g.generated_tokens = g.generated_base + self.done

    def kv_tokens(self) -> int:
        """KV tokens the members' sequences hold now."""
        return self.held_base_sum + self.seqs * self.tick

    def pooled_blocks(self, tick: int) -> int:
        """``H(tick)``: blocks the pooled members' sequences hold at ``tick`` (module
        docstring; a block shared by forks counts once per sequence holding it, on both
        sides of every difference taken)."""
        bt = self.block_tokens
        if bt is None or not self.pooled:
            return 0
        t = tick // bt
        s = tick - t * bt  # divmod(tick, bt), in native ints
        crossed = 0
        if s:
            hist = self._r_hist
            for r in range(bt - s, bt):  # no slice: this runs a few times per step
                crossed += hist[r]
        return self._q_sum + self.pooled * t + crossed

    def next_finish_done(self) -> int | None:
        """The ``done`` value at which the next member finishes (None: no member)."""
        return _valid_top(self.finishes)

    def next_decision_tick(self) -> int | None:
        """The ``tick`` whose growth first needs the allocator (None: none does)."""
        return _valid_top(self.decisions)

    def pop_finished(self) -> list[Group]:
        """Members whose last token has been emitted (``done`` reached), in admission
        order; they are still registered."""
        out: list[Group] = []
        heap, done = self.finishes, self.done
        while heap and heap[0][0] <= done:
            _, _, tick_id, g = heapq.heappop(heap)
            if g.tick_id == tick_id:
                out.append(g)
        return out


def _split(value: int, block_tokens: int) -> tuple[int, int]:
    """``divmod(value, block_tokens)`` in native ints (the compiled build calls the
    builtin ``divmod`` through Python otherwise)."""
    q = value // block_tokens
    return q, value - q * block_tokens


def _valid_top(heap: list[tuple[int, int, int, Group]]) -> int | None:
    """The key of the heap's first entry whose group is still registered under that
    entry's registration (entries of groups that left are dropped lazily)."""
    while heap:
        key, _, tick_id, g = heap[0]
        if g.tick_id == tick_id:
            return key
        heapq.heappop(heap)
    return None
