"""The counters of :mod:`sim.telemetry.openmetrics` on the scrape clock: at each scrape
instant ``t_k = t_0 + k * scrape_interval_s`` of the run
(:func:`sim.telemetry.alerts.scrape_times`: from its first sample up to its last), each
replica's counter as a Prometheus scraping its exporter then would read it: the value of
its last update at or before ``t_k`` (0 before its first). A replica's counter is
written at every instant from the last at or before its first timeseries row to the
first at or after its last (within the run's instants): each scrape window
``(t_{k-1}, t_k]`` it lived in has both ends sampled, so ``increase()`` over two or more
scrapes sees each failure in the window ``sim.telemetry.alerts`` counts it in, whatever the
run's sample interval (a run sampled every 5 minutes scraped every 30 s: a failure alone
between two rows is no longer lost).

Memory: one pass over the table's times and replicas builds the clock (two numbers per
replica id and the instants); the counters are then written instant by instant from the
table's rows in time order, batch by batch, holding one value per replica. The output
grows with the scrapes times the replicas live at each (for the six-day seed-postmortem
scraped every 30 s: ~48 k samples per counter).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from sim.telemetry.alerts import scrape_times
from sim.telemetry.openmetrics_format import (
    Family,
    Labels,
    batches,
    header,
    number,
    stamp,
    timestamps_ms,
)

MAX_SCRAPES = 5_000_000
"""The most scrape instants over a run (``sim.cli.alerts.MAX_SCRAPES``, ``alerts show``'s
bound: a test holds them equal)."""


@dataclass(frozen=True)
class ScrapeClock:
    """The run's scrape instants ``times_s`` (:func:`sim.telemetry.alerts.scrape_times`) and,
    per instant index, the replicas whose counters start (``opening``) and end
    (``closing``) being written there (module docstring)."""

    times_s: np.ndarray
    opening: dict[int, list[int]]
    closing: dict[int, list[int]]


class TooManyScrapes(ValueError):
    """The scrape interval gives more than :data:`MAX_SCRAPES` instants over the run."""


def scrape_clock(timeseries: Path, scrape_interval_s: float) -> ScrapeClock:
    """The run's scrape clock, from one pass over the table's times and replicas;
    raises :class:`TooManyScrapes` before anything is written."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for batch in batches(timeseries, ["time_s", "replica"]):
        spans = pd.DataFrame(batch).groupby("replica")["time_s"].agg(["min", "max"])
        for replica, lo, hi in zip(spans.index.tolist(), spans["min"], spans["max"], strict=True):
            first[replica] = min(first.get(replica, math.inf), float(lo))
            last[replica] = max(last.get(replica, -math.inf), float(hi))
    if not first:
        return ScrapeClock(np.empty(0), {}, {})
    start, end = min(first.values()), max(last.values())
    if (end - start) / scrape_interval_s >= MAX_SCRAPES:
        raise TooManyScrapes(
            f"got {scrape_interval_s:g}: the run's {end - start:g} s would be more than "
            f"{MAX_SCRAPES:,} scrapes"
        )
    times = scrape_times(pd.DataFrame({"time_s": [start, end]}), scrape_interval_s)
    opening: dict[int, list[int]] = {}
    closing: dict[int, list[int]] = {}
    for replica in sorted(first):
        lo = max(0, int(np.searchsorted(times, first[replica], side="right")) - 1)
        hi = min(len(times) - 1, int(np.searchsorted(times, last[replica], side="left")))
        opening.setdefault(lo, []).append(replica)
        closing.setdefault(hi, []).append(replica)
    return ScrapeClock(times, opening, closing)


def counter_family(
    out: TextIO,
    family: Family,
    clock: ScrapeClock,
    origin_s: float,
    labels: Labels,
    updates: Iterator[tuple[float, int, float]],
) -> None:
    """One per-replica counter on the scrape clock: at each instant, for each replica
    written there (by id), its value of the last update at or before the instant (0
    before its first). ``updates``: (time, replica, value) in time order."""
    header(out, family)
    name = family.name + "_total"
    stamps = timestamps_ms(clock.times_s, origin_s).tolist()
    current: dict[int, float] = {}
    live: set[int] = set()
    k = 0

    def scrape(k: int) -> None:
        live.update(clock.opening.get(k, ()))
        at = stamp(stamps[k])
        for replica in sorted(live):
            out.write(f"{name}{labels(replica)} {number(current.get(replica, 0))} {at}\n")
        live.difference_update(clock.closing.get(k, ()))

    times = clock.times_s.tolist()
    for time_s, replica, value in updates:
        while k < len(times) and times[k] < time_s:
            scrape(k)
            k += 1
        current[replica] = value
    for rest in range(k, len(times)):
        scrape(rest)


def column_updates(timeseries: Path, column: str) -> Iterator[tuple[float, int, float]]:
    """(time, replica, ``column``) of every row, in the table's (time) order."""
    for batch in batches(timeseries, ["time_s", "replica", column]):
        yield from zip(
            batch["time_s"].tolist(), batch["replica"].tolist(), batch[column].tolist(), strict=True
        )


def failure_updates(failures: dict[int, np.ndarray]) -> Iterator[tuple[float, int, float]]:
    """(time, replica, failures so far on it) at each failure, in time (then replica)
    order."""
    if not failures:
        return
    replicas = sorted(failures)
    times = np.concatenate([failures[r] for r in replicas])
    owner = np.concatenate([np.full(len(failures[r]), r) for r in replicas])
    count = np.concatenate([np.arange(1, len(failures[r]) + 1) for r in replicas])
    order = np.lexsort((owner, times))
    yield from zip(times[order].tolist(), owner[order].tolist(), count[order].tolist(), strict=True)
