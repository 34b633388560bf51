"""The scenario's option blocks: the workload's source, the scheduler, a scheduled
restart and the metrics' sampling and alert thresholds (``sim.scenario.schema.Scenario``
holds them, with the hardware, allocator, latency, retention, fleet and offload blocks
defined beside their concerns). Each field has bounds and a description; each block is
frozen and forbids unknown keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.engine.batch import ClientRetry
from sim.engine.offload import OffloadSpec
from sim.engine.scheduler import SchedulerConfig
from sim.fields import (
    MAX_BYTES_PER_S,
    MAX_COUNT,
    MAX_SECONDS,
    MAX_TOKENS,
    Count,
    Flag,
    JsonObject,
    Number,
)
from sim.results.summary import AlertThresholds
from sim.scenario.errors import ScenarioError

MAX_RETRIES = 20
"""Client retries of one refused request (the last waits 2^19 backoffs)."""


class Strict(BaseModel):
    """A scenario block: unknown keys refused, frozen, no inf or NaN."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WorkloadConfig(Strict):
    """Where requests come from: exactly one of ``trace``, ``preset`` or ``synth``."""

    trace: Path | None = Field(None, description="A trace file (relative to the scenario).")
    format: str | None = Field(None, description="Trace format; default: detected.")
    arrival: JsonObject | None = Field(
        None,
        description="Arrival process for a length-only trace (traces.arrivals: "
        "{kind: poisson, rate_per_s: 2.0}, gamma, diurnal, bursty), seeded by the scenario.",
    )
    preset: str | None = Field(None, description="A named synthetic workload (traces.synth).")
    synth: JsonObject | None = Field(
        None,
        description="A synthetic workload spec (traces.synth.SynthSpec fields); with "
        "``preset`` it overrides the preset's fields.",
    )
    rate_scale: Number | None = Field(
        None, gt=0, le=10**6, description="Multiply the arrival rate."
    )
    tile_to_s: Number | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Repeat the trace back to back until it spans this long.",
    )
    max_requests: Count | None = Field(
        None, ge=1, le=MAX_COUNT, description="Keep the first N requests."
    )

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if self.trace is None and self.preset is None and self.synth is None:
            raise ValueError("give one of trace, preset or synth")
        if self.trace is not None and (self.preset is not None or self.synth is not None):
            raise ValueError("trace cannot be combined with preset or synth")
        if self.trace is None and self.arrival is not None:
            raise ValueError(
                "arrival draws times for a length-only trace file; a synthetic workload "
                "takes its arrival process in synth.arrival"
            )
        return self


