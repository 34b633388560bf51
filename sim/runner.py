"""``run(scenario, requests) -> RunResult``: wire a scenario into a SimPy environment.

Processes: the replica (fed the requests directly: ``Replica.feed``), the periodic metric
sampler, and an optional scheduled restart. The run ends when every
request has ended (ok, refused, timed out) or at ``duration_s``.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from policies.allocators.base import PoolSpec
from policies.allocators.config import AllocatorConfig, PagedConfig
from sim.engine.batch import groups_from_columns
from sim.engine.recorder import Recorder
from sim.engine.replica import Replica
from sim.engine.scheduler import Group, SchedulerConfig
from sim.latency.calibrated import MAX_STEP_S
from sim.latency.models import LatencyModel
from sim.results.io import RunResult
from sim.results.summary import summarize
from sim.scenario import bounds
from sim.scenario.retention import RetentionConfig
from sim.scenario.schema import Scenario, ScenarioError, ScenarioWarning


@dataclass(frozen=True)
class GroupColumns:
    """A trace's requests as columns (numpy arrays, in arrival order) from which each
    request's ``Group`` is made when it is needed (:meth:`group`): a fleet makes them at
    arrival, so only requests in flight are objects."""

    ids: np.ndarray
    arrivals_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    num_seqs: np.ndarray
    prefix_hashes: list[tuple[int, ...]]
    retain_s: np.ndarray | None
    retain_until_s: np.ndarray | None

    def __len__(self) -> int:
        return len(self.ids)

    def groups(self, start: int, stop: int) -> list[Group]:
        """The Groups of rows ``start`` to ``stop`` (one compiled pass over plain lists;
        a fleet makes them a chunk at a time as their arrivals come)."""
        retain = until = None
        if self.retain_s is not None and self.retain_until_s is not None:
            retain = self.retain_s[start:stop].tolist()
            until = self.retain_until_s[start:stop].tolist()
        return groups_from_columns(
            self.ids[start:stop].tolist(),
            self.arrivals_s[start:stop].tolist(),
            self.prompt_tokens[start:stop].tolist(),
            self.output_tokens[start:stop].tolist(),
            self.num_seqs[start:stop].tolist(),
            self.prefix_hashes[start:stop],
            retain,
            until,
        )


def group_columns(
    requests: pd.DataFrame, retention: RetentionConfig | None = None, seed: int = 0
) -> GroupColumns:
    """The requests' columns, with each request's KV retention after it finishes drawn
    from ``retention`` (default: none) with the scenario's ``seed``."""
    n = len(requests)
    col = requests.get
    width = np.ones(n, dtype=np.int64)
    samples = col("num_samples")
    beams = col("beam_width")
    if samples is not None:
        width = np.maximum(width, samples.fillna(1).to_numpy(dtype=np.int64))
    if beams is not None:
        width = np.maximum(width, beams.fillna(1).to_numpy(dtype=np.int64))
    retain_s = until_s = None
    if retention is not None and retention.kind != "none":
        retain_s, until_s = retention.draw(requests, seed)
    return GroupColumns(
        requests["request_id"].to_numpy(dtype=np.int64),
        requests["arrival_s"].to_numpy(dtype=np.float64),
        requests["prompt_tokens"].to_numpy(dtype=np.int64),
        requests["output_tokens"].to_numpy(dtype=np.int64),
        width,
        _hash_tuples(requests),
        retain_s,
        until_s,
    )


def make_groups(
    requests: pd.DataFrame, retention: RetentionConfig | None = None, seed: int = 0
) -> list[Group]:
    """One Group per trace row, in arrival order, with its KV retention after it
    finishes drawn from ``retention`` (default: none) with the scenario's ``seed``."""
    c = group_columns(requests, retention, seed)
    return c.groups(0, len(c))


def _hash_tuples(requests: pd.DataFrame) -> list[tuple[int, ...]]:
    """Each row's ``prefix_hashes`` as a tuple (empty when missing); only the rows that
    have hashes are converted (traces without them keep an all-empty column)."""
    n = len(requests)
    out: list[tuple[int, ...]] = [()] * n
    hashes = requests.get("prefix_hashes")
    if hashes is None:
        return out
    if isinstance(hashes.dtype, pd.ArrowDtype):
        lengths = hashes.list.len().fillna(0).to_numpy(dtype=np.int64)
        rows = np.flatnonzero(lengths)
        for i, h in zip(rows.tolist(), hashes.iloc[rows].tolist(), strict=True):
            out[i] = tuple(map(int, h))
        return out
    for i, h in enumerate(hashes.tolist()):
        if h is not None and len(h) > 0:
            out[i] = tuple(map(int, h))
    return out


