"""What a run will cost, checked before it runs: requests, and the periodic samples,
restarts, client retries and fleet policy calls over the simulated span it must reach
(the bounds of :mod:`sim.scenario.bounds`); and the requests that arrive after
``duration_s`` (left out of the run, counted in the summary)."""

from __future__ import annotations

import pandas as pd

from sim.scenario import bounds
from sim.scenario.schema import Scenario


def check_run_cost(scenario: Scenario, requests: pd.DataFrame) -> None:
    """Refuse, before simulating, a run that would cost more than the bounds of
    :mod:`sim.scenario.bounds` allow: requests; periodic samples and restarts over the
    simulated span it must reach (the last arrival, or the end of a restart's downtime
    that begins before it, or a refused request's last client retry after the last
    arrival; ``duration_s`` if earlier). Raises ScenarioError naming the number and the
    field."""
    bounds.check_requests(len(requests), "workload", "the workload")
    last_s = float(requests["arrival_s"].max()) if len(requests) else 0.0
    how = f"the last arrival at {bounds.quantity(last_s)} s"
    if scenario.workload.rate_scale is not None:
        how += f", workload.rate_scale {scenario.workload.rate_scale:g}"
    span_s = last_s
    restart = scenario.restart
    if restart is not None:
        first_s = max(0.0, restart.every_s - scenario.initial_uptime_s)
        if first_s < last_s and first_s + restart.downtime_s > span_s:
            # The replica goes down before the last arrival, which waits it out.
            span_s = first_s + restart.downtime_s
            how = (
                f"a restart at {bounds.quantity(first_s)} s, before the last arrival, "
                f"then {bounds.quantity(restart.downtime_s)} s down"
            )
    field = "metrics.sample_interval_s"
    sched = scenario.scheduler
    retry = sched.client_retry()
    if retry.attempts > 0 and retry.backoff_s > 0:
        # A request refused at the last arrival retries after 1, 2, 4, ... backoffs.
        retry_s = retry.span_s()
        if last_s + retry_s > span_s:
            span_s = last_s + retry_s
            how += (
                f", then {retry.attempts} client retries of a refused request over "
                f"{bounds.quantity(retry_s)} s (retry_backoff_s {retry.backoff_s:g}, "
                "doubling)"
            )
            field = "scheduler.retry_attempts/retry_backoff_s"
    if scenario.duration_s is not None and not scenario.duration_s >= span_s:
        span_s, how = scenario.duration_s, "duration_s"
        field = "metrics.sample_interval_s"
    bounds.check_span(span_s, how, scenario.metrics.sample_interval_s, field)
    if restart is not None:
        bounds.check_restarts(span_s, how, restart.every_s, restart.downtime_s)
    if scenario.fleet is not None:
        bounds.check_fleet(scenario.fleet, span_s, how)


def within_duration(scenario: Scenario, requests: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The requests that arrive by ``duration_s``, and how many arrive after it: those
    are left out of the run (they would be neither queued nor running at its end), and
    the summary counts them as ``requests.beyond_duration``."""
    if scenario.duration_s is None or not len(requests):
        return requests, 0
    keep = (requests["arrival_s"] <= scenario.duration_s).to_numpy()
    beyond = len(requests) - int(keep.sum())
    return (requests[keep].reset_index(drop=True), beyond) if beyond else (requests, 0)
