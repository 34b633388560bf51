"""Turn a scenario's ``workload`` block into a canonical request frame.

Sizes are checked before anything is drawn or copied: ``traces.bounds`` (a synthetic
spec's count and span, rescaling, tiling), whose errors are reworded with the scenario's
field names, then the run's own bound on requests (:mod:`sim.scenario.bounds`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import TypeAdapter, ValidationError

from sim.errors import short, validation_lines
from sim.fields import JsonObject, strict_json
from sim.scenario import bounds
from sim.scenario.errors import ScenarioError, ScenarioWarning
from sim.scenario.yaml_loader import LocatedDict
from traces import TraceError, load, synth, transform
from traces.arrivals import ArrivalSpec, mean_rate_per_s
from traces.bounds import BoundError
from traces.formats import FORMATS, detect_format

if TYPE_CHECKING:
    from sim.scenario.options import WorkloadConfig
    from sim.scenario.schema import Scenario


def _merge(base: JsonObject, override: JsonObject) -> JsonObject:
    """``base`` with ``override``'s fields written over it, nested mappings merged
    field by field -- except a mapping that names another ``kind`` than the one it
    overrides: that is a different block (``lengths: {kind: empirical, path: ...}`` over
    a preset's ``pair``), and replaces it whole."""
    out = dict(base)
    for k, v in override.items():
        old = out.get(k)
        if (
            isinstance(v, dict)
            and isinstance(old, dict)
            and v.get("kind", old.get("kind")) == old.get("kind")
        ):
            out[k] = _merge(old, v)
        else:
            out[k] = v
    lines = getattr(override, "key_lines", None)
    if lines is None:
        return out
    located = LocatedDict()  # the file's lines, for messages (yaml_loader.LocatedDict)
    located.update(out)
    located.key_lines.update(lines)
    return located


def check_workload(w: WorkloadConfig, written: object = None) -> None:
    """Validate the parts of ``w`` the scenario schema keeps as plain mappings -- the
    synthetic spec (``preset`` / ``synth``) or a trace's ``arrival`` -- as
    :func:`synth_spec` and :func:`arrival_spec` do, with messages quoting ``written``
    (the ``workload`` mapping as the user wrote it) where it holds the value."""
    block = written if isinstance(written, dict) else {}
    if w.trace is None:
        synth_spec(w, block.get("synth"))
    else:
        arrival_spec(w, block.get("arrival"))


def _spec_data(w: WorkloadConfig, overrides: JsonObject | None) -> JsonObject:
    """The preset's fields (if any) with ``overrides`` (the ``synth`` mapping) over them."""
    data: JsonObject = {}
    if w.preset is not None:
        if w.preset not in synth.PRESETS:
            raise ScenarioError(
                f"field workload.preset: got {short(w.preset)}; allowed: "
                f"{', '.join(sorted(synth.PRESETS))}"
            )
        data = synth.PRESETS[w.preset].model_dump(mode="json")
    if overrides:
        data = _merge(data, overrides)
        if "duration_s" in overrides and "num_requests" not in overrides:
            data["num_requests"] = None
        if "num_requests" in overrides and "duration_s" not in overrides:
            data["duration_s"] = None
    return data


def synth_spec(w: WorkloadConfig, written: object = None) -> synth.SynthSpec:
    """The synthetic spec: a preset, a full spec, or a preset with fields overridden.
    Refuses a spec that asks for more than ``bounds.MAX_REQUESTS`` requests. Messages
    quote ``written`` (the ``synth`` mapping as the user wrote it) where given."""
    data = _spec_data(w, w.synth)
    try:
        spec = synth.SynthSpec.model_validate_json(strict_json(data), strict=True)
    except ValidationError as e:
        shown = _spec_data(w, written) if isinstance(written, dict) else data
        raise ScenarioError(
            "\n".join(
                line.removeprefix("scenario: ")
                for line in validation_lines(
                    "scenario", e, shown, prefix="workload.synth", model=synth.SynthSpec
                )
            )
        ) from None
    if spec.num_requests is not None:
        bounds.check_requests(spec.num_requests, "workload.synth.num_requests")
    elif spec.duration_s is not None:
        rate = mean_rate_per_s(spec.arrival)
        bounds.check_requests(
            rate * spec.duration_s,
            "workload.synth.duration_s",
            f"{spec.duration_s:g} s at a mean arrival rate of {rate:g}/s",
        )
    return spec


def arrival_spec(w: WorkloadConfig, written: object = None) -> ArrivalSpec | None:
    """The validated ``workload.arrival`` (for length-only traces), if any; messages
    quote ``written`` (the mapping as the user wrote it) where given."""
    if w.arrival is None:
        return None
    try:
        adapter: TypeAdapter[ArrivalSpec] = TypeAdapter(ArrivalSpec)
        spec = adapter.validate_json(strict_json(w.arrival), strict=True)
    except ValidationError as e:
        shown = written if isinstance(written, dict) else w.arrival
        raise ScenarioError(
            "\n".join(
                line.removeprefix("scenario: ")
                for line in validation_lines(
                    "scenario", e, shown, prefix="workload.arrival", model=ArrivalSpec
                )
            )
        ) from None
    return spec


def load_workload(scenario: Scenario) -> pd.DataFrame:
    """Load or synthesise the requests (seeded by the scenario), then apply transforms.
    Raises TraceError for bad trace files and ScenarioError for bad specs (also for an
    empirical-lengths file, naming ``workload.synth.lengths.path``). A ``workload.arrival``
    given for a trace that carries its own times is ignored with a ScenarioWarning."""
    w = scenario.workload
    if w.trace is not None:
        arrivals = arrival_spec(w)
        df = load(w.trace, format=w.format, arrivals=arrivals, seed=scenario.seed)
        if arrivals is not None:
            _warn_if_timed(w.trace, w.format)
    else:
        spec = synth_spec(w)
        try:
            df = synth.generate(spec, seed=scenario.seed)
        except TraceError as e:
            raise ScenarioError(f"field {_lengths_field(w, spec, e)}: {e}") from None
        except BoundError as e:  # e.g. too many prefix hashes for the drawn prompts
            raise ScenarioError(
                f"field workload.synth.{e.field}: got {short(e.got)}: {e.message}"
            ) from None
    field = "workload"
    try:
        if w.rate_scale is not None:
            field = "workload.rate_scale"
            df = transform.rescale_rate(df, w.rate_scale)
        if w.tile_to_s is not None:
            field = "workload.tile_to_s"
            df = transform.tile(df, w.tile_to_s)
    except BoundError as e:
        raise ScenarioError(f"field {field}: got {short(e.got)}: {e.message}") from None
    if w.max_requests is not None:
        df = df.iloc[: w.max_requests].reset_index(drop=True)
    return df


def _warn_if_timed(trace: Path, format: str | None) -> None:
    """``workload.arrival`` draws times for a length-only file; a file with its own
    times keeps them, and the user hears that the field had no effect."""
    fmt = FORMATS[format] if format is not None and format in FORMATS else detect_format(trace)
    if fmt.name != "lengths":
        warnings.warn(
            f"field workload.arrival: ignored: {trace} carries its own arrival times "
            f"(format {fmt.name}); the field applies to length-only files",
            ScenarioWarning,
            stacklevel=3,
        )


def _lengths_field(w: WorkloadConfig, spec: synth.SynthSpec, e: TraceError) -> str:
    """The scenario field that named the empirical-lengths file ``e`` is about."""
    lengths = spec.lengths
    if isinstance(lengths, synth.MixtureLengths):
        for i, component in enumerate(lengths.components):
            if isinstance(component.lengths, synth.EmpiricalLengths) and str(
                component.lengths.path
            ) == str(e.path):
                return f"workload.synth.lengths.components.{i}.lengths.path"
    if w.synth is None or "lengths" not in w.synth:
        return f"workload.preset ({w.preset})"
    return "workload.synth.lengths.path"
