"""fragsim's paged engine on the workloads recorded from vLLM (``tests/golden/vllm/``).

:func:`replay` drives :class:`~sim.engine.scheduler.Scheduler` over a
:class:`~policies.allocators.paged.PagedAllocator` on vLLM's clock, the step index: a
request arriving at step ``k`` is submitted before step ``k`` begins, and a step that
runs nothing still counts (``tools/vllm_recorder/record.py`` does the same on vLLM's
side). It returns rows in the golden files' shapes, so a test compares them with ``==``.

Prompt token ids are rebuilt from each request's row exactly as the recorder builds
them, and hashed into fragsim's chained ``prefix_hashes``, one per full block: two
requests share a hash where vLLM's block hashes are equal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies.allocators.base import PoolSpec
from policies.allocators.paged import PagedAllocator
from sim.engine.batch import Group, SchedEvent, SchedulerConfig
from sim.engine.scheduler import Scheduler

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "vllm"
PREFIX_TOKEN_BASE = 1000
UNIQUE_TOKEN_BASE = 100_000
"""The recorder's token ids (``tools/vllm_recorder/record.py``)."""


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    return doc


def golden_names() -> list[str]:
    return sorted(p.stem for p in GOLDEN_DIR.glob("*.json"))


def prompt_token_ids(row: dict[str, int]) -> list[int]:
    """The recorder's prompt for ``row``: its prefix group's tokens, then its own."""
    group = row["prefix_group"]
    shared = [PREFIX_TOKEN_BASE + 7 * group + (i % 5) for i in range(row["prefix_tokens"])]
    return shared + [UNIQUE_TOKEN_BASE + row["id"]] * row["unique_tokens"]


def block_hashes(tokens: list[int], block_tokens: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks (a block's hash covers every token before it)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = hash((parent, tuple(tokens[start : start + block_tokens])))
        out.append(parent)
    return tuple(out)


def scheduler_config(config: dict[str, Any], off: str = "") -> SchedulerConfig:
    """The golden's vLLM settings as fragsim's scheduler settings (``off``: a vLLM
    semantic left out, to show it matters)."""
    assert config["enable_chunked_prefill"]
    return SchedulerConfig(
        max_num_seqs=config["max_num_seqs"],
        max_num_batched_tokens=config["max_num_batched_tokens"],
        chunked_prefill=True,
        max_seq_tokens=config["max_model_len"],
        allocate_per_chunk=off != "allocate_per_chunk",
        reserve_full_prompt=config["scheduler_reserve_full_isl"],
        watermark_tokens=int(config["watermark"] * config["num_gpu_blocks"]) * config["block_size"],
        long_prefill_token_threshold=config["long_prefill_token_threshold"],
        long_prefill_adaptive=config["long_prefill_token_threshold_adaptive"]
        and off != "long_prefill_token_threshold_adaptive",
    )


def allocator(config: dict[str, Any], off: str = "") -> PagedAllocator:
    """vLLM's pool: ``num_gpu_blocks`` less its null block, its prefix cache."""
    bt = config["block_size"]
    spec = PoolSpec(capacity_tokens=(config["num_gpu_blocks"] - 1) * bt)
    return PagedAllocator(
        spec,
        block_size_tokens=bt,
        prefix_caching=config["enable_prefix_caching"],
        cache_generated_blocks=off != "cache_generated_blocks",
        reuse_uncached_first=off != "reuse_uncached_first",
    )


@dataclass
class Replay:
    """What fragsim decided, in the golden files' shapes."""

    steps: list[list[int]] = field(default_factory=list)
    records: list[list[int]] = field(default_factory=list)


def replay(
    doc: dict[str, Any], *, ticks: bool = True, off: str = "", max_steps: int = 100_000
) -> Replay:
    config = doc["config"]
    bt = config["block_size"]
    preempted: list[int] = []

    def on_event(e: SchedEvent) -> None:
        if e.kind == "preemption":
            preempted.append(e.request_id)

    sched = Scheduler(
        scheduler_config(config, off), allocator(config, off), on_event=on_event, ticks=ticks
    )
    usable_blocks = config["num_gpu_blocks"] - 1
    out = Replay()

    def on_step(step: int) -> None:
        sched.sync_allocator()
        in_use = usable_blocks - sched.allocator.stats().free_tokens // bt
        out.steps.append([step, in_use, len(sched.running), len(sched.waiting), len(preempted)])
        preempted.clear()

    groups = run_engine(doc, sched, on_step, max_steps)
    for g in sorted(groups, key=lambda g: g.request_id):
        decisions = [_step(g.admit_s), _step(g.first_token_s), _step(g.finish_s), g.preemptions]
        out.records.append([g.request_id, *decisions, *prefix_counts(g)])
    return out


def run_engine(
    doc: dict[str, Any],
    sched: Scheduler,
    on_step: Callable[[int], None] | None = None,
    max_steps: int = 100_000,
) -> list[Group]:
    """Drive ``sched`` over the golden's requests on vLLM's clock (module docstring),
    calling ``on_step(step)`` after each step's composition; returns the groups, in
    arrival order, once every request has ended."""
    config = doc["config"]
    rows = sorted(doc["requests"], key=lambda r: (r["arrival_step"], r["id"]))
    groups = []
    for r in rows:
        tokens = prompt_token_ids(r)
        hashes = (
            block_hashes(tokens, config["block_size"]) if config["enable_prefix_caching"] else ()
        )
        groups.append(
            Group(r["id"], float(r["arrival_step"]), len(tokens), r["output_tokens"], 1, hashes)
        )
    nxt = 0
    step = 0
    while nxt < len(groups) or sched.running or sched.waiting:
        assert step < max_steps, f"not done after {max_steps} steps"
        while nxt < len(groups) and groups[nxt].arrival_s <= step:
            sched.submit(groups[nxt], float(step))
            nxt += 1
        s = sched.begin_step(float(step))
        if on_step is not None:
            on_step(step)
        if s is not None:
            sched.end_step(s, float(step))
        step += 1
    return groups


def prefix_counts(g: Group) -> list[int]:
    """The group's prefix-cache accounting in the records' order (none without a prefix
    cache: vLLM then looks nothing up)."""
    return [
        g.prefix_queried_tokens,
        g.prefix_hit_tokens,
        g.preempted_queried_tokens,
        g.preempted_hit_tokens,
    ]


def _step(t: float) -> int:
    return -1 if math.isnan(t) else int(t)
