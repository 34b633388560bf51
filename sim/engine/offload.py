"""KV offload tiers below a replica's GPU pool: pinned host memory, local NVMe, a remote
store. Each tier has a capacity, a bandwidth, a latency and its own allocator (any
single-pool fragsim policy), and holds prompt KV the GPU computed, so a later request
with the same prefix loads it instead of computing it.

The semantics are vLLM v1's offloading connector's (vLLM 0.33:
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``,
``vllm/v1/kv_offload/cpu/manager.py``, ``vllm/v1/kv_offload/tiering/manager.py``):

* **Chunks.** KV is offloaded in chunks of ``chunk_tokens`` (vLLM's offloading
  ``block_size``; LMCache's ``chunk_size``, 256 by default), which may differ from the
  GPU block. Chunk ``c`` of a prompt (tokens ``c*chunk .. (c+1)*chunk - 1``) is keyed
  ``(h_k, c)``, ``h_k`` the trace's chained prefix hash covering its last token (as the
  paged pool's keys, ``policies.allocators.paged_keys``): equal keys mean equal content.
* **Stores (copied down).** When a request's prefill completes, the full chunks of its
  prompt are copied to *every* tier that lacks them (vLLM's tiering: "always offload to
  all tiers"; a store cascades from the primary tier). Prompt only, as vLLM's
  ``offload_prompt_only``: a partly filled tail chunk is never stored, nor generated
  tokens. A copy is a copy: the GPU keeps its blocks. A store is asynchronous in vLLM
  (its own CUDA stream): it costs the step no time here. In each tier the chunks one
  request stores at once are *one object* of ``n x chunk_tokens`` tokens (variable size,
  as the objects of Mooncake's store), placed by the tier's allocator.
* **Store threshold** (vLLM's ``store_threshold``, off by default): with ``n >= 2`` a
  chunk is stored only at its ``n``-th offer (the ``n``-th prefill that computed it), so
  a prompt's unique tail is never stored. Offers are counted per key in one tracker of
  at most ``max_tracker_size`` keys (vLLM's default 64,000), least recently offered
  forgotten first, never a key of the offer being counted.
* **Eviction: LRU per tier, by object** (vLLM's default ``cache_policy: lru``). A store
  that does not fit evicts the least recently used objects of that tier, one at a time,
  until its allocator places it; with a contiguous allocator a store can evict several
  objects before one free extent is large enough (fragmentation costs evictions), and
  is refused when the tier empties without it fitting (an object larger than the tier).
  A hit touches the objects it reads; a store touches the chunks it finds present.
* **Loads (a prefix hit before prefill).** At admission the GPU prefix cache answers
  first (the allocator's ``cached_tokens``); the chunks after it are looked up in order,
  each in the first tier (in the scenario's order) that holds it, up to the first chunk
  no tier holds, and at most ``prompt - 1`` tokens (the last prompt token is always
  computed: vLLM needs its logits). A chunk the GPU cache covers in part is loaded for
  the rest of it. A chunk served by a lower tier is promoted: copied into the first tier
  (vLLM's staged promotion through the primary tier).
* **What a hit costs.** Loading ``b`` bytes from tier ``t`` takes ``latency_s(t) +
  b / bandwidth(t)``, summed over the tiers a load reads; it is added to the step that
  admits the request (``Step.stall_s``), so the whole batch waits for it: a synchronous
  load, as LMCache's default (without its opt-in ``async_loading``) retrieves in
  ``start_load_kv`` before the forward pass. An overlapped load is not modelled. A tier hit
  therefore costs exactly a GPU hit of the same tokens plus that transfer time.
* **Restarts.** A process restart loses the host and NVMe tiers (their index lives in
  the serving process); a ``remote`` tier (a separate store service) keeps its objects.
  Counters run on across restarts.

* **A shared remote store** (``shared: true`` on the ``remote`` tier): one
  :class:`TierStore` (one allocator, one LRU, one chunk index) behind every replica's
  remote tier, as Mooncake's store or LMCache's remote backend serve a whole fleet: a
  prefix one replica stored is a hit on any other. Each replica keeps its own counters
  (its loads, and the evictions, refusals and bytes its own stores caused), so sums
  over replicas count each event once; every replica reports the one store's pool.
  Accesses must come in time order, so it needs ``mode: exact`` (fast mode runs
  replicas ahead of each other: one could read another's future stores); the scenario
  refuses it in fast mode.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from policies.allocators.base import Allocator

ChunkKey = tuple[int, int]
"""``(hash, chunk_index)``: a chunk's content (see the module docstring)."""

