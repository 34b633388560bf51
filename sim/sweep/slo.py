"""Service-level objectives for ``fragsim plan``: ``METRIC OP VALUE[UNIT]``.

``ttft_p99<=2s``, ``e2e_p99<=1500ms``, ``failure_rate<=0.001``,
``output_tokens_per_s>=500``. Latency metrics take ``s`` (the default) or ``ms``; other
metrics take no unit. Operators: ``<=``, ``<``, ``>=``, ``>``. An error quotes the SLO
and lists every metric with its units; SLOs no run can meet are refused before anything
runs (:func:`check_slos`).

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
    r"\s*(?P<metric>[A-Za-z0-9_.]+)\s*(?P<op><=|>=|=<|=>|==|=|<|>)\s*(?P<rest>.*?)\s*"
)
_VALUE = re.compile(r"(?P<value>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>\S*)")
UNITS = {"s": 1.0, "ms": 1e-3}
"""A latency SLO's units (seconds by default)."""

NON_NEGATIVE = frozenset([*LATENCY.values(), *COUNTS.values()])
"""Every metric is a count, a share, a rate or a latency: never below 0."""

POSITIVE = frozenset(LATENCY.values())
"""A latency is more than 0 (a first token takes at least one step)."""


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


def _shown(text: str, limit: int = 30) -> str:
    """An SLO as written, quoted and cut to ``limit`` characters (a message stays one
    line the command line shows whole, the metric list included in full)."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _metrics_line() -> str:
    return f"{', '.join(LATENCY)} in s or ms; {', '.join(COUNTS)} unitless"


def _name(column: str) -> str:
    """The SLO name of a metric column (``ttft_p99_s`` -> ``ttft_p99``)."""
    names = {v: k for k, v in (LATENCY | COUNTS).items()}
    return names[column]


def parse_slo(text: str) -> Slo:
    """``METRIC OP VALUE[UNIT]`` (module docstring); SloError says what is wrong (the
    part that is wrong, then every metric with its units, in full)."""
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise SloError(
            f"{_shown(text, 20)}: expected METRIC OP VALUE (OP: <= < >= >); {_metrics_line()}"
        )
    metric, op, rest = match.group("metric", "op", "rest")
    if op not in OPERATORS:
        raise SloError(f"{_shown(text)}: unknown operator {op!r}; expected <=, <, >= or >")
    if metric not in LATENCY and metric not in COUNTS:
        raise SloError(f"{_shown(text)}: unknown metric {metric!r}; {_metrics_line()}")
    value_match = _VALUE.fullmatch(rest)
    if value_match is None:
        raise SloError(f"{_shown(text)}: the value {rest!r} is not a number >= 0 (2, 0.5, 1e-3)")
    value, unit = value_match.group("value", "unit")
    if metric in LATENCY:
        if unit and unit not in UNITS:
            raise SloError(f"{_shown(text)}: unknown unit {unit!r}; {_metrics_line()}")
        threshold = float(value) * UNITS[unit or "s"]
        column = LATENCY[metric]
    else:
        if unit:
            raise SloError(f"{_shown(text)}: unknown unit {unit!r}; {_metrics_line()}")
        threshold = float(value)
        column = COUNTS[metric]
    if not math.isfinite(threshold):
        raise SloError(f"{_shown(text)}: the value must be a finite number")
    if column in RATES and threshold > 1:
        raise SloError(
            f"{_shown(text)}: {metric} is a share of requests, 0..1; got {value} (1 % is 0.01)"
        )
    return Slo(text.strip(), column, op, threshold)


def check_slos(slos: list[Slo]) -> None:
    """Refuse (SloError) SLOs no run can meet, before anything runs: one below what its
    metric can be (``ttft_p99<=0s``: a latency is more than 0; ``restarts<0``;
    ``failure_rate>1``), or two on one metric whose ranges do not meet
    (``ttft_p99<=1s`` with ``ttft_p99>=5s``; ``restarts<2`` with ``restarts>=2``)."""
    for slo in slos:
        lowest = 0.0
        if slo.op in ("<=", "<") and (
            slo.threshold < lowest
            or (slo.threshold == lowest and (slo.op == "<" or slo.metric in POSITIVE))
        ):
            what = "more than 0" if slo.metric in POSITIVE else "at least 0"
            raise SloError(f"{_shown(slo.text)}: no run can meet it: {_name(slo.metric)} is {what}")
        if slo.metric in RATES and (slo.threshold > 1 or (slo.threshold == 1 and slo.op == ">")):
            raise SloError(
                f"{_shown(slo.text)}: no run can meet it: {_name(slo.metric)} is at most 1"
            )
    for upper in slos:
        for lower in slos:
            if upper.metric != lower.metric or upper.op not in ("<=", "<"):
                continue
            if lower.op not in (">=", ">"):
                continue
            strict = upper.op == "<" or lower.op == ">"
            if lower.threshold > upper.threshold or (strict and lower.threshold == upper.threshold):
                raise SloError(
                    f"{_shown(upper.text)} and {_shown(lower.text)}: no run can meet both "
                    f"(the values of {_name(upper.metric)} they allow do not overlap)"
                )
