"""A scenario's ``retention:`` block: KV kept allocated after a request finishes.

With every allocation living seconds to minutes, a pool's state mixes within minutes and
a node's uptime cannot matter. Real stacks keep some KV longer than its request; each
kind below names one such mechanism, turned into two numbers per request when the
workload's groups are made (``sim.simulate.columns.make_groups``):

* ``retain_s``: how long after a successful finish the request's sequences stay
  allocated (0: freed at the finish, as without retention; inf: until the process
  restarts);
* ``retain_until_s``: an absolute time at which they are freed at the latest (inf: none).

The engine frees a retained request's sequences at the first step boundary at or after
``min(finish + retain_s, retain_until_s)`` (``sim.engine.scheduler``); a restart forgets
them with the allocator. Draws are vectorised and seeded by the scenario's seed and the
kind's ``seed``, in request order: the same scenario gives the same numbers.

Kinds:

* ``none`` -- every request frees its KV when it finishes (the default).
* ``session_ttl`` -- multi-turn sessions: a finished turn's KV stays allocated for
  ``ttl_s`` or until the same session's next turn arrives, whichever is first (the
  trace's ``session_id``; requests without one free at once). The next turn allocates
  its own KV (the model does not reuse the held buffer).
* ``heavy_tail`` -- a ``fraction`` of requests (agent contexts, long tool loops) keep
  their KV for a Pareto(``alpha``) time of minimum ``scale_s`` after finishing.
* ``leak`` -- a ``fraction`` of requests never free their KV until the process
  restarts (a slow leak: a missed free on an error path).

A pinned prefix cache (a request's prompt kept, its output freed) is not modelled: on a
contiguous allocator the prompt is the front of the request's one buffer, and keeping it
needs a shrink-in-place the allocator interface does not have; keeping the whole buffer
for a fixed time is ``heavy_tail`` with a constant, no new mechanism.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from sim.fields import MAX_SECONDS, MAX_SEED, Count, Number
from sim.scenario.errors import ScenarioWarning

RetentionArrays = tuple[np.ndarray, np.ndarray]
"""(retain_s, retain_until_s), float64, one per request in the frame's row order."""

_STREAM = 0x7E7E
"""Tags the retention stream among the scenario's random streams."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _nothing(n: int) -> RetentionArrays:
    return np.zeros(n, dtype=np.float64), np.full(n, np.inf, dtype=np.float64)


def _rng(scenario_seed: int, seed: int) -> np.random.Generator:
    return np.random.default_rng([scenario_seed, seed, _STREAM])


class NoRetention(_Config):
    """Every request frees its KV when it finishes (the default)."""

    kind: Literal["none"] = "none"

    def draw(self, requests: pd.DataFrame, scenario_seed: int) -> RetentionArrays:
        return _nothing(len(requests))

    def warning(self, requests: pd.DataFrame) -> str | None:
        return None


class SessionTtlRetention(_Config):
    """Multi-turn sessions keep a finished turn's KV until the next turn or a TTL."""

    kind: Literal["session_ttl"] = "session_ttl"
    ttl_s: Number = Field(
        gt=0,
        le=MAX_SECONDS,
        description="Seconds a finished turn's KV stays allocated waiting for the "
        "session's next turn (freed at that turn's arrival if sooner).",
    )

    def draw(self, requests: pd.DataFrame, scenario_seed: int) -> RetentionArrays:
        n = len(requests)
        retain_s, until_s = _nothing(n)
        sessions = requests.get("session_id")
        if sessions is None or n == 0:
            return retain_s, until_s
        known = sessions.notna().to_numpy()
        rows = np.flatnonzero(known)
        if rows.size == 0:
            return retain_s, until_s
        sid = sessions[known].to_numpy(dtype=np.int64)
        arrival = requests["arrival_s"].to_numpy(dtype=np.float64)[rows]
        order = np.lexsort((rows, arrival, sid))  # by session, then arrival, then row
        s_sorted = sid[order]
        nxt = np.full(rows.size, np.inf)
        same = s_sorted[1:] == s_sorted[:-1]
        nxt[:-1] = np.where(same, arrival[order][1:], np.inf)
        retain_s[rows] = self.ttl_s
        until_s[rows[order]] = nxt
        return retain_s, until_s

    def warning(self, requests: pd.DataFrame) -> str | None:
        sessions = requests.get("session_id")
        if sessions is None or not bool(sessions.notna().any()):
            return (
                "retention: session_ttl has no effect: the workload has no session_id "
                "(every request frees its KV when it finishes)"
            )
        return None


class HeavyTailRetention(_Config):
    """A share of requests keep their KV for a Pareto-distributed time after finishing."""

    kind: Literal["heavy_tail"] = "heavy_tail"
    fraction: Number = Field(ge=0, le=1, description="Share of requests that keep their KV.")
    alpha: Number = Field(
        gt=0.1, le=100, description="Pareto tail index (smaller: heavier; <= 1: infinite mean)."
    )
    scale_s: Number = Field(
        gt=0, le=MAX_SECONDS, description="Pareto minimum: the shortest retention, seconds."
    )
    seed: Count = Field(0, ge=0, le=MAX_SEED, description="Seeds this draw (with the scenario's).")

    def draw(self, requests: pd.DataFrame, scenario_seed: int) -> RetentionArrays:
        n = len(requests)
        retain_s, until_s = _nothing(n)
        rng = _rng(scenario_seed, self.seed)
        chosen = rng.random(n) < self.fraction
        life_s = self.scale_s * (1.0 + rng.pareto(self.alpha, n))
        retain_s[chosen] = life_s[chosen]
        return retain_s, until_s

    def warning(self, requests: pd.DataFrame) -> str | None:
        return None


class LeakRetention(_Config):
    """A share of requests never free their KV until the process restarts."""

    kind: Literal["leak"] = "leak"
    fraction: Number = Field(ge=0, le=1, description="Share of requests whose KV leaks.")
    seed: Count = Field(0, ge=0, le=MAX_SEED, description="Seeds this draw (with the scenario's).")

    def draw(self, requests: pd.DataFrame, scenario_seed: int) -> RetentionArrays:
        n = len(requests)
        retain_s, until_s = _nothing(n)
        retain_s[_rng(scenario_seed, self.seed).random(n) < self.fraction] = np.inf
        return retain_s, until_s

    def warning(self, requests: pd.DataFrame) -> str | None:
        return None


RetentionConfig = Annotated[
    NoRetention | SessionTtlRetention | HeavyTailRetention | LeakRetention,
    Field(discriminator="kind"),
]
"""A scenario's ``retention:`` block, chosen by ``kind``; each member has ``draw``."""


def warn_unused_retention(retention: RetentionConfig, requests: pd.DataFrame) -> None:
    """Warn (``ScenarioWarning``: the CLI prints ``warning: SCENARIO: ...``) when
    ``retention`` has no effect on ``requests``; ``sim.run`` warns the same, so a
    command that shows its scenario's warnings calls this where it checks the scenario
    and silences the run's copy."""
    note = retention.warning(requests)
    if note is not None:
        warnings.warn(note, ScenarioWarning, stacklevel=2)