@dataclass(frozen=True)
class Parts:
    """What a scenario builds into before simulating (so its errors surface early)."""

    spec: PoolSpec
    scheduler: SchedulerConfig
    latency: LatencyModel
    allocator: AllocatorConfig
    kv_capacity_tokens: int
    gpu_usd_per_hour: float = 0.0
    """The GPU's price (``sim.hardware``'s table, or an inline GPU's)."""


def build_parts(scenario: Scenario, requests: pd.DataFrame | None = None) -> Parts:
    """Resolve the hardware budget, the scheduler, the latency model and the allocator
    (one is built to check it fits the pool). ``requests`` lets the allocator adopt the
    trace's prefix-hash block size. Raises ScenarioError naming the field (a calibration
    file's errors name ``latency.path`` and the file)."""
    hw = scenario.hardware
    budget = hw.resolve()
    model, gpu = hw.model_spec, hw.gpu_spec
    spec = PoolSpec(
        capacity_tokens=budget.kv_capacity_tokens,
        kv_bytes_per_token=budget.replica_kv_bytes_per_token,
        max_seq_tokens=model.max_seq_tokens,
        num_layers=model.num_layers,
        tensor_parallel=hw.tensor_parallel,
    )
    sched_config = scenario.scheduler.build(
        model.max_seq_tokens, budget.replica_kv_bytes_per_token, gpu.hbm_bytes_per_s
    )
    try:
        latency = scenario.latency.build(model, gpu, hw.tensor_parallel)
    except ValueError as e:  # a calibration file that cannot be used
        field = "latency.path" if scenario.latency.kind == "calibrated" else "latency"
        raise ScenarioError(f"field {field}: {e}") from None
    check_step_times(scenario.latency.kind, latency, sched_config, budget.kv_capacity_tokens)
    allocator = scenario.allocator
    if requests is not None:
        allocator = _adopt_hash_block(allocator, requests)
    try:
        allocator.build(spec)
    except ValueError as e:
        raise ScenarioError(f"field allocator: {e}") from None
    return Parts(
        spec, sched_config, latency, allocator, budget.kv_capacity_tokens, gpu.usd_per_hour
    )


def check_step_times(
    kind: str, latency: LatencyModel, config: SchedulerConfig, capacity_tokens: int
) -> None:
    """Refuse a latency model whose steps at the scenario's extremes -- a full prefill
    budget (``max_num_batched_tokens``), and ``max_num_seqs`` sequences decoding at
    ``max_seq_tokens`` each, both reading as much KV as the pool can hold -- are not
    finite or take more than ``MAX_STEP_S`` (a GPU step takes milliseconds: a minute
    means a setting is off by orders of magnitude, and the run's clock would run far
    past its bounds). The model's out-of-range counters are left as they were."""
    kv = min(capacity_tokens, config.max_num_seqs * config.max_seq_tokens)
    saved = (latency.out_of_range_calls, latency.first_out_of_range)
    try:
        steps = (
            (
                f"{config.max_num_batched_tokens:,} prefill tokens "
                "(scheduler.max_num_batched_tokens)",
                latency.step_time_s(config.max_num_batched_tokens, 0, kv),
            ),
            (
                f"{config.max_num_seqs:,} sequences decoding (scheduler.max_num_seqs)",
                latency.step_time_s(0, config.max_num_seqs, kv),
            ),
        )
    finally:
        latency.out_of_range_calls, latency.first_out_of_range = saved
    for what, step_s in steps:
        if not step_s <= MAX_STEP_S:  # also inf and NaN
            raise ScenarioError(
                f"field latency: the {kind} model takes {bounds.quantity(step_s)} s for a "
                f"step of {what} reading {kv:,} KV tokens; a step takes at most "
                f"{MAX_STEP_S:g} s: check the latency block's fields and the GPU's "
                "bandwidth and FLOP/s"
            )


