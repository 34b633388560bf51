"""Scenario files: YAML validated by pydantic at the edge, frozen configs past it.

A scenario names the workload (a trace file or a synthetic preset/spec), the hardware,
the allocator policy (``{kind: best_fit, ...}``, see ``policies.allocators.registry``),
scheduler options, the latency model, an optional periodic restart, the metrics
sampling, the seed and the mode. Every field has bounds and a description; a wrong
field is an error naming the field, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.engine.scheduler import SchedulerConfig
from sim.errors import validation_lines
from sim.hardware import HardwareConfig
from sim.latency.config import LatencyConfig, RooflineLatencyConfig
from sim.results.summary import AlertThresholds


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadConfig(_Strict):
    """Where requests come from: exactly one of ``trace``, ``preset`` or ``synth``."""

    trace: Path | None = Field(None, description="A trace file (relative to the scenario).")
    format: str | None = Field(None, description="Trace format; default: detected.")
    arrival: dict[str, Any] | None = Field(
        None,
        description="Arrival process for a length-only trace (traces.arrivals: "
        "{kind: poisson, rate_per_s: 2.0}, gamma, diurnal, bursty), seeded by the scenario.",
    )
    preset: str | None = Field(None, description="A named synthetic workload (traces.synth).")
    synth: dict[str, Any] | None = Field(
        None,
        description="A synthetic workload spec (traces.synth.SynthSpec fields); with "
        "``preset`` it overrides the preset's fields.",
    )
    rate_scale: float | None = Field(None, gt=0, description="Multiply the arrival rate.")
    tile_to_s: float | None = Field(
        None, gt=0, description="Repeat the trace back to back until it spans this long."
    )
    max_requests: int | None = Field(None, ge=1, description="Keep the first N requests.")

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if self.trace is None and self.preset is None and self.synth is None:
            raise ValueError("give one of trace, preset or synth")
        if self.trace is not None and (self.preset is not None or self.synth is not None):
            raise ValueError("trace cannot be combined with preset or synth")
        return self


class SchedulerOptions(_Strict):
    """Continuous-batching scheduler settings (vLLM's names where they exist)."""

    max_num_seqs: int = Field(256, ge=1, le=65536, description="Sequences per batch.")
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens per step (decode + prefill); default 8192, or the "
        "max sequence length when larger and prefill is not chunked.",
    )
    chunked_prefill: bool = Field(False, description="Split long prefills across steps.")
    preemption: Literal["recompute", "swap", "fail"] = Field(
        "recompute",
        description="On growth failure: recompute (vLLM), swap to host, or fail "
        "the request (naive servers).",
    )
    on_admission_failure: Literal["queue", "reject"] = Field(
        "queue", description="Wait for memory, or answer out-of-memory at once (naive)."
    )
    head_of_line: bool = Field(True, description="A blocked queue head blocks the queue.")
    retry_attempts: int = Field(0, ge=0, le=100, description="Client retries after a refusal.")
    retry_backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles.")
    queue_timeout_s: float | None = Field(None, gt=0, description="Give up waiting after.")
    swap_bytes_per_s: float = Field(25e9, gt=0, description="Host link for swap (PCIe).")

    def build(
        self, max_seq_tokens: int, kv_bytes_per_token: int, hbm_bytes_per_s: float
    ) -> SchedulerConfig:
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
            retry_attempts=self.retry_attempts,
            retry_backoff_s=self.retry_backoff_s,
            queue_timeout_s=self.queue_timeout_s,
            max_seq_tokens=max_seq_tokens,
            swap_s_per_token=kv_bytes_per_token / self.swap_bytes_per_s,
            # A copy reads and writes every byte once.
            copy_s_per_token=2 * kv_bytes_per_token / hbm_bytes_per_s,
        )


