"""Routers that keep requests where their state is: a weighted scorer with prefix-cache
affinity (llm-d's default profile) and session affinity by consistent hashing with a
load bound."""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence

from policies.routing.base import Router, RouteRequest, RouterView, least, outstanding, up_indices

_MASK64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64's finaliser: a fixed, well-spread 64-bit hash of an int (Python's
    ``hash`` of an int is the int itself, which would put a ring's points in a row)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class WeightedScorer(Router):
    """The up view with the highest weighted score (lowest index on ties), after llm-d's
    scheduler: ``queue_weight x queue + kv_usage_weight x kv + prefix_weight x prefix``,
    each score in [0, 1]:

    - queue: ``(max - waiting) / (max - min)`` over the up views (1 when all are equal),
      as the inference extension's queue scorer;
    - kv: ``1 - kv_usage``;
    - prefix: the share of the request's first ``max_prefix_blocks`` prefix hashes that
      the leading run found in the replica's remembered set covers.

    The prefix signal is an approximation, as llm-d's approximate prefix cache: the
    router does not see replicas' caches; it remembers, per replica id, the hashes it has
    sent there (an LRU set of ``lru_blocks`` hashes, refreshed by each request routed
    there) and forgets a replica's set when its restart count changes. A replica's own
    eviction is not seen, so the router may believe in blocks long gone. Only the leading
    run counts, as a prefix cache reuses blocks from a prompt's start only.
    """

    def __init__(
        self,
        queue_weight: float,
        kv_usage_weight: float,
        prefix_weight: float,
        lru_blocks: int,
        max_prefix_blocks: int,
    ) -> None:
        self.queue_weight = queue_weight
        self.kv_usage_weight = kv_usage_weight
        self.prefix_weight = prefix_weight
        self.lru_blocks = lru_blocks
        self.max_prefix_blocks = max_prefix_blocks
        self._sent: dict[int, OrderedDict[int, None]] = {}
        """Per replica id: prefix hashes sent there, least recently sent first (an
        ordered dict: O(1) membership, move-to-end and eviction of the oldest)."""
        self._restarts: dict[int, int] = {}

    def _sent_to(self, view: RouterView) -> OrderedDict[int, None]:
        rid = view.replica_id
        if self._restarts.get(rid) != view.restarts:  # new replica, or restarted: cold
            self._restarts[rid] = view.restarts
            self._sent[rid] = OrderedDict()
        return self._sent[rid]

    def prefix_score(self, view: RouterView, hashes: Sequence[int]) -> float:
        if not hashes:
            return 0.0
        sent = self._sent_to(view)
        run = 0
        for h in hashes:
            if h not in sent:
                break
            run += 1
        return run / len(hashes)

    def _remember(self, view: RouterView, hashes: Sequence[int]) -> None:
        sent = self._sent_to(view)
        for h in hashes:
            sent[h] = None
            sent.move_to_end(h)
        while len(sent) > self.lru_blocks:
            sent.popitem(last=False)

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        if not ups:
            return None
        hashes = request.prefix_hashes[: self.max_prefix_blocks]
        waiting = [views[i].waiting_requests for i in ups] if self.queue_weight else []
        lo, hi = (min(waiting), max(waiting)) if waiting else (0, 0)
        best, best_score = ups[0], -1.0
        for k, i in enumerate(ups):
            v = views[i]
            score = 0.0
            if self.queue_weight:
                queue = 1.0 if hi == lo else (hi - waiting[k]) / (hi - lo)
                score += self.queue_weight * queue
            if self.kv_usage_weight:
                score += self.kv_usage_weight * (1.0 - v.kv_usage)
            if self.prefix_weight:
                score += self.prefix_weight * self.prefix_score(v, hashes)
            if score > best_score:  # strictly: the lowest index keeps a tie
                best, best_score = i, score
        if hashes:
            self._remember(views[best], hashes)
        return best


class SessionAffinity(Router):
    """Consistent hashing of ``session_id`` onto a ring of replica ids, with a load bound
    (after Mirrokni et al., "Consistent Hashing with Bounded Loads").

    Each replica id owns ``virtual_nodes`` points on a 64-bit ring; a session hashes to a
    point and walks clockwise. The first up replica whose outstanding requests do not
    exceed ``(1 + epsilon) x`` the mean over the up replicas takes it: a session sticks
    to its replica until that one is overloaded, then spills to the next on the ring. Some
    up replica is always at or below the mean, so the walk always ends. The ring is over
    replica ids (rebuilt when the set of ids changes), so a session returns to its replica
    when it comes back up. Requests without a session go to the least outstanding.
    """

    reads_memory = False

    def __init__(self, epsilon: float, virtual_nodes: int) -> None:
        self.epsilon = epsilon
        self.virtual_nodes = virtual_nodes
        self._ids: tuple[int, ...] = ()
        self._points: list[int] = []
        self._owners: list[int] = []

    def _ring_for(self, views: Sequence[RouterView]) -> None:
        ids = tuple(v.replica_id for v in views)
        if ids == self._ids:
            return
        ring = sorted(
            (mix64(mix64(rid) ^ k), rid) for rid in set(ids) for k in range(self.virtual_nodes)
        )
        self._ids = ids
        self._points = [p for p, _ in ring]
        self._owners = [rid for _, rid in ring]

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        if not ups:
            return None
        if request.session_id is None:
            return least(views, ups, outstanding)
        self._ring_for(views)
        loads = {i: views[i].outstanding_requests for i in ups}
        bound = (1.0 + self.epsilon) * sum(loads.values()) / len(loads)
        index_of = {v.replica_id: i for i, v in enumerate(views)}
        n = len(self._points)
        start = bisect_left(self._points, mix64(request.session_id & _MASK64))
        for k in range(n):
            i = index_of[self._owners[(start + k) % n]]
            if i in loads and loads[i] <= bound:
                return i
        raise AssertionError("no up replica at or below the mean load")
