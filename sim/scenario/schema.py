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
from typing import Literal

import yaml
from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import ALLOCATORS, parse_allocator
from sim.errors import clip, short, validation_lines
from sim.fields import MAX_SECONDS, MAX_SEED, Count, JsonObject, Number, strict_json
from sim.latency.config import LatencyConfig, RooflineLatencyConfig
from sim.scenario.allocator_field import allocator_from
from sim.scenario.builtin import builtin_names, resolve_scenario
from sim.scenario.errors import ScenarioError
from sim.scenario.errors import ScenarioWarning as ScenarioWarning  # re-exported
from sim.scenario.fleet import FleetConfig
from sim.scenario.hardware import HardwareConfig, merge_hardware
from sim.scenario.offload import OffloadConfig
from sim.scenario.options import MetricsOptions, SchedulerOptions, Strict, WorkloadConfig
from sim.scenario.options import RestartOptions as RestartOptions  # re-exported
from sim.scenario.retention import NoRetention, RetentionConfig
from sim.scenario.workload import check_workload
from sim.scenario.yaml_loader import MAX_EXPANDED_VALUES, load_yaml, yaml_error_line


class Scenario(Strict):
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
    def _allocator(cls, value: object) -> AllocatorConfig:
        return allocator_from(value)


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


def _rebase_paths(data: JsonObject, base: Path) -> None:
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


def parse_scenario(data: JsonObject, source: str = "<scenario>") -> Scenario:
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
    kind = allocator.get("kind") if isinstance(allocator, dict) else None
    if isinstance(allocator, dict) and isinstance(kind, str) and kind in ALLOCATORS:
        try:  # checked first so its errors read "field allocator.growth_factor: ..."
            ALLOCATORS[kind].model_validate_json(strict_json(allocator), strict=True)
        except ValidationError as e:
            raise ScenarioError(
                "\n".join(
                    validation_lines(
                        source,
                        e,
                        allocator,
                        prefix="allocator",
                        model=ALLOCATORS[kind],
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


def check_pools(scenario: Scenario, data: JsonObject, source: str) -> None:
    """Validate each fleet pool's ``hardware`` (over the scenario's own, as the run
    merges them) and ``allocator`` as strictly as the scenario's blocks: an error names
    ``fleet.pools[i].hardware.FIELD`` (or ``.allocator.FIELD``), the value and what is
    allowed (``got 'nope': unknown gpu preset 'nope'; allowed: ...``)."""
    assert scenario.fleet is not None
    fleet = data.get("fleet")
    written = fleet.get("pools") if isinstance(fleet, dict) else None
    for i, pool in enumerate(scenario.fleet.pools):
        raw = written[i] if isinstance(written, list) and i < len(written) else None
        raw = raw if isinstance(raw, dict) else {}  # validated above: a mapping
        where = f"fleet.pools[{i}]"
        if pool.hardware is not None:
            merged = merge_hardware(
                scenario.hardware.model_dump(mode="json", exclude_unset=True),
                _written_block(raw, "hardware") or pool.hardware,
            )
            try:
                HardwareConfig.model_validate_json(strict_json(merged), strict=True)
            except ValidationError as e:
                lines = validation_lines(
                    source, e, merged, prefix=f"{where}.hardware", model=HardwareConfig
                )
                raise ScenarioError("\n".join(lines)) from None
        if pool.allocator is not None:
            allocator = _written_block(raw, "allocator") or pool.allocator.model_dump(mode="json")
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


def _written_block(pool: JsonObject, key: str) -> JsonObject | None:
    """The pool's block ``key`` as written (a mapping: the pool was validated), if any."""
    block = pool.get(key)
    return block if isinstance(block, dict) else None


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