TIER_KINDS: tuple[str, ...] = ("host", "nvme", "remote")
"""The kinds of tier, in the order their output columns are written."""


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One tier, past the scenario's edge (``sim.scenario.offload`` builds it)."""

    kind: str
    """``host``, ``nvme`` or ``remote``; a replica has at most one of each."""
    capacity_tokens: int
    """Token slots of KV the tier holds (its bytes over the replica's KV bytes per token)."""
    bandwidth_bytes_per_s: float
    latency_s: float
    """Fixed cost of one load from this tier (per load, not per chunk)."""
    make_allocator: Callable[[], Allocator]
    """A fresh allocator of ``capacity_tokens`` slots (a restart builds a new one)."""
    persists_across_restart: bool
    shared_store: TierStore | None = None
    """The one store every replica's tier of this spec uses (``shared: true``, a
    fleet-wide remote store; built once per run); None: each replica builds its own."""


@dataclass(frozen=True, slots=True)
class OffloadSpec:
    """A replica's tiers, first (loaded from first, promoted into) to last."""

    tiers: tuple[TierSpec, ...]
    chunk_tokens: int
    hash_block_tokens: int
    """Tokens one of the trace's prefix hashes covers."""
    kv_bytes_per_token: int
    store_threshold: int = 1
    """Offers of a chunk before it is stored (1: at once)."""
    max_tracker_size: int = 64_000
    """Keys the offer counts remember (``store_threshold`` >= 2 only)."""


def chunk_keys(
    hashes: Sequence[int], hash_block_tokens: int, chunk_tokens: int, first: int, tokens: int
) -> list[ChunkKey]:
    """Keys of the full chunks ``first, first + 1, ...`` that end within the first
    ``tokens`` tokens and whose last token a hash covers."""
    out: list[ChunkKey] = []
    n_hashes = len(hashes)
    c = first
    end = (c + 1) * chunk_tokens
    while end <= tokens:
        k = (end - 1) // hash_block_tokens
        if k >= n_hashes:
            break
        out.append((hashes[k], c))
        c += 1
        end += chunk_tokens
    return out


class TierStore:
    """One tier's memory: its allocator, its objects in LRU order, the chunk index and
    the books of the tokens written into it (written = held + evicted + lost). A
    replica's :class:`Tier` has its own store; a shared remote store (``shared``) is
    one store behind every replica's tier of that kind."""

    def __init__(self, make_allocator: Callable[[], Allocator], chunk_tokens: int) -> None:
        self.make_allocator = make_allocator
        self.chunk_tokens = chunk_tokens
        self.allocator = make_allocator()
        self.objects: OrderedDict[int, list[ChunkKey]] = OrderedDict()
        """Object id -> its chunks, least recently used first (O(1) touch and evict)."""
        self.where: dict[ChunkKey, int] = {}
        """Chunk -> the object holding it."""
        self.held_tokens = 0
        self.evicted_tokens = 0
        self.lost_tokens = 0
        """Tokens a restart dropped (see the class docstring's books)."""
        self._next_id = 0

    def clear(self) -> None:
        """Forget every object with a fresh allocator; what it held counts as lost."""
        self.lost_tokens += self.held_tokens
        self.allocator = self.make_allocator()
        self.objects.clear()
        self.where.clear()
        self.held_tokens = 0

    def touch(self, object_id: int) -> None:
        self.objects.move_to_end(object_id)

    def put(self, keys: list[ChunkKey]) -> tuple[bool, int]:
        """Store ``keys`` (none present) as one object, evicting LRU objects until the
        allocator places it: (placed, objects evicted); not placed when it cannot fit
        even in an empty store."""
        tokens = len(keys) * self.chunk_tokens
        alloc = self.allocator
        oid = self._next_id
        evicted = 0
        while alloc.allocate(oid, tokens, reserve_tokens=tokens) is None:
            if not self.objects:
                return False, evicted
            self._evict_lru()
            evicted += 1
        self._next_id += 1
        self.objects[oid] = keys
        where = self.where
        for key in keys:
            where[key] = oid
        self.held_tokens += tokens
        return True, evicted

    def _evict_lru(self) -> None:
        oid, keys = self.objects.popitem(last=False)
        self.allocator.free(oid)
        where = self.where
        for key in keys:
            del where[key]
        tokens = len(keys) * self.chunk_tokens
        self.held_tokens -= tokens
        self.evicted_tokens += tokens


