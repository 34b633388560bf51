"""Turn a scenario's ``workload`` block into a canonical request frame."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import TypeAdapter, ValidationError

from sim.errors import validation_lines
from sim.scenario.schema import Scenario, ScenarioError, WorkloadConfig
from traces import load, synth, transform
from traces.arrivals import ArrivalSpec


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def synth_spec(w: WorkloadConfig) -> synth.SynthSpec:
    """The synthetic spec: a preset, a full spec, or a preset with fields overridden."""
    data: dict[str, Any] = {}
    if w.preset is not None:
        if w.preset not in synth.PRESETS:
            raise ScenarioError(
                f"workload.preset: got {w.preset!r}; allowed: {', '.join(sorted(synth.PRESETS))}"
            )
        data = synth.PRESETS[w.preset].model_dump()
    if w.synth:
        data = _merge(data, w.synth)
        if "duration_s" in w.synth and "num_requests" not in w.synth:
            data["num_requests"] = None
        if "num_requests" in w.synth and "duration_s" not in w.synth:
            data["duration_s"] = None
    try:
        return synth.SynthSpec.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(
            "\n".join(
                line.removeprefix("scenario: ")
                for line in validation_lines("scenario", e, data, prefix="workload.synth")
            )
        ) from None


def arrival_spec(w: WorkloadConfig) -> ArrivalSpec | None:
    """The validated ``workload.arrival`` (for length-only traces), if any."""
    if w.arrival is None:
        return None
    try:
        spec: ArrivalSpec = TypeAdapter(ArrivalSpec).validate_python(w.arrival)
    except ValidationError as e:
        raise ScenarioError(
            "\n".join(
                line.removeprefix("scenario: ")
                for line in validation_lines("scenario", e, w.arrival, prefix="workload.arrival")
            )
        ) from None
    return spec


def load_workload(scenario: Scenario) -> pd.DataFrame:
    """Load or synthesise the requests (seeded by the scenario), then apply transforms.
    Raises TraceError for bad trace files and ScenarioError for bad specs."""
    w = scenario.workload
    if w.trace is not None:
        df = load(w.trace, format=w.format, arrivals=arrival_spec(w), seed=scenario.seed)
    else:
        df = synth.generate(synth_spec(w), seed=scenario.seed)
    if w.rate_scale is not None:
        df = transform.rescale_rate(df, w.rate_scale)
    if w.tile_to_s is not None:
        df = transform.tile(df, w.tile_to_s)
    if w.max_requests is not None:
        df = df.iloc[: w.max_requests].reset_index(drop=True)
    return df
