"""Service-level objectives for ``fragsim plan``: ``METRIC OP VALUE[UNIT]``.

``ttft_p99<=2s``, ``e2e_p99<=1500ms``, ``failure_rate<=0.001``,
``output_tokens_per_s>=500``. Latency metrics take ``s`` (the default) or ``ms``; other
metrics take no unit. Operators: ``<=``, ``<``, ``>=``, ``>``.

A point meets an SLO when **every** replication meets it (a replication without the
metric -- no request finished, so no TTFT -- does not). That is stricter as
replications are added, never looser, and needs no distributional assumption.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

LATENCY = {
    f"{name}_{q}": f"{name}_{q}_s" for name in ("ttft", "tpot", "e2e") for q in ("p50", "p99")
}
"""SLO name -> metric column, for the latencies (seconds)."""

COUNTS = {
    "failure_rate": "failure_rate",
    "failed_requests": "failed_requests",
    "allocation_failures": "allocation_failures",
    "fragmentation_failures": "fragmentation_failures",
    "at_high_free_failures": "failures_at_high_free",
    "restarts": "restarts",
    "output_tokens_per_s": "output_tokens_per_s",
}
"""SLO name -> metric column, for the metrics without a unit."""

RATES = frozenset({"failure_rate"})
"""Metric columns that are shares (0..1): an SLO above 1 is a mistake (a percentage)."""

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}

_PATTERN = re.compile(
    r"\s*(?P<metric>[a-z0-9_]+)\s*(?P<op><=|>=|<|>)\s*"
    r"(?P<value>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ms|s)?\s*"
)


class SloError(ValueError):
    """An SLO that cannot be read."""


@dataclass(frozen=True)
class Slo:
    text: str
    """As written."""
    metric: str
    """The metric column (``sim.sweep.summary.METRICS``)."""
    op: str
    threshold: float
    """In the metric's unit (seconds for latencies)."""

    def met_by(self, value: float) -> bool:
        """Whether one replication's value meets it (NaN never does)."""
        return not math.isnan(value) and OPERATORS[self.op](value, self.threshold)


def parse_slo(text: str) -> Slo:
    """``METRIC OP VALUE[UNIT]`` (module docstring); SloError says what is wrong."""
    match = _PATTERN.fullmatch(text)
    names = ", ".join([*LATENCY, *COUNTS])
    if match is None:
        raise SloError(
            f"{text!r}: expected METRIC OP VALUE (ttft_p99<=2s, failure_rate<=0.001); "
            f"OP is one of <=, <, >=, >; metrics: {names}"
        )
    metric, op, value, unit = match.group("metric", "op", "value", "unit")
    if metric in LATENCY:
        threshold = float(value) / (1000.0 if unit == "ms" else 1.0)
        column = LATENCY[metric]
    elif metric in COUNTS:
        if unit is not None:
            raise SloError(f"{text!r}: {metric} takes no unit (got {unit!r})")
        threshold = float(value)
        column = COUNTS[metric]
    else:
        raise SloError(f"{text!r}: unknown metric {metric!r}; metrics: {names}")
    if not math.isfinite(threshold):
        raise SloError(f"{text!r}: the value must be a finite number")
    if column in RATES and threshold > 1:
        raise SloError(
            f"{text!r}: {metric} is a share of requests, 0..1; got {value} (1 % is 0.01)"
        )
    return Slo(text.strip(), column, op, threshold)
