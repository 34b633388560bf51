"""What a run may cost, checked before anything is built or simulated.

A scenario the schema allows can still ask for more than a machine has. The workload's
own size -- a billion synthetic requests, a trace tiled to 10^12 s, arrivals at 10^300 s
-- is bounded by ``traces.bounds`` (at most 50 million rows, arrivals within 1e9 s),
before anything is drawn or copied. A run costs more per request and per simulated
second than a table does, so the bounds below are checked from the scenario and the
request table before the run, and refused with the number, the bound and the field that
sets it (a :class:`ScenarioError`): a trace spanning 1e9 s sampled every minute, a
restart every microsecond. The run's own counters hold the same bounds while
simulating, for what only the run can tell (the simulated time a backlog takes to drain
after the last arrival).

The bounds are far above what the built-in scenarios use (six days sampled every
5 minutes: 1,728 samples; about 52,000 requests; 6 restarts).
"""

from __future__ import annotations

import math

from sim.scenario.schema import ScenarioError

MAX_REQUESTS = 10_000_000
"""Requests in one run (one replica): the engine holds a record of about 1 KB per
request (a workload table may hold 50 million rows: ``traces.bounds.MAX_REQUESTS``)."""

MAX_SAMPLES = 1_000_000
"""Periodic samples (``metrics.sample_interval_s``) of one replica in one run: a year
at 30 s intervals."""

MAX_RESTARTS = 1_000_000
"""Scheduled restarts of one replica in one run."""


def check_requests(count: float, field: str, how: str | None = None) -> None:
    """Refuse a workload of more than :data:`MAX_REQUESTS` requests; ``how`` says where
    the number comes from when ``field`` is not the number itself."""
    if not count <= MAX_REQUESTS:  # also NaN
        made = f"{how} makes {quantity(count)}" if how else f"got {quantity(count)}"
        raise ScenarioError(f"field {field}: {made} requests; at most {MAX_REQUESTS:,} per run")


def check_span(
    span_s: float,
    how: str,
    sample_interval_s: float,
    field: str = "metrics.sample_interval_s",
) -> None:
    """Refuse a run whose simulated span (``how`` says what sets it) would take more
    than :data:`MAX_SAMPLES` periodic samples; ``field`` is the one the error names
    (what made the span long, when it is not the sampling)."""
    samples = span_s / sample_interval_s
    if not samples <= MAX_SAMPLES:
        hint = (
            "sample less often or set duration_s"
            if field == "metrics.sample_interval_s"
            else "lower them, sample less often or set duration_s"
        )
        raise ScenarioError(
            f"field {field}: the run spans {quantity(span_s)} s ({how}), "
            f"{quantity(samples)} samples at {quantity(sample_interval_s)} s; at most "
            f"{MAX_SAMPLES:,} per run: {hint}"
        )


def check_restarts(span_s: float, how: str, every_s: float, downtime_s: float) -> None:
    """Refuse a run that would restart the replica more than :data:`MAX_RESTARTS`
    times: each restart takes ``every_s`` of uptime plus ``downtime_s``."""
    restarts = span_s / (every_s + downtime_s)
    if not restarts <= MAX_RESTARTS:
        raise ScenarioError(
            f"field restart.every_s: the run spans {quantity(span_s)} s ({how}); a restart "
            f"every {quantity(every_s)} s with {quantity(downtime_s)} s down makes {quantity(restarts)} "
            f"restarts; at most {MAX_RESTARTS:,} per run"
        )


def samples_exceeded(sample_interval_s: float, now_s: float) -> ScenarioError:
    """The error of a run that passed :data:`MAX_SAMPLES` while simulating (the backlog
    after the last arrival took that long to drain)."""
    return ScenarioError(
        f"field metrics.sample_interval_s: the run took more than {MAX_SAMPLES:,} "
        f"samples at {quantity(sample_interval_s)} s (simulated time {quantity(now_s)} s, requests "
        f"still running after the last arrival); sample less often or set duration_s"
    )


def restarts_exceeded(now_s: float) -> ScenarioError:
    """The error of a run that passed :data:`MAX_RESTARTS` while simulating."""
    return ScenarioError(
        f"field restart.every_s: the run restarted the replica {MAX_RESTARTS:,} times "
        f"(simulated time {quantity(now_s)} s); restart less often or set duration_s"
    )


def quantity(x: float) -> str:
    """A count or a span for a message: ``1,234`` when small, ``1.2e+300`` when not."""
    if math.isfinite(x) and abs(x) < 1e15:
        return f"{x:,.0f}" if abs(x) >= 100 or x == int(x) else f"{x:.3g}"
    return f"{x:.3g}"
