"""Operations per second of every registered allocator policy on the seed's bimodal mix.

Workload (seeded, identical for every policy): requests of 70 % 50-500-token prompts and
30 % 15,000-30,000-token prompts, each with 16-512 output tokens. Each operation is one
allocator call: 30 % admissions (``allocate`` with the true final length as
``reserve_tokens``), the rest decode chunks (``extend`` by 16 tokens of a random live
request, or ``free`` when it finishes). A refused admission or growth frees a random live
request (one more operation), so the pool stays near full and fragments.

Per policy and pool size (1,000,000 and 100,000,000 slots): a warm-up of ``warmup_ops``
untimed operations fills and churns the pool, then ``repeats`` timed windows of
``window_ops`` operations continue from there; the line reports the median window's
ops/s, the free-extent count and largest-free ratio at the end, and ``stats_us``, the
median cost of one ``stats()`` call.

Run: ``python -m benchmarks bench_allocators`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

import numpy as np

from policies.allocators.base import Allocator, PoolSpec
from policies.allocators.registry import ALLOCATORS
from sim.build import engine_build

DECODE_CHUNK_TOKENS = 16
#: Llama-3-8B in fp16: 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes (page and
#: segment sizes of the vm_paged and caching policies convert through it).
KV_BYTES_PER_TOKEN = 131_072
#: mix name -> share of operations that are admissions; the rest are decode chunks
#: (``decode``) or frees of a random live request (``churn``: placement-bound, the
#: free-extent index's worst case).
MIXES = {"decode": 0.3, "churn": 0.55}


@dataclass(frozen=True, slots=True)
class Workload:
    """Pre-drawn random numbers for ``n_ops`` operations (no RNG in the timed loop)."""

    choice: list[float]
    prompt_tokens: list[int]
    output_tokens: list[int]
    pick: list[float]


def make_workload(n_ops: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    long = rng.random(n_ops) < 0.3
    prompt = np.where(long, rng.integers(15_000, 30_001, n_ops), rng.integers(50, 501, n_ops))
    return Workload(
        choice=rng.random(n_ops).tolist(),
        prompt_tokens=prompt.tolist(),
        output_tokens=rng.integers(16, 513, n_ops).tolist(),
        pick=rng.random(n_ops).tolist(),
    )


class Driver:
    """Replays a workload against one allocator, keeping the live set."""

    def __init__(self, alloc: Allocator) -> None:
        self.alloc = alloc
        self.live: list[int] = []
        self.pos: dict[int, int] = {}
        self.remaining: dict[int, int] = {}
        self.next_id = 0
        self.ops = 0

    def _drop(self, j: int) -> None:
        live, pos = self.live, self.pos
        rid = live[j]
        last = live.pop()
        if last != rid:
            live[j] = last
            pos[last] = j
        del pos[rid]
        del self.remaining[rid]
        self.alloc.free(rid)
        self.ops += 1

    def run(self, w: Workload, lo: int, hi: int, mix: str, deadline: float) -> bool:
        """Replay operations ``lo..hi``; False when ``deadline`` (a ``perf_counter``
        value) passed first (checked every 1,024 operations)."""
        alloc, live, pos, remaining = self.alloc, self.live, self.pos, self.remaining
        allocate, extend = alloc.allocate, alloc.extend
        choice, prompt, output, pick = w.choice, w.prompt_tokens, w.output_tokens, w.pick
        chunk = DECODE_CHUNK_TOKENS
        allocate_share = MIXES[mix]
        churn = mix == "churn"
        ops = 0
        clock = time.perf_counter
        for k in range(lo, hi):
            if not k & 1023 and clock() > deadline:
                self.ops += ops
                return False
            ops += 1
            if choice[k] < allocate_share or not live:
                rid = self.next_id
                self.next_id += 1
                if allocate(rid, prompt[k], reserve_tokens=prompt[k] + output[k]) is None:
                    if live:
                        self._drop(int(pick[k] * len(live)))
                    continue
                pos[rid] = len(live)
                live.append(rid)
                remaining[rid] = output[k]
                continue
            j = int(pick[k] * len(live))
            if churn:
                self._drop(j)
                ops -= 1
                continue
            rid = live[j]
            left = remaining[rid]
            if left <= chunk:
                self._drop(j)
                ops -= 1  # _drop counted it
            elif extend(rid, chunk):
                remaining[rid] = left - chunk
            else:
                self._drop(j)  # preempted: one more operation
        self.ops += ops
        return True


def bench_policy(
    kind: str,
    mix: str,
    capacity_tokens: int,
    w: Workload,
    warmup_ops: int,
    window_ops: int,
    repeats: int,
    phase_budget_s: float = 20.0,
) -> dict[str, object]:
    """One policy on one pool; each phase (warm-up, each window) stops after
    ``phase_budget_s`` so a pathological policy cannot stall the run (``complete``
    says whether every phase ran in full)."""
    spec = PoolSpec(
        capacity_tokens=capacity_tokens,
        kv_bytes_per_token=KV_BYTES_PER_TOKEN,
        max_seq_tokens=32_768,
    )
    alloc = ALLOCATORS[kind].model_validate({"kind": kind}).build(spec)
    driver = Driver(alloc)
    clock = time.perf_counter
    complete = driver.run(w, 0, warmup_ops, mix, clock() + phase_budget_s)
    rates: list[float] = []
    extents: list[int] = []
    for r in range(repeats):
        lo = warmup_ops + r * window_ops
        ops_before = driver.ops
        t0 = clock()
        complete &= driver.run(w, lo, lo + window_ops, mix, t0 + phase_budget_s)
        elapsed = clock() - t0
        rates.append((driver.ops - ops_before) / elapsed)
        extents.append(alloc.stats().free_extent_count)
    t0 = time.perf_counter()
    for _ in range(1000):
        s = alloc.stats()
    stats_us = (time.perf_counter() - t0) * 1000.0
    ratio = s.largest_contiguous_free_block_ratio
    return {
        "bench": "allocators",
        "kind": kind,
        "mix": mix,
        "capacity_tokens": capacity_tokens,
        "ops_per_s": round(statistics.median(rates)),
        "ops_per_s_all": [round(x) for x in rates],
        "complete": complete,
        "free_extent_count": statistics.median(extents),
        "free_extent_count_max": max(extents),
        "live_requests": len(driver.live),
        "free_share": round(s.free_tokens / capacity_tokens, 4),
        "largest_free_ratio": None if ratio is None else round(ratio, 4),
        "copied_tokens_total": s.copied_tokens_total,
        "moved_tokens_total": s.moved_tokens_total,
        "stats_us": round(stats_us, 3),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``[--quick] [KIND ...]``; unknown options or kinds exit 2 with argparse's usage
    message (``--help`` prints it and exits 0) instead of starting the benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_allocators",
        description="Operations per second of allocator policies (one JSON line per run).",
    )
    parser.add_argument("--quick", action="store_true", help="Small pools and windows (smoke run).")
    parser.add_argument(
        "kinds",
        nargs="*",
        metavar="KIND",
        help=f"Policies to run (default: all): {', '.join(sorted(ALLOCATORS))}.",
    )
    args = parser.parse_args(argv)
    unknown = [k for k in args.kinds if k not in ALLOCATORS]
    if unknown:
        parser.error(f"unknown policy {unknown[0]!r}; choose from {', '.join(sorted(ALLOCATORS))}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quick = bool(args.quick)
    kinds = list(args.kinds) or sorted(ALLOCATORS)
    pools = [(1_000_000, 50_000, 100_000), (100_000_000, 300_000, 100_000)]
    repeats = 3
    if quick:
        pools = [(1_000_000, 5_000, 5_000), (100_000_000, 20_000, 5_000)]
    for capacity, warmup_ops, window_ops in pools:
        w = make_workload(warmup_ops + repeats * window_ops, seed=20260401)
        for mix in MIXES:
            for kind in kinds:
                try:
                    line = bench_policy(kind, mix, capacity, w, warmup_ops, window_ops, repeats)
                except Exception as exc:  # report and go on to the next policy
                    line = {
                        "bench": "allocators",
                        "kind": kind,
                        "mix": mix,
                        "capacity_tokens": capacity,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                print(json.dumps({**line, "engine_build": engine_build()}), flush=True)


if __name__ == "__main__":
    main()