class SchedulerOptions(Strict):
    """Continuous-batching scheduler settings (vLLM's names where they exist)."""

    max_num_seqs: Count = Field(256, ge=1, le=65536, description="Sequences per batch.")
    max_num_batched_tokens: Count | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Tokens per step (decode + prefill); default 8192, or the "
        "max sequence length when larger and prefill is not chunked.",
    )
    chunked_prefill: Flag = Field(False, description="Split long prefills across steps.")
    preemption: Literal["recompute", "swap", "fail"] = Field(
        "recompute",
        description="On growth failure: recompute (vLLM), swap to host, or fail "
        "the request (naive servers).",
    )
    on_admission_failure: Literal["queue", "reject"] = Field(
        "queue", description="Wait for memory, or answer out-of-memory at once (naive)."
    )
    head_of_line: Flag = Field(True, description="A blocked queue head blocks the queue.")
    retry_attempts: Count = Field(
        0, ge=0, le=MAX_RETRIES, description="Client retries after a refusal."
    )
    retry_backoff_s: Number = Field(
        1.0, ge=0, le=MAX_SECONDS, description="First retry delay; doubles."
    )
    queue_timeout_s: Number | None = Field(
        None, gt=0, le=MAX_SECONDS, description="Give up waiting after."
    )
    swap_bytes_per_s: Number = Field(
        25e9, ge=1e6, le=MAX_BYTES_PER_S, description="Host link for swap (PCIe)."
    )
    allocate_per_chunk: Flag = Field(
        False,
        description="vLLM v1's chunked prefill: admission allocates the first chunk, "
        "later chunks allocate as they run (needs chunked_prefill).",
    )
    scheduler_reserve_full_isl: Flag = Field(
        True,
        description="With allocate_per_chunk: admit only when the whole prompt fits "
        "(vLLM's flag of that name; false: the first chunk only).",
    )
    watermark: Number = Field(
        0.0,
        ge=0,
        lt=1,
        description="vLLM's watermark: the fraction of num_gpu_blocks a request admitted "
        "while others run must leave free (paged allocator).",
    )
    long_prefill_token_threshold: Count = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        description="vLLM's cap on one request's prefill chunk per step (0: none).",
    )
    long_prefill_token_threshold_adaptive: Flag = Field(
        False,
        description="vLLM's flag of that name: the cap is at least max_num_batched_tokens "
        "over the requests running or waiting.",
    )

    def client_retry(self) -> ClientRetry:
        """The clients' retries (``retry_attempts``, ``retry_backoff_s``)."""
        return ClientRetry(self.retry_attempts, self.retry_backoff_s)

    def build(
        self,
        max_seq_tokens: int,
        kv_bytes_per_token: int,
        hbm_bytes_per_s: float,
        paged_pool: tuple[int, int] | None = None,
        offload: OffloadSpec | None = None,
    ) -> SchedulerConfig:
        """``paged_pool``: (usable blocks, tokens per block) of a paged pool; vLLM counts
        its watermark over ``num_gpu_blocks``, the usable blocks and its null block.
        ``offload``: the replica's KV tiers (the scenario's ``kv_offload``, built)."""
        if self.allocate_per_chunk and not self.chunked_prefill:
            raise ScenarioError(
                "field scheduler.allocate_per_chunk: allocating per chunk needs "
                "chunked_prefill: true"
            )
        watermark_tokens = 0
        if self.watermark:
            if paged_pool is None:
                raise ScenarioError(
                    f"field scheduler.watermark: got {self.watermark}: vLLM's watermark "
                    f"counts blocks of a paged pool; use allocator kind paged or 0"
                )
            blocks, block_tokens = paged_pool
            watermark_tokens = int(self.watermark * (blocks + 1)) * block_tokens
        batched = self.max_num_batched_tokens
        if batched is None:
            batched = 8192 if self.chunked_prefill else max(8192, max_seq_tokens)
        elif not self.chunked_prefill and batched < max_seq_tokens:
            raise ScenarioError(
                f"field scheduler.max_num_batched_tokens: got {batched}: without "
                f"chunked_prefill it must be at least the maximum sequence length "
                f"({max_seq_tokens}), or a long prompt could only run alone (vLLM refuses "
                f"this too); raise it or set chunked_prefill: true"
            )
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=batched,
            chunked_prefill=self.chunked_prefill,
            preemption=self.preemption,
            on_admission_failure=self.on_admission_failure,
            head_of_line=self.head_of_line,
            retry=self.client_retry(),
            queue_timeout_s=self.queue_timeout_s,
            max_seq_tokens=max_seq_tokens,
            swap_s_per_token=kv_bytes_per_token / self.swap_bytes_per_s,
            # A copy reads and writes every byte once.
            copy_s_per_token=2 * kv_bytes_per_token / hbm_bytes_per_s,
            allocate_per_chunk=self.allocate_per_chunk,
            reserve_full_prompt=self.scheduler_reserve_full_isl,
            watermark_tokens=watermark_tokens,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            long_prefill_adaptive=self.long_prefill_token_threshold_adaptive,
            offload=offload,
        )


class RestartOptions(Strict):
    """A scheduled restart of the replica (the seed's routine restarts)."""

    every_s: Number = Field(gt=0, le=MAX_SECONDS, description="Restart after this much uptime.")
    mode: Literal["drain", "kill"] = Field("drain", description="Finish the batch first, or not.")
    downtime_s: Number = Field(
        120.0, ge=0, le=MAX_SECONDS, description="Model load time while down."
    )


class MetricsOptions(Strict):
    """Sampling and the seed's alert thresholds."""

    sample_interval_s: Number = Field(
        60.0, ge=1e-3, le=MAX_SECONDS, description="Periodic sample spacing."
    )
    high_free_share: Number = Field(
        0.25, ge=0, le=1, description="Failure at > this free: fragmentation alert."
    )
    ratio_alert: Number = Field(0.6, ge=0, le=1, description="Medium alert below this ratio.")
    ratio_severe: Number = Field(0.5, ge=0, le=1, description="Severe below this ratio.")
    uptime_rho_alert: Number = Field(
        0.5,
        ge=0,
        le=1,
        description="Spearman rho of the fragmentation ratio against uptime that alerts.",
    )

    def thresholds(self) -> AlertThresholds:
        return AlertThresholds(
            self.high_free_share, self.ratio_alert, self.ratio_severe, self.uptime_rho_alert
        )
