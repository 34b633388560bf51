"""A scenario's ``latency:`` block: pydantic configs that build a latency model.

Kept apart from :mod:`sim.latency.models` so that module is plain typed Python the
optional compiled build (mypyc, see ``sim/build.py``) can compile; pydantic models stay
interpreted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.fields import MAX_BYTES_PER_S, Flag, Number
from sim.latency.models import CalibratedLatency, ConstantLatency, LatencyModel, RooflineLatency
from sim.models.hardware import GpuSpec, ModelSpec

MIN_EFFICIENCY = 0.01
"""The least share of a peak (bandwidth, FLOP/s) a roofline may assume: 1 %."""
MIN_LINK_BYTES_PER_S = 10**9
"""The slowest all-reduce link a roofline may assume: 1 GB/s (PCIe 3.0 x1)."""


class RooflineLatencyConfig(BaseModel):
    """The roofline model from the hardware presets (the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["roofline"] = "roofline"
    mem_efficiency: Number = Field(
        default=0.8,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Achieved share of peak HBM bandwidth reading weights and KV.",
    )
    compute_efficiency: Number = Field(
        default=0.6,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Achieved share of peak dense bf16 FLOP/s (prefill).",
    )
    overhead_s: Number = Field(
        default=0.5e-3,
        ge=0,
        le=1,
        description="Fixed per-step time: scheduling, sampling, kernel launches.",
    )
    tp_allreduce_latency_s: Number = Field(
        default=10e-6,
        ge=0,
        le=1e-2,
        description="Latency of one all-reduce (tp > 1; two per layer).",
    )
    tp_link_bytes_per_s: Number = Field(
        default=200e9,
        ge=MIN_LINK_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="All-reduce bandwidth between ranks (tp > 1), bytes/s.",
    )

    def build(self, model: ModelSpec, gpu: GpuSpec, tp: int) -> LatencyModel:
        return RooflineLatency(
            model,
            gpu,
            tp,
            mem_efficiency=self.mem_efficiency,
            compute_efficiency=self.compute_efficiency,
            overhead_s=self.overhead_s,
            tp_allreduce_latency_s=self.tp_allreduce_latency_s,
            tp_link_bytes_per_s=self.tp_link_bytes_per_s,
        )


class ConstantLatencyConfig(BaseModel):
    """Every step takes ``step_s`` (hand-checkable queueing runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["constant"] = "constant"
    step_s: Number = Field(ge=1e-6, le=60, description="Seconds every step takes.")

    def build(self, model: ModelSpec, gpu: GpuSpec, tp: int) -> LatencyModel:
        return ConstantLatency(self.step_s)


class CalibratedLatencyConfig(BaseModel):
    """A model fitted on a GPU, loaded from its ``fragsim-latency/1`` JSON file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["calibrated"] = "calibrated"
    path: Path = Field(
        description="The calibration JSON (relative paths: to the working "
        "directory unless the scenario loader rebases them)."
    )
    check_hardware: Flag = Field(
        default=True, description="Refuse a file calibrated for another model, GPU or tp."
    )

    def build(self, model: ModelSpec, gpu: GpuSpec, tp: int) -> LatencyModel:
        latency = CalibratedLatency.from_json(self.path)
        if self.check_hardware:
            latency.check_hardware(model.name, gpu.name, tp, source=str(self.path))
        return latency


LatencyConfig = Annotated[
    RooflineLatencyConfig | ConstantLatencyConfig | CalibratedLatencyConfig,
    Field(discriminator="kind"),
]
"""A scenario's ``latency:`` block, chosen by ``kind``; each member has ``build``."""
