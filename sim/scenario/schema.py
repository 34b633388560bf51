"""Scenario files: YAML validated by pydantic at the edge, frozen configs past it.

A scenario names the workload (a trace file or a synthetic preset/spec), the hardware,
the allocator policy (``{kind: best_fit, ...}``, see ``policies.allocators.registry``),
scheduler options, the latency model, an optional periodic restart, the metrics
sampling, the seed and the mode. Every field has bounds and a description; a wrong
field is an error naming the field, the value and what is allowed.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.engine.batch import ClientRetry
from sim.engine.offload import OffloadSpec
from sim.engine.scheduler import SchedulerConfig
from sim.errors import clip, short, validation_lines
from sim.fields import (
    MAX_BYTES_PER_S,
    MAX_COUNT,
    MAX_SECONDS,
    MAX_SEED,
    MAX_TOKENS,
    Count,
    Flag,
    Number,
    strict_json,
)
from sim.latency.config import LatencyConfig, RooflineLatencyConfig
from sim.results.summary import AlertThresholds
from sim.scenario.builtin import builtin_names, resolve_scenario
from sim.scenario.errors import ScenarioError
from sim.scenario.errors import ScenarioWarning as ScenarioWarning  # re-exported
from sim.scenario.fleet import FleetConfig
from sim.scenario.hardware import HardwareConfig, merge_hardware
from sim.scenario.offload import OffloadConfig
from sim.scenario.retention import NoRetention, RetentionConfig
from sim.scenario.workload import check_workload
from sim.scenario.yaml_loader import MAX_EXPANDED_VALUES, load_yaml, yaml_error_line

MAX_RETRIES = 20
"""Client retries of one refused request (the last waits 2^19 backoffs)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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


class SchedulerOptions(_Strict):
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


class RestartOptions(_Strict):
    """A scheduled restart of the replica (the seed's routine restarts)."""

    every_s: Number = Field(gt=0, le=MAX_SECONDS, description="Restart after this much uptime.")
    mode: Literal["drain", "kill"] = Field("drain", description="Finish the batch first, or not.")
    downtime_s: Number = Field(
        120.0, ge=0, le=MAX_SECONDS, description="Model load time while down."
    )


class MetricsOptions(_Strict):
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


class Scenario(_Strict):
    """One simulated replica under one workload and one set of policies."""

    name: str = Field("scenario", description="Shown in outputs.")
    seed: Count = Field(0, ge=0, le=MAX_SEED, description="Seeds every random stream.")
    mode: Literal["fast", "exact"] = Field("fast", description="exact: one event per step.")
    duration_s: Number | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Stop simulated time here; default: when every request ended.",
    )
    initial_uptime_s: Number = Field(
        0.0, ge=0, le=MAX_SECONDS, description="Uptime of the replica at t=0."
    )
    workload: WorkloadConfig
    hardware: HardwareConfig = HardwareConfig()
    allocator: SerializeAsAny[AllocatorConfig] = Field(
        description="Allocator policy: {kind: ..., ...}."
    )  # dumped as its kind's class: growth_factor and the like kept (sweeps, keys)
    scheduler: SchedulerOptions = SchedulerOptions()
    latency: LatencyConfig = RooflineLatencyConfig()
    restart: RestartOptions | None = None
    retention: RetentionConfig = Field(
        NoRetention(), description="KV kept after a request finishes: {kind: ..., ...}."
    )
    metrics: MetricsOptions = MetricsOptions()
    fleet: FleetConfig | None = Field(
        None, description="A fleet of replicas (sim.fleet); none: one replica."
    )
    kv_offload: OffloadConfig | None = Field(
        None, description="KV tiers below every replica's GPU pool (docs/offload.md)."
    )

    @model_validator(mode="after")
    def _offload_whole_prompts(self) -> Scenario:
        if self.kv_offload is not None and self.scheduler.allocate_per_chunk:
            raise ValueError(
                "kv_offload with scheduler.allocate_per_chunk is not modelled: a tier "
                "load places the whole prompt at admission"
            )
        if self.kv_offload is not None and self.mode == "fast":
            for i, tier in enumerate(self.kv_offload.tiers):
                if tier.shared:
                    raise ValueError(
                        f"kv_offload.tiers.{i}.shared needs mode: exact: fast mode runs "
                        "replicas ahead of each other, so one could read another's "
                        "future stores from a shared store"
                    )
        return self

    @model_validator(mode="after")
    def _fleet_alone(self) -> Scenario:
        if self.fleet is not None:
            if self.restart is not None:
                raise ValueError(
                    "restart is the single replica's; a fleet restarts with fleet.restart"
                )
            if self.initial_uptime_s:
                raise ValueError(
                    "initial_uptime_s is the single replica's; a fleet's pools set "
                    "fleet.pools[i].initial_uptime_s"
                )
            if self.fleet.disaggregated:
                _check_disaggregated(self)
        return self

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
                    for line in validation_lines(
                        "allocator",
                        e,
                        value,
                        prefix=str(value["kind"]),
                        model=ALLOCATORS.get(value["kind"]),
                    )
                )
            ) from None


