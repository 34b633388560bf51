"""Record vLLM v1's real scheduling decisions as goldens fragsim is held to.

Runs in a venv that has vLLM (``make vllm-goldens`` makes one); never imported by
fragsim or its tests. It builds vLLM's own ``Scheduler`` and ``KVCacheManager`` the way
vLLM's ``tests/v1/core/utils.py:create_scheduler`` does -- a ``VllmConfig`` over a local
tiny-model ``config.json`` (no weights, no hub, no tokenizer) and a ``KVCacheConfig`` of
``num_gpu_blocks`` blocks of one full-attention group -- and drives it with a fake model
runner that returns one token per request per step whose prompt is computed (a chunk
that leaves prompt to compute returns none, as vLLM's runner discards it). Nothing in
vLLM is patched; only ``VLLM_TARGET_DEVICE=cpu`` and ``HF_HUB_OFFLINE=1`` are set.

Time is the step index. A request arriving at step ``k`` is added before the ``k``-th
``schedule()`` call; a step that schedules nothing still counts (an idle engine waits
for the next arrival). Each workload writes one JSON file under ``tests/golden/vllm/``::

    {"vllm_version", "config": {...}, "requests": [{id, arrival_step, prefix_group,
     prefix_tokens, unique_tokens, output_tokens}],
     "steps": [[step, blocks_in_use, running, waiting, preemptions], ...],
     "records": [[id, admit_step, first_token_step, finish_step, preemptions,
                  queried_tokens, hit_tokens, preempted_queried_tokens,
                  preempted_hit_tokens], ...],
     "prefix_cache": {<PrefixCacheStats field>: total, ...}}

A record's prefix-cache figures are vLLM's ``record_prefix_cache_stats`` per request: at
each admission the request's ``num_tokens`` (queried) and the tokens the lookup found
(hits), summed over its first admission apart from its re-admissions after a preemption
(``PrefixCacheStats``' own split); every step the recorder checks that its requests'
figures add up to the ``PrefixCacheStats`` vLLM reported for that step, so they are
vLLM's own counts, attributed; and that each request's first-admission hits are the
``num_cached_tokens`` vLLM's outputs carry for it (what its API reports).

Prompt token ids are a function of the request's row (see ``prompt_token_ids``), and a
generated token of request ``r`` is always ``GENERATED_TOKEN_BASE + r``; fragsim's test
rebuilds the same ids, so blocks hash alike on both sides.

Usage: ``python tools/vllm_recorder/record.py [--out DIR] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import vllm
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

HERE = Path(__file__).resolve().parent
TINY_MODEL = HERE / "tiny-model"
DEFAULT_OUT = HERE.parents[1] / "tests" / "golden" / "vllm"
PREFIX_TOKEN_BASE = 1000
UNIQUE_TOKEN_BASE = 100_000
GENERATED_TOKEN_BASE = 200_000


@dataclass(frozen=True)
class Workload:
    """A seeded workload and the engine configuration it runs on."""

    name: str
    seed: int
    num_requests: int
    arrivals_per_step: float
    unique_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    num_gpu_blocks: int
    block_size: int = 16
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    watermark: float = 0.0
    enable_prefix_caching: bool = False
    scheduler_reserve_full_isl: bool = True
    max_model_len: int = 4096
    prefix_groups: int = 0
    prefix_tokens: tuple[int, int] = (0, 0)

    def config(self) -> dict[str, Any]:
        return {
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "long_prefill_token_threshold_adaptive": self.long_prefill_token_threshold_adaptive,
            "watermark": self.watermark,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": True,
            "scheduler_reserve_full_isl": self.scheduler_reserve_full_isl,
            "max_model_len": self.max_model_len,
        }

    def rows(self) -> list[dict[str, int]]:
        """The requests, from ``seed`` alone (numpy's PCG64)."""
        rng = np.random.default_rng(self.seed)
        gaps = rng.exponential(1.0 / self.arrivals_per_step, self.num_requests)
        arrivals = np.floor(np.cumsum(gaps) - gaps[0]).astype(int)
        group_len = [
            int(rng.integers(*self.prefix_tokens, endpoint=True)) for _ in range(self.prefix_groups)
        ]
        out = []
        for i in range(self.num_requests):
            group = int(rng.integers(self.prefix_groups)) if self.prefix_groups else -1
            out.append(
                {
                    "id": i,
                    "arrival_step": int(arrivals[i]),
                    "prefix_group": group,
                    "prefix_tokens": group_len[group] if group >= 0 else 0,
                    "unique_tokens": int(rng.integers(*self.unique_tokens, endpoint=True)),
                    "output_tokens": int(rng.integers(*self.output_tokens, endpoint=True)),
                }
            )
        return out


WORKLOADS = (
    Workload("light", seed=1, num_requests=60, arrivals_per_step=0.25,
             unique_tokens=(20, 200), output_tokens=(1, 60), num_gpu_blocks=400),
    Workload("heavy", seed=2, num_requests=120, arrivals_per_step=2.0,
             unique_tokens=(20, 300), output_tokens=(10, 200), num_gpu_blocks=200,
             max_num_seqs=32),
    Workload("watermark", seed=3, num_requests=100, arrivals_per_step=1.5,
             unique_tokens=(20, 300), output_tokens=(10, 150), num_gpu_blocks=200,
             max_num_seqs=24, watermark=0.05),
    Workload("chunked", seed=4, num_requests=50, arrivals_per_step=0.5,
             unique_tokens=(300, 2000), output_tokens=(5, 80), num_gpu_blocks=600,
             max_num_batched_tokens=256, long_prefill_token_threshold=192),
    Workload("chunked-no-reserve", seed=4, num_requests=50, arrivals_per_step=0.5,
             unique_tokens=(300, 2000), output_tokens=(5, 80), num_gpu_blocks=400,
             max_num_batched_tokens=256, long_prefill_token_threshold=192,
             scheduler_reserve_full_isl=False),
    Workload("chunked-adaptive", seed=6, num_requests=50, arrivals_per_step=0.5,
             unique_tokens=(300, 2000), output_tokens=(5, 80), num_gpu_blocks=600,
             max_num_batched_tokens=512, long_prefill_token_threshold=64,
             long_prefill_token_threshold_adaptive=True),
    Workload("prefix-eviction", seed=5, num_requests=150, arrivals_per_step=1.0,
             unique_tokens=(5, 120), output_tokens=(5, 80), num_gpu_blocks=160,
             enable_prefix_caching=True, prefix_groups=6, prefix_tokens=(40, 400)),
)  # fmt: skip


def prompt_token_ids(row: dict[str, int]) -> list[int]:
    """The prompt: its prefix group's shared tokens, then tokens only it has."""
    group = row["prefix_group"]
    shared = [PREFIX_TOKEN_BASE + 7 * group + (i % 5) for i in range(row["prefix_tokens"])]
    return shared + [UNIQUE_TOKEN_BASE + row["id"]] * row["unique_tokens"]


def build_scheduler(w: Workload) -> Scheduler:
    """vLLM's scheduler and KV cache manager as its own tests build them."""
    scheduler_config = SchedulerConfig(
        max_num_seqs=w.max_num_seqs,
        max_num_batched_tokens=w.max_num_batched_tokens,
        max_model_len=w.max_model_len,
        long_prefill_token_threshold=w.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=w.long_prefill_token_threshold_adaptive,
        enable_chunked_prefill=True,
        scheduler_reserve_full_isl=w.scheduler_reserve_full_isl,
        watermark=w.watermark,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    model_config = ModelConfig(
        model=str(TINY_MODEL),
        dtype="float16",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=w.max_model_len,
    )
    cache_config = CacheConfig(
        block_size=w.block_size,
        enable_prefix_caching=w.enable_prefix_caching,
        cache_dtype="auto",
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
    )
    spec = FullAttentionSpec(
        block_size=w.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=w.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    cache_config.num_gpu_blocks = w.num_gpu_blocks
    sched = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=w.block_size,
        log_stats=True,
    )
    check_effective(w, sched)
    return sched


def check_effective(w: Workload, sched: Scheduler) -> None:
    """vLLM's config classes may adjust settings for the platform: refuse to record
    under any setting other than the one asked for."""
    sc, cc = sched.scheduler_config, sched.cache_config
    effective = {
        "block_size": sched.block_size,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": sched.max_num_scheduled_tokens,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "long_prefill_token_threshold_adaptive": sched.adaptive_long_prefill_threshold,
        "watermark": sc.watermark,
        "enable_prefix_caching": bool(cc.enable_prefix_caching),
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "scheduler_reserve_full_isl": sched.scheduler_reserve_full_isl,
        "max_model_len": sched.max_model_len,
        "num_gpu_blocks": sched.kv_cache_manager.block_pool.num_gpu_blocks,
    }
    wanted = {**w.config(), "max_num_scheduled_tokens": w.max_num_batched_tokens}
    if effective != wanted:
        diff = {k: (wanted[k], effective[k]) for k in wanted if wanted[k] != effective[k]}
        raise RuntimeError(f"{w.name}: vLLM changed settings (wanted, effective): {diff}")


def make_request(row: dict[str, int], block_size: int) -> Request:
    params = SamplingParams(ignore_eos=True, max_tokens=row["output_tokens"])
    return Request(
        request_id=str(row["id"]),
        prompt_token_ids=prompt_token_ids(row),
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(row["arrival_step"]),
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


def fake_runner_output(sched: Scheduler, out: Any) -> ModelRunnerOutput:
    """One token per scheduled request whose prompt (and replayed output) is computed."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        req = sched.requests[rid]
        done = req.num_computed_tokens >= req.num_tokens  # advanced by schedule()
        sampled.append([GENERATED_TOKEN_BASE + int(rid)] if done else [])
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )


PREFIX_STATS = (
    "requests",
    "queries",
    "hits",
    "preempted_requests",
    "preempted_queries",
    "preempted_hits",
)
"""``PrefixCacheStats`` fields, summed over every step (vLLM resets them per step):
what its ``vllm:prefix_cache_queries`` / ``_hits`` counters count (new requests) and
the preempted requests' share, counted apart."""


def add_prefix_stats(totals: dict[str, int], stats: Any) -> None:
    if stats is not None:
        for name in PREFIX_STATS:
            totals[name] += int(getattr(stats, name))


ATTRIBUTED = ("queries", "hits", "preempted_queries", "preempted_hits")
"""The ``PrefixCacheStats`` fields the records attribute to requests (in record order)."""


def check_attribution(w: Workload, step: int, ours: dict[str, int], stats: Any) -> None:
    """The step's admissions, as the recorder attributed them, add up to what vLLM's
    ``PrefixCacheStats`` counted in that step (all zero when it reported none)."""
    vllm_counts = {name: int(getattr(stats, name)) if stats else 0 for name in ATTRIBUTED}
    if ours != vllm_counts:
        raise RuntimeError(
            f"{w.name} step {step}: prefix stats attributed {ours}, vLLM counted {vllm_counts}"
        )


def record(w: Workload, max_steps: int = 100_000) -> dict[str, Any]:
    init_none_hash(sha256)
    sched = build_scheduler(w)
    rows = w.rows()
    pending = sorted(rows, key=lambda r: (r["arrival_step"], r["id"]))
    by_id = {str(r["id"]): r for r in rows}
    rec = {
        rid: {"admit": -1, "first": -1, "finish": -1, "preempt": 0, **dict.fromkeys(ATTRIBUTED, 0)}
        for rid in by_id
    }
    steps: list[list[int]] = []
    totals = dict.fromkeys(PREFIX_STATS, 0)
    api_cached: dict[str, int] = {}
    """Each request's ``num_cached_tokens`` as vLLM's outputs carry it (the API's)."""
    usable_blocks = w.num_gpu_blocks - 1
    nxt = 0
    step = 0
    while nxt < len(pending) or sched.get_num_unfinished_requests():
        if step >= max_steps:
            raise RuntimeError(f"{w.name}: not done after {max_steps} steps")
        while nxt < len(pending) and pending[nxt]["arrival_step"] <= step:
            sched.add_request(make_request(pending[nxt], w.block_size))
            nxt += 1
        before = {rid: sched.requests[rid].status for rid in sched.requests}
        out = sched.schedule()
        preempted = 0
        step_counts = dict.fromkeys(ATTRIBUTED, 0)
        for rid, n in out.num_scheduled_tokens.items():
            req = sched.requests[rid]
            r = rec[rid]
            if before[rid] in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                if r["admit"] < 0:
                    r["admit"] = step
                if w.enable_prefix_caching:  # vLLM looks up (and counts) only then
                    kind = "preempted_" if req.num_preemptions > 0 else ""
                    queried, hit = req.num_tokens, req.num_computed_tokens - n
                    for name, value in ((kind + "queries", queried), (kind + "hits", hit)):
                        r[name] += value
                        step_counts[name] += value
        for rid, req in sched.requests.items():
            if before[rid] == RequestStatus.RUNNING and req.status == RequestStatus.PREEMPTED:
                rec[rid]["preempt"] += 1
                preempted += 1
        in_use = usable_blocks - sched.kv_cache_manager.block_pool.get_num_free_blocks()
        steps.append([step, in_use, len(sched.running), len(sched.waiting), preempted])
        runner_out = fake_runner_output(sched, out)
        for rid, toks in zip(runner_out.req_ids, runner_out.sampled_token_ids, strict=True):
            if toks and rec[rid]["first"] < 0:
                rec[rid]["first"] = step
        step_stats = None
        for outs in sched.update_from_output(out, runner_out).values():
            if outs.scheduler_stats is not None:
                step_stats = outs.scheduler_stats.prefix_cache_stats
                add_prefix_stats(totals, step_stats)
            for o in outs.outputs:
                if o.prefill_stats is not None:
                    api_cached[o.request_id] = o.prefill_stats.num_cached_tokens
        check_attribution(w, step, step_counts, step_stats)
        for rid in list(rec):
            if rec[rid]["finish"] < 0 and rec[rid]["first"] >= 0 and rid not in sched.requests:
                rec[rid]["finish"] = step
        step += 1
    differ = {rid: (api_cached.get(rid), r["hits"]) for rid, r in rec.items()}
    differ = {rid: pair for rid, pair in differ.items() if pair[0] != pair[1]}
    if differ:
        raise RuntimeError(
            f"{w.name}: num_cached_tokens is not the first admission's hits: {differ}"
        )
    records = [
        [int(rid), r["admit"], r["first"], r["finish"], r["preempt"]]
        + [r[name] for name in ATTRIBUTED]
        for rid, r in sorted(rec.items(), key=lambda kv: int(kv[0]))
    ]
    return {
        "vllm_version": vllm.__version__,
        "workload": w.name,
        "seed": w.seed,
        "config": w.config(),
        "requests": rows,
        "steps": steps,
        "records": records,
        "prefix_cache": totals,
    }


def write(doc: dict[str, Any], path: Path) -> None:
    """One request or step per line: small diffs when vLLM changes a decision."""
    lines = ["{"]
    for key, value in doc.items():
        if isinstance(value, list):
            inner = ",\n".join("    " + json.dumps(v, separators=(",", ":")) for v in value)
            lines.append(f'  "{key}": [\n{inner}\n  ],')
        else:
            lines.append(f'  "{key}": {json.dumps(value, sort_keys=True)},')
    lines[-1] = lines[-1].rstrip(",")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*", default=None, help="workload names")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    known = {w.name for w in WORKLOADS}
    for name in args.only or ():
        if name not in known:
            parser.error(f"unknown workload {name!r}; known: {', '.join(sorted(known))}")
    for w in WORKLOADS:
        if args.only and w.name not in args.only:
            continue
        doc = record(w)
        path = args.out / f"{w.name}.json"
        write(doc, path)
        n_pre = sum(r[4] for r in doc["records"])
        peak = max(s[1] for s in doc["steps"])
        print(f"{path}: {len(doc['steps'])} steps, {n_pre} preemptions, peak {peak} blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
