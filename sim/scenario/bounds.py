"""What a run may cost, checked before anything is built or simulated.

A scenario the schema allows can still ask for more than a machine has. The workload's
own size -- a billion synthetic requests, a trace tiled to 10^12 s, arrivals at 10^300 s
-- is bounded by ``traces.bounds`` (at most 50 million rows, arrivals within 1e9 s),
before anything is drawn or copied. A run costs more per request and per simulated
second than a table does, so the bounds below are checked from the scenario and the
request table before the run, and refused with the number, the bound and the field that
sets it (a :class:`ScenarioError`): a trace spanning 1e9 s sampled every minute, a
restart every microsecond. A fleet's periodic work is bounded the same way
(:func:`check_fleet`): restart-policy and autoscaler calls, crash-clock draws and alert
scrapes over the span; its other timing fields cost nothing per simulated second. The
run's own counters hold the same bounds while simulating, for what only the run can
tell (the simulated time a backlog takes to drain after the last arrival).

The bounds are far above what the built-in scenarios use (six days sampled every
5 minutes: 1,728 samples; about 52,000 requests; 6 restarts).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sim.scenario.errors import ScenarioError

if TYPE_CHECKING:
    from sim.scenario.fleet import FleetConfig

MAX_REQUESTS = 10_000_000
"""Requests in one run (one replica): the engine holds a record of about 1 KB per
request (a workload table may hold 50 million rows: ``traces.bounds.MAX_REQUESTS``)."""

MAX_SAMPLES = 1_000_000
"""Periodic samples (``metrics.sample_interval_s``) of one replica in one run: a year
at 30 s intervals."""

MAX_RESTARTS = 1_000_000
"""Scheduled restarts of one replica in one run."""

MAX_POLICY_CHECKS = 1_000_000
"""Calls of a fleet's restart policy, and of its autoscaler, in one run (each every
``interval_s`` of simulated time; a call reads every node)."""

MAX_FAULT_DRAWS = 1_000_000
"""Times between crashes drawn in one run, all nodes together: a node's crash clock runs
from its first ready instant, one draw per ``fleet.faults.mtbf_s`` on average, whatever
the node is doing (a crash while it is down is ignored)."""

MAX_SCRAPES = MAX_SAMPLES
"""Scrape instants of a fleet's alert evaluation in one run (each replica is scraped at
each; ``fleet.alerts.scrape_interval_s``)."""


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


def check_fleet(fleet: FleetConfig, span_s: float, how: str) -> None:
    """Refuse a fleet run whose periodic work over the simulated span (``how`` says what
    sets it) passes its bound: restart-policy or autoscaler calls (span / ``interval_s``
    > :data:`MAX_POLICY_CHECKS`), crash-clock draws (nodes x span / ``mtbf_s`` >
    :data:`MAX_FAULT_DRAWS`; nodes: the autoscaler's ceiling, else the initial count),
    alert scrapes (span / ``scrape_interval_s`` > :data:`MAX_SCRAPES`). Each error names
    the field that sets the rate. The fleet's other timing fields cost nothing per
    second of simulated time: they are delays after an event (lifecycle, drain, repair),
    thresholds read at a policy's calls, or refreshes taken lazily at routing decisions
    (``router_refresh_s``)."""
    for field, what, interval_s in policy_intervals(fleet):
        _check_count(
            span_s / interval_s,
            MAX_POLICY_CHECKS,
            (field, span_s, how),
            f"one {what} call every {quantity(interval_s)} s",
            f"{what} calls",
        )
    mtbf_s = fleet.faults.mtbf_s
    if mtbf_s is not None:
        scaled = fleet.autoscaler.kind != "none"
        nodes = fleet.ceiling if scaled else fleet.initial_replicas
        _check_count(
            nodes * span_s / mtbf_s,
            MAX_FAULT_DRAWS,
            ("fleet.faults.mtbf_s", span_s, how),
            f"{nodes:,} nodes{' (the most the autoscaler keeps)' if scaled else ''} "
            f"crashing every {quantity(mtbf_s)} s on average",
            "crash-clock draws",
        )
    scrape_s = fleet.alerts.scrape_interval_s
    _check_count(
        span_s / scrape_s,
        MAX_SCRAPES,
        ("fleet.alerts.scrape_interval_s", span_s, how),
        f"a scrape every {quantity(scrape_s)} s",
        "scrapes",
    )


def policy_intervals(fleet: FleetConfig) -> list[tuple[str, str, float]]:
    """(field, what, ``interval_s``) of the fleet's restart policy and autoscaler, for
    each that is not ``none``."""
    out = []
    if fleet.restart.kind != "none":
        out.append(("fleet.restart.interval_s", "restart-policy", fleet.restart.interval_s))
    if fleet.autoscaler.kind != "none":
        out.append(("fleet.autoscaler.interval_s", "autoscaler", fleet.autoscaler.interval_s))
    return out


def _check_count(
    count: float, limit: int, where: tuple[str, float, str], what: str, noun: str
) -> None:
    field, span_s, how = where
    if not count <= limit:  # also NaN
        raise ScenarioError(
            f"field {field}: the run spans {quantity(span_s)} s ({how}); {what} makes "
            f"{quantity(count)} {noun}; at most {limit:,} per run: lower the rate or set "
            f"duration_s"
        )


def count_exceeded(field: str, limit: int, noun: str, now_s: float) -> ScenarioError:
    """The error of a fleet run that passed one of :func:`check_fleet`'s bounds while
    simulating (``noun``: ``"restart-policy calls"``, ...): requests still running long
    after the last arrival."""
    return ScenarioError(
        f"field {field}: the run took more than {limit:,} {noun} (simulated time "
        f"{quantity(now_s)} s, requests still running after the last arrival); lower the "
        f"rate or set duration_s"
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