class Tier:
    """One replica's tier: its store (its own, or the fleet's shared one) and this
    replica's counters of what it did there (its loads, and the stores, evictions and
    refusals its own puts caused), so that summing a counter over replicas counts
    each event once, shared store or not."""

    def __init__(
        self,
        spec: TierSpec,
        chunk_tokens: int,
        kv_bytes_per_token: int,
        store: TierStore | None = None,
    ) -> None:
        self.spec = spec
        self.chunk_tokens = chunk_tokens
        self.kv_bytes_per_token = kv_bytes_per_token
        self.store = TierStore(spec.make_allocator, chunk_tokens) if store is None else store
        self.hits = 0
        self.misses = 0
        self.hit_tokens = 0
        self.evictions = 0
        self.store_refusals = 0
        self.bytes_down = 0
        """Bytes this replica wrote into the tier (stores and promotions)."""
        self.bytes_up = 0
        """Bytes loaded from this tier toward the GPU."""
        self.load_s = 0.0
        """Time its loads added to steps (the TTFT they cost)."""

    @property
    def allocator(self) -> Allocator:
        return self.store.allocator

    @property
    def objects(self) -> OrderedDict[int, list[ChunkKey]]:
        return self.store.objects

    @property
    def where(self) -> dict[ChunkKey, int]:
        return self.store.where

    @property
    def held_tokens(self) -> int:
        return self.store.held_tokens

    @property
    def evicted_tokens(self) -> int:
        return self.store.evicted_tokens

    @property
    def lost_tokens(self) -> int:
        return self.store.lost_tokens

    def clear(self) -> None:
        """Forget every object (a restart of a tier that does not persist; a shared
        store always persists: it is a remote service)."""
        self.store.clear()

    def touch(self, object_id: int) -> None:
        self.store.objects.move_to_end(object_id)

    def put(self, keys: list[ChunkKey]) -> bool:
        """Store ``keys`` (none present) as one object (:meth:`TierStore.put`),
        counting this replica's evictions, bytes and refusals; False when refused."""
        placed, evicted = self.store.put(keys)
        self.evictions += evicted
        if not placed:
            self.store_refusals += 1
            return False
        self.bytes_down += len(keys) * self.chunk_tokens * self.kv_bytes_per_token
        return True