class RestartOptions(_Strict):
    """A scheduled restart of the replica (the seed's routine restarts)."""

    every_s: float = Field(gt=0, description="Restart after this much uptime.")
    mode: Literal["drain", "kill"] = Field("drain", description="Finish the batch first, or not.")
    downtime_s: float = Field(120.0, ge=0, description="Model load time while down.")


class MetricsOptions(_Strict):
    """Sampling and the seed's alert thresholds."""

    sample_interval_s: float = Field(60.0, ge=1e-3, description="Periodic sample spacing.")
    high_free_share: float = Field(
        0.25, ge=0, le=1, description="Failure at > this free: fragmentation alert."
    )
    ratio_alert: float = Field(0.6, ge=0, le=1, description="Medium alert below this ratio.")
    ratio_severe: float = Field(0.5, ge=0, le=1, description="Severe below this ratio.")
    uptime_rho_alert: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Spearman rho of the fragmentation ratio against uptime that alerts.",
    )

    def thresholds(self) -> AlertThresholds:
        return AlertThresholds(
            self.high_free_share, self.ratio_alert, self.ratio_severe, self.uptime_rho_alert
        )


class Scenario(_Strict):
    """One simulated replica under one workload and one set of policies."""

    name: str = Field("scenario", description="Shown in outputs.")
    seed: int = Field(0, ge=0, description="Seeds every random stream.")
    mode: Literal["fast", "exact"] = Field("fast", description="exact: one event per step.")
    duration_s: float | None = Field(
        None, gt=0, description="Stop simulated time here; default: when every request ended."
    )
    initial_uptime_s: float = Field(0.0, ge=0, description="Uptime of the replica at t=0.")
    workload: WorkloadConfig
    hardware: HardwareConfig = HardwareConfig()
    allocator: AllocatorConfig = Field(description="Allocator policy: {kind: ..., ...}.")
    scheduler: SchedulerOptions = SchedulerOptions()
    latency: LatencyConfig = RooflineLatencyConfig()
    restart: RestartOptions | None = None
    metrics: MetricsOptions = MetricsOptions()

    @field_validator("allocator", mode="before")
    @classmethod
    def _allocator(cls, value: Any) -> AllocatorConfig:
        if isinstance(value, AllocatorConfig):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping with a 'kind' (one of {', '.join(ALLOCATORS)})")
        try:
            return parse_allocator(value)
        except ValidationError as e:
            raise ValueError(
                "; ".join(
                    line.removeprefix("allocator: ")
                    for line in validation_lines("allocator", e, value, prefix=str(value["kind"]))
                )
            ) from None


def format_validation_error(source: str, err: ValidationError, data: object) -> str:
    """One line per problem: ``FILE: field a.b: got VALUE: message``."""
    return "\n".join(validation_lines(source, err, data))


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML -- a path, or the name of a built-in scenario
    when no such file exists (``sim.scenario.builtin``); relative paths inside are rebased
    on its folder. Raises ScenarioError with a message naming the file and field."""
    from sim.scenario.builtin import resolve_scenario

    path = resolve_scenario(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ScenarioError(
            f"{path}: not valid YAML: {getattr(e, 'problem', None) or e}{where}"
        ) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of scenario fields at the top level")
    base = path.parent
    workload = data.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("trace"), str):
        workload["trace"] = str(base / workload["trace"])
    latency = data.get("latency")
    if isinstance(latency, dict) and isinstance(latency.get("path"), str):
        latency["path"] = str(base / latency["path"])
    return parse_scenario(data, source=str(path))


def parse_scenario(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping; ScenarioError lines name ``source`` and the field."""
    allocator = data.get("allocator")
    if isinstance(allocator, dict) and allocator.get("kind") in ALLOCATORS:
        try:  # checked first so its errors read "field allocator.growth_factor: ..."
            ALLOCATORS[allocator["kind"]].model_validate(allocator)
        except ValidationError as e:
            raise ScenarioError(
                "\n".join(validation_lines(source, e, allocator, prefix="allocator"))
            ) from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(source, e, data)) from None