def _adopt_hash_block(allocator: AllocatorConfig, requests: pd.DataFrame) -> AllocatorConfig:
    """A prefix-caching policy reads each hash as covering ``hash_block_tokens``; take it
    from the trace's ``prefix_block_tokens`` unless the scenario sets it (and refuse a
    mismatch: hits would be silently wrong)."""
    column = requests.get("prefix_block_tokens")
    if column is None or not isinstance(allocator, PagedConfig):
        return allocator  # only the paged pool has a prefix cache
    sizes = sorted({int(v) for v in column.to_numpy() if v > 0})
    if not sizes:
        return allocator
    if len(sizes) > 1:
        raise ScenarioError(
            f"workload: the trace mixes prefix block sizes {sizes}; the prefix cache needs one"
        )
    configured = allocator.hash_block_tokens
    if configured is None:
        return allocator.model_copy(update={"hash_block_tokens": sizes[0]})
    if configured != sizes[0]:
        raise ScenarioError(
            f"field allocator.hash_block_tokens: got {configured}, but the "
            f"trace's prefix hashes cover {sizes[0]}-token blocks"
        )
    return allocator


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
    if sched.retry_attempts > 0 and sched.retry_backoff_s > 0:
        # A request refused at the last arrival retries after 1, 2, 4, ... backoffs.
        retry_s = sched.retry_backoff_s * (2**sched.retry_attempts - 1)
        if last_s + retry_s > span_s:
            span_s = last_s + retry_s
            how += (
                f", then {sched.retry_attempts} client retries of a refused request over "
                f"{bounds.quantity(retry_s)} s (retry_backoff_s {sched.retry_backoff_s:g}, "
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


def run(
    scenario: Scenario,
    requests: pd.DataFrame | None = None,
    *,
    progress: Callable[[float, float], None] | None = None,
    parts: Parts | None = None,
) -> RunResult:
    """Simulate ``requests`` (canonical trace frame, sorted by arrival; by default the
    scenario's own workload, ``load_workload(scenario)``) under ``scenario``.

    ``progress(now_s, end_s)`` is called every 1 % of simulated time when given;
    ``parts`` (from :func:`build_parts`) skips building them again. A run that would
    cost more than the bounds of :mod:`sim.scenario.bounds` raises ScenarioError, before
    simulating (:func:`check_run_cost`) or as soon as the run passes one."""
    if requests is None:
        from sim.scenario.workload import load_workload

        requests = load_workload(scenario)
    check_run_cost(scenario, requests)
    note = scenario.retention.warning(requests)
    if note is not None:
        warnings.warn(note, ScenarioWarning, stacklevel=2)
    if scenario.fleet is not None:
        from sim.fleet.run import run_fleet

        requests, beyond = within_duration(scenario, requests)
        with _gc_paused():
            return run_fleet(scenario, requests, progress=progress, beyond_duration=beyond)
    parts = parts or build_parts(scenario, requests)
    requests, beyond = within_duration(scenario, requests)
    with _gc_paused():
        return _simulate(scenario, requests, parts, progress, beyond)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while simulating. The run allocates a Group and a
    few small objects per request that all stay alive until it ends (no cycles become
    garbage before that), so collections would only rescan them: 15-20 % of the run's
    wall time on long traces. The run breaks its own reference cycles when it ends
    (``_release``), so reference counting frees its objects and the first collection
    after re-enabling has nearly nothing to scan. The previous state is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _simulate(
    scenario: Scenario,
    requests: pd.DataFrame,
    parts: Parts,
    progress: Callable[[float, float], None] | None,
    beyond_duration: int,
) -> RunResult:
    spec, sched_config, latency = parts.spec, parts.scheduler, parts.latency
    allocator = parts.allocator
    groups = make_groups(requests, scenario.retention, scenario.seed)

    env = simpy.Environment()
    recorder = Recorder()
    replica = Replica(
        env,
        0,
        sched_config,
        lambda: allocator.build(spec),
        latency,
        hooks=recorder,
        exact=scenario.mode == "exact",
        initial_uptime_s=scenario.initial_uptime_s,
    )
    replica.feed(groups)
    processes = [_sampler(env, replica, recorder, scenario.metrics.sample_interval_s)]
    if scenario.restart is not None:
        processes.append(
            _restarts(
                env,
                replica,
                scenario.restart.every_s,
                scenario.restart.mode,
                scenario.restart.downtime_s,
            )
        )
    last_arrival_s = groups[-1].arrival_s if groups else 0.0
    simulate_until_done(
        env, scenario, recorder, (len(groups), last_arrival_s), processes, progress, beyond_duration
    )
    recorder.sample(replica, trigger="final")
    recorder.finish(groups)
    req_df, ts_df, ev_df = recorder.frames()
    summary = run_summary(
        scenario,
        (req_df, ts_df, ev_df),
        env.now,
        beyond_duration,
        (allocator.kind, parts.kv_capacity_tokens, latency),
        (replica.steps_total, replica.wakeups_total),
    )
    _release(env, replica, recorder, processes)
    return RunResult(req_df, ts_df, ev_df, summary)


def simulate_until_done(
    env: simpy.Environment,
    scenario: Scenario,
    recorder: Recorder,
    requests: tuple[int, float],
    processes: list[Generator[simpy.Event, Any, None]],
    progress: Callable[[float, float], None] | None,
    beyond_duration: int,
) -> None:
    """Start ``processes`` (and a progress reporter) and run until every request --
    ``requests`` = (how many, the last arrival time) -- has ended (the recorder counts them; a replica's clock may run ahead of
    ``env.now``: the run ends at the last finish) or ``duration_s``. Requests left out
    (arriving after ``duration_s``) could not have ended by then: with any, the run
    stops at ``duration_s``, as it would with them."""
    all_done = env.event()
    total, last_arrival = requests

    def on_count(done: int) -> None:
        if done == total and not all_done.triggered:
            timer = env.timeout(max(0.0, recorder.last_finish_s - env.now))
            assert timer.callbacks is not None
            timer.callbacks.append(lambda _: _succeed(all_done))

    recorder.on_count = on_count
    if progress is not None:
        end_hint = scenario.duration_s or max(last_arrival * 1.05, 1.0)
        processes.append(_progress(env, progress, end_hint))
    for process in processes:
        env.process(process)
    if total == 0:
        all_done.succeed()
    stop: simpy.Event = all_done
    if scenario.duration_s is not None:
        cut = env.timeout(scenario.duration_s)
        stop = cut if beyond_duration else all_done | cut
    env.run(until=stop)


def run_summary(
    scenario: Scenario,
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    end_s: float,
    beyond_duration: int,
    pool: tuple[str, int, LatencyModel],
    engine: tuple[int, int],
) -> dict[str, Any]:
    """The summary of a run's (requests, timeseries, events) ending at ``end_s``, with
    the scenario's identity, ``pool`` = (allocator kind, KV capacity, latency model) and
    ``engine`` = (steps, wake-ups) counters."""
    req_df, ts_df, ev_df = frames
    summary = summarize(req_df, ts_df, ev_df, end_s=end_s, thresholds=scenario.metrics.thresholds())
    if scenario.duration_s is not None:
        summary["requests"]["beyond_duration"] = beyond_duration
    summary["scenario"] = scenario.name
    summary["seed"] = scenario.seed
    summary["allocator"], summary["kv_capacity_tokens"] = pool[0], pool[1]
    summary["latency"] = _latency_report(scenario, pool[2])
    summary["engine"] = {
        "mode": scenario.mode,
        "steps": engine[0],
        "wakeups": engine[1],
        "end_s": end_s,
    }
    return summary


def _release(
    env: simpy.Environment,
    replica: Replica,
    recorder: Recorder,
    processes: list[Generator[simpy.Event, Any, None]],
) -> None:
    """Break the reference cycles a finished run leaves — the environment's pending
    events hold processes whose suspended generators hold the environment, the replica
    and its scheduler's callbacks hold each other, the recorder holds a closure over
    itself — so reference counting frees the run's objects (every request's record
    included) as soon as the caller drops them. Cyclic collection was paused during the
    run; without this, they would wait for a full collection."""
    replica.close()
    for process in processes:
        process.close()
    recorder.on_count = None
    env._queue.clear()


def _succeed(event: simpy.Event) -> None:
    event.succeed()


def _sampler(
    env: simpy.Environment, replica: Replica, recorder: Recorder, interval_s: float
) -> Generator[simpy.Event, Any, None]:
    for _ in range(bounds.MAX_SAMPLES + 1):
        recorder.sample(replica)
        yield env.timeout(interval_s)
    raise bounds.samples_exceeded(interval_s, env.now)


def _restarts(
    env: simpy.Environment, replica: Replica, every_s: float, mode: Any, downtime_s: float
) -> Generator[simpy.Event, Any, None]:
    for _ in range(bounds.MAX_RESTARTS):
        yield env.timeout(max(0.0, every_s - replica.uptime_s))
        yield replica.request_restart(mode, downtime_s)
    yield env.timeout(max(0.0, every_s - replica.uptime_s))
    raise bounds.restarts_exceeded(env.now)


def _progress(
    env: simpy.Environment, report: Callable[[float, float], None], end_s: float
) -> Generator[simpy.Event, Any, None]:
    while True:
        report(env.now, end_s)
        yield env.timeout(end_s / 100)


def _latency_report(scenario: Scenario, latency: LatencyModel) -> dict[str, Any]:
    """The latency model used, and for a calibrated one how often the run evaluated it
    outside its validity range (vectorised fast-mode planning counts the steps it
    evaluated, a few of which an early wake-up may not run)."""
    report: dict[str, Any] = {"kind": scenario.latency.kind}
    if latency.counts_out_of_range:
        first = latency.first_out_of_range
        report["out_of_range_calls"] = int(latency.out_of_range_calls)
        report["first_out_of_range"] = None if first is None else [int(v) for v in first]
    return report