class OffloadTiers:
    """A replica's offload tiers: :meth:`load` at admission, :meth:`store` when a
    prefill completes, :meth:`restart` with the process. See the module docstring."""

    def __init__(self, spec: OffloadSpec) -> None:
        self.spec = spec
        self.chunk_tokens = spec.chunk_tokens
        self.tiers = [
            Tier(t, spec.chunk_tokens, spec.kv_bytes_per_token, t.shared_store) for t in spec.tiers
        ]
        self.loaded_requests = 0
        """Admissions that loaded at least one token from a tier."""
        self.offers: OrderedDict[ChunkKey, int] = OrderedDict()
        """Offers per chunk, least recently offered first (``store_threshold`` >= 2)."""
        self.skipped_stores = 0
        """Chunks not stored for want of offers (``store_threshold``)."""

    def restart(self) -> None:
        for tier in self.tiers:
            if not tier.spec.persists_across_restart:
                tier.clear()

    def load(
        self, hashes: Sequence[int], gpu_cached_tokens: int, max_tokens: int
    ) -> tuple[int, float]:
        """A prefix lookup past the GPU's ``gpu_cached_tokens``, of at most
        ``max_tokens`` in all: (tokens loaded from the tiers, seconds the load takes).
        Counts hits, misses and bytes per tier; promotes lower tiers' chunks."""
        ct = self.chunk_tokens
        first = gpu_cached_tokens // ct
        keys = chunk_keys(hashes, self.spec.hash_block_tokens, ct, first, max_tokens)
        if not keys:
            return 0, 0.0
        tiers = self.tiers
        served = [0] * len(tiers)
        promote: list[ChunkKey] = []
        end_tokens = gpu_cached_tokens
        for key in keys:
            found = -1
            for i, tier in enumerate(tiers):
                oid = tier.store.where.get(key)
                if oid is not None:
                    tier.touch(oid)
                    found = i
                    break
            if found < 0:
                break
            start = key[1] * ct
            begin = start if start > end_tokens else end_tokens
            end_tokens = start + ct
            served[found] += end_tokens - begin
            if found > 0:
                promote.append(key)
        bpt = self.spec.kv_bytes_per_token
        total = 0
        load_s = 0.0
        for i, tier in enumerate(tiers):
            tokens = served[i]
            if tokens == 0:
                tier.misses += 1
                continue
            seconds = tier.spec.latency_s + tokens * bpt / tier.spec.bandwidth_bytes_per_s
            tier.hits += 1
            tier.hit_tokens += tokens
            tier.bytes_up += tokens * bpt
            tier.load_s += seconds
            total += tokens
            load_s += seconds
        if promote:
            head = tiers[0]
            fresh = [k for k in promote if k not in head.where]
            if fresh:
                head.put(fresh)
        if total:
            self.loaded_requests += 1
        return total, load_s

    def store(self, hashes: Sequence[int], prompt_tokens: int) -> None:
        """Copy the prompt's full chunks down to every tier that lacks them."""
        keys = chunk_keys(hashes, self.spec.hash_block_tokens, self.chunk_tokens, 0, prompt_tokens)
        if not keys:
            return
        threshold = self.spec.store_threshold
        if threshold >= 2:
            self._count_offers(keys)
            offers = self.offers
            ready = [k for k in keys if offers.get(k, 0) >= threshold]
            self.skipped_stores += len(keys) - len(ready)
            keys = ready
        for tier in self.tiers:
            where = tier.where
            fresh: list[ChunkKey] = []
            for key in keys:
                oid = where.get(key)
                if oid is None:
                    fresh.append(key)
                else:
                    tier.touch(oid)
            if fresh:
                tier.put(fresh)

    def _count_offers(self, keys: list[ChunkKey]) -> None:
        """Count one offer of each of ``keys`` (vLLM's ``_record_accesses``): a known key
        is counted and becomes the most recent; a new one starts at 1, forgetting the
        least recently offered key not in ``keys`` when the tracker is full (none such:
        the new key goes untracked)."""
        offers = self.offers
        protected = 0
        for key in keys:
            if key in offers:
                offers.move_to_end(key)
                offers[key] += 1
                protected += 1
        unprotected = len(offers) - protected
        limit = self.spec.max_tracker_size
        for key in keys:
            if key in offers:
                continue
            if len(offers) >= limit:
                if unprotected == 0:
                    continue
                offers.popitem(last=False)
                unprotected -= 1
            offers[key] = 1


def tier_ratio(free_tokens: int, largest_free_extent_tokens: int) -> float:
    """The seed's ratio for a tier: largest free extent / total free; NaN when full."""
    if free_tokens == 0:
        return math.nan
    return largest_free_extent_tokens / free_tokens