def _check_disaggregated(scenario: Scenario) -> None:
    """What a disaggregated fleet does not model (docs/disagg.md, "Limits"): swap
    preemption (a decode replica takes its KV in over the link, not from host memory)
    and retained KV (a prefill replica holds a prompt's KV for its transfer)."""
    if scenario.scheduler.preemption == "swap":
        raise ValueError(
            "scheduler.preemption swap is not modelled in a disaggregated fleet: use "
            "recompute or fail"
        )
    if scenario.retention.kind != "none":
        raise ValueError(
            "retention is not modelled in a disaggregated fleet (a prefill replica holds "
            "a prompt's KV for its transfer): use retention kind none"
        )


def format_validation_error(source: str, err: ValidationError, data: object) -> str:
    """One line per problem: ``FILE: field a.b: got VALUE: message``."""
    return "\n".join(validation_lines(source, err, data, model=Scenario))


MAX_SCENARIO_BYTES = 1 << 20
"""A scenario file is a few hundred bytes; past 1 MiB it is refused unread."""


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML -- a path, or the name of a built-in scenario
    when no such file exists (``sim.scenario.builtin``); relative paths inside are rebased
    on its folder. Raises ScenarioError with a message naming the file and field."""
    path = resolve_scenario(path)
    source = clip(str(path))
    if "\0" in str(path):
        raise ScenarioError(f"{source!r}: cannot read: a file name cannot hold a NUL character")
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError(f"{source}: not a regular file")
        if info.st_size > MAX_SCENARIO_BYTES:
            raise ScenarioError(
                f"{source}: {info.st_size:,} bytes; a scenario file is at most "
                f"{MAX_SCENARIO_BYTES:,} bytes"
            )
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        if path.suffix in (".yaml", ".yml"):
            raise ScenarioError(f"{source}: cannot read: no such file") from None
        raise ScenarioError(
            f"{source}: no such scenario file or built-in scenario; built-in: "
            f"{', '.join(builtin_names())} (fragsim scenarios describes them)"
        ) from None
    except OSError as e:
        raise ScenarioError(f"{source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(
            f"{source}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
        ) from None
    try:
        # messages quote numbers as written, and name the line of the field
        data = load_yaml(text, written=True, located=True)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: {yaml_error_line(e, text)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping of scenario fields at the top level")
    _rebase_paths(data, path.parent)
    return parse_scenario(data, source=source)


def _rebase_paths(data: dict[str, Any], base: Path) -> None:
    """Make the relative paths a scenario names relative to its own folder (in place):
    ``workload.trace``, ``latency.path``, ``hardware.model.config`` (and a fleet pool's),
    and the empirical-lengths ``path`` of
    ``workload.synth.lengths`` (or of each of its mixture components)."""

    def rebase(block: object, key: str) -> None:
        if isinstance(block, dict) and isinstance(block.get(key), str):
            block[key] = str(base / block[key])

    workload = data.get("workload")
    rebase(workload, "trace")
    rebase(data.get("latency"), "path")
    hardware = data.get("hardware")
    rebase(hardware.get("model") if isinstance(hardware, dict) else None, "config")
    fleet = data.get("fleet")
    pools = fleet.get("pools") if isinstance(fleet, dict) else None
    for pool in pools if isinstance(pools, list) else []:
        pool_hw = pool.get("hardware") if isinstance(pool, dict) else None
        rebase(pool_hw.get("model") if isinstance(pool_hw, dict) else None, "config")
    synth = workload.get("synth") if isinstance(workload, dict) else None
    lengths = synth.get("lengths") if isinstance(synth, dict) else None
    if isinstance(lengths, dict):
        rebase(lengths, "path")
        components = lengths.get("components")
        for component in components if isinstance(components, list) else []:
            if isinstance(component, dict):
                rebase(component.get("lengths"), "path")


def parse_scenario(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping; ScenarioError lines name ``source`` and the field.
    Validation is pydantic's strict mode on the data as JSON (``fields.strict_json``):
    no string becomes a number, no number a flag, in any block. A synthetic workload's
    spec and a trace's ``workload.arrival`` are validated here too (messages quote
    ``data``'s values, as a YAML file wrote them)."""
    _check_shape(data, source)
    try:
        text = strict_json(data)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{source}: not a mapping of plain values: {clip(str(e))}") from None
    allocator = data.get("allocator")
    if isinstance(allocator, dict) and allocator.get("kind") in ALLOCATORS:
        try:  # checked first so its errors read "field allocator.growth_factor: ..."
            ALLOCATORS[allocator["kind"]].model_validate_json(strict_json(allocator), strict=True)
        except ValidationError as e:
            raise ScenarioError(
                "\n".join(
                    validation_lines(
                        source,
                        e,
                        allocator,
                        prefix="allocator",
                        model=ALLOCATORS[allocator["kind"]],
                    )
                )
            ) from None
    try:
        scenario = Scenario.model_validate_json(text, strict=True)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(source, e, data)) from None
    if scenario.fleet is not None:
        check_pools(scenario, data, source)
    try:
        check_workload(scenario.workload, data.get("workload"))
    except ScenarioError as e:
        raise ScenarioError(
            "\n".join(f"{source}: {line}" for line in str(e).splitlines())
        ) from None
    return scenario


