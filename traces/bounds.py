"""Bounds on what a trace or a synthetic workload may cost, checked before the work.

A trace's size is the user's choice, but an absurd number (``num_requests: 1e9``, a
last arrival at 1e300 s, ``rate_scale: 1e-300``, ``tile_to_s: 1e12``) must be refused
with the number and the field before anything is allocated or looped over, not after
minutes of work or a crash. The limits:

- :data:`MAX_REQUESTS` (50 million): rows a synthetic workload or a transform (tiling)
  may produce. A canonical row takes about 80 bytes as a frame (more with prefix
  hashes), so the largest workload is about 4 GB. Files on disk are not limited:
  ``describe`` and ``convert`` stream them in bounded memory.
- :data:`MAX_ARRIVAL_S` (1e9 s, about 31.7 years): the latest arrival a trace may have,
  in seconds from its start. Loaders refuse a later one with its row; the scenario layer
  can rely on it when it bounds a run's span.
- :data:`MAX_RATE_PERIODS` (10 million): segments of a diurnal rate curve, or on/off
  periods of a bursty process, one draw of arrivals may walk through.

Each ``check_*`` raises :class:`BoundError` (a ``ValueError``) naming the ``field`` the
caller gives (a scenario passes its own names, e.g. ``workload.tile_to_s``), the value,
the limit and what the value would cost.
"""

from __future__ import annotations

import math
from typing import Final

MAX_REQUESTS: Final = 50_000_000
MAX_ARRIVAL_S: Final = 1e9
MAX_RATE_PERIODS: Final = 10_000_000


class BoundError(ValueError):
    """A value whose cost is beyond a bound: ``field``, ``got`` and ``limit`` are kept
    apart; ``str()`` is one line ``field F: got G: MESSAGE``."""

    def __init__(self, field: str, got: object, message: str, limit: object) -> None:
        self.field = field
        self.got = got
        self.limit = limit
        self.message = message
        super().__init__(f"field {field}: got {got!r}: {message}")


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) < 1e15 else f"{x:.3g}"


def check_requests(expected: float, field: str, got: object, what: str = "") -> None:
    """Refuse a workload of ``expected`` rows beyond :data:`MAX_REQUESTS`."""
    if not expected <= MAX_REQUESTS:  # also NaN
        raise BoundError(
            field,
            got,
            f"{what or 'this'} would make about {_num(expected)} requests, more than the "
            f"{MAX_REQUESTS:,} a workload may hold (traces.bounds.MAX_REQUESTS)",
            MAX_REQUESTS,
        )


def check_span(span_s: float, field: str, got: object, what: str = "") -> None:
    """Refuse arrivals reaching past :data:`MAX_ARRIVAL_S`."""
    if not span_s <= MAX_ARRIVAL_S:
        raise BoundError(
            field,
            got,
            f"{what or 'this'} would put arrivals at about {_num(span_s)} s, later than "
            f"{MAX_ARRIVAL_S:.0e} s (about 31.7 years; traces.bounds.MAX_ARRIVAL_S)",
            MAX_ARRIVAL_S,
        )


def check_periods(periods: float, field: str, got: object, what: str = "") -> None:
    """Refuse an arrival process that would walk more than :data:`MAX_RATE_PERIODS`."""
    if not periods <= MAX_RATE_PERIODS:
        raise BoundError(
            field,
            got,
            f"{what or 'this'} would walk about {_num(periods)} rate periods, more than "
            f"{MAX_RATE_PERIODS:,} (traces.bounds.MAX_RATE_PERIODS)",
            MAX_RATE_PERIODS,
        )


def check_rate_scale(factor: float, last_arrival_s: float, field: str = "factor") -> None:
    """A time compression ``arrival_s / factor`` must be finite, > 0, and keep the last
    arrival within :data:`MAX_ARRIVAL_S`."""
    if not (math.isfinite(factor) and factor > 0):
        raise BoundError(field, factor, "must be a finite number > 0", "(0, inf)")
    check_span(last_arrival_s / factor, field, factor, "rescaling the trace's arrivals")


def check_tile(rows: int, duration_s: float, period_s: float, field: str = "duration_s") -> None:
    """Tiling ``rows`` requests every ``period_s`` up to ``duration_s``: the copies' rows
    must stay within :data:`MAX_REQUESTS` and the span within :data:`MAX_ARRIVAL_S`."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise BoundError(field, duration_s, "must be a finite number > 0", "(0, inf)")
    check_span(duration_s, field, duration_s, "tiling")
    copies = duration_s / period_s
    check_requests(rows * copies, field, duration_s, f"{_num(copies)} copies of {rows:,} requests")