def check_pools(scenario: Scenario, data: dict[str, Any], source: str) -> None:
    """Validate each fleet pool's ``hardware`` (over the scenario's own, as the run
    merges them) and ``allocator`` as strictly as the scenario's blocks: an error names
    ``fleet.pools[i].hardware.FIELD`` (or ``.allocator.FIELD``), the value and what is
    allowed (``got 'nope': unknown gpu preset 'nope'; allowed: ...``)."""
    assert scenario.fleet is not None
    fleet = data.get("fleet")
    written = fleet.get("pools") if isinstance(fleet, dict) else None
    for i, pool in enumerate(scenario.fleet.pools):
        raw = written[i] if isinstance(written, list) and i < len(written) else {}
        where = f"fleet.pools[{i}]"
        if pool.hardware is not None:
            merged = merge_hardware(
                scenario.hardware.model_dump(mode="json", exclude_unset=True),
                raw.get("hardware") or pool.hardware,
            )
            try:
                HardwareConfig.model_validate_json(strict_json(merged), strict=True)
            except ValidationError as e:
                lines = validation_lines(
                    source, e, merged, prefix=f"{where}.hardware", model=HardwareConfig
                )
                raise ScenarioError("\n".join(lines)) from None
        if pool.allocator is not None:
            allocator = raw.get("allocator") or pool.allocator.model_dump(mode="json")
            kind = allocator.get("kind")
            try:
                if isinstance(kind, str) and kind in ALLOCATORS:
                    ALLOCATORS[kind].model_validate_json(strict_json(allocator), strict=True)
                else:
                    parse_allocator(allocator)
            except ValidationError as e:
                lines = validation_lines(
                    source,
                    e,
                    allocator,
                    prefix=f"{where}.allocator",
                    model=ALLOCATORS.get(str(kind)),
                )
                raise ScenarioError("\n".join(lines)) from None
            except ValueError as e:
                raise ScenarioError(f"{source}: field {where}.allocator: {e}") from None


def _check_shape(data: object, source: str) -> None:
    """Refuse, before pydantic or ``json`` walk it, data that stands for more than
    ``MAX_EXPANDED_VALUES`` values once shared references are expanded (what YAML
    aliases build; the loader bounds a file the same way), that contains itself, or
    whose ``kind`` is not a string (a discriminated union quotes the tag whole in its
    message). Each distinct container is visited once (iteratively, depth first)."""
    sizes: dict[int, int] = {}  # id -> values it stands for, expanded
    open_ids: set[int] = set()  # containers whose children are being visited
    stack: list[tuple[object, str, bool]] = [(data, "", False)]
    while stack:
        node, where, children_done = stack.pop()
        if not isinstance(node, dict | list | tuple):
            continue
        children = list(node.items() if isinstance(node, dict) else enumerate(node))
        if children_done:
            sizes[id(node)] = 1 + sum(sizes.get(id(v), 1) for _, v in children)
            open_ids.discard(id(node))
            if sizes[id(node)] > MAX_EXPANDED_VALUES:
                raise ScenarioError(
                    f"{source}: the scenario stands for more than {MAX_EXPANDED_VALUES:,} "
                    f"values with its shared parts expanded (at {where or 'the top'})"
                )
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_ids:
            raise ScenarioError(f"{source}: field {where.rstrip('.')}: contains itself")
        if isinstance(node, dict) and "kind" in node and not isinstance(node["kind"], str):
            raise ScenarioError(
                f"{source}: field {where}kind: got {short(node['kind'])}: expected the "
                f"name of a kind"
            )
        open_ids.add(id(node))
        stack.append((node, where, True))
        stack.extend((v, f"{where}{k}.", False) for k, v in children)
