"""A run's summary, typed: one frozen pydantic model that the run builds and writes
(``summary.json``, :meth:`Summary.to_json_dict`) and that every reader of a run folder
reads back (:meth:`Summary.from_json_dict`; with the error lines of
:func:`sim.results.summary_check.parse_summary`). Readers use attributes, never string
keys. The field reference (``docs/outputs.md``) is generated from these classes'
attribute docstrings (:func:`sim.results.summary_fields.field_rows`; a test holds the page
to them).

One schema, both ways, byte for byte: a key the run did not write (a single replica's
``fleet``, a run without a ``duration_s``'s ``requests.beyond_duration``, an alert's
counts that are not its own) is *unset* in the model and left out again when written
(``exclude_unset``); a key a later version adds is kept as an extra and written back;
a JSON number written as an integer where a float was meant (the sum of no costs)
reads back as one (:data:`Number`).

What is checked beyond each field's type and range:

* ``fleet``, where present (a fleet run), is an object with at least one pool (a single
  replica's summary has no ``fleet`` key at all);
* ``fleet.alerts``: the scrape interval in [:data:`MIN_SCRAPE_INTERVAL_S`,
  :data:`MAX_INTERVAL_S`], the trend window at least one scrape and at most
  :data:`MAX_WINDOW_SCRAPES` scrapes, the thresholds shares in [0, 1];
* a pool's (and the run's) KV capacity times its KV bytes per token fits in a signed
  64-bit integer, so memory exported in bytes cannot overflow (each is bounded by
  :data:`MAX_KV_BYTES_PER_TOKEN` and ``MAX_TOKENS`` too).

Every field a run writes is required, except those a run folder written before fragsim
recorded them lacks (a pool's replicas, allocator, KV sizes and latency model;
``fleet.alerts``; ``digests``): those default to None (and stay unwritten).
"""

from __future__ import annotations

from pydantic import model_validator

from sim.fields import JsonObject
from sim.results.summary_fleet import Disagg, Fleet, FleetAlerts, Pool
from sim.results.summary_sections import (
    MAX_AMOUNT,
    MAX_INT64,
    MAX_INTERVAL_S,
    MAX_KV_BYTES_PER_TOKEN,
    MAX_TIME_S,
    MAX_WINDOW_SCRAPES,
    MIN_SCRAPE_INTERVAL_S,
    Alert,
    BytesPerToken,
    Engine,
    Failures,
    Latency,
    LatencyReport,
    Memory,
    Offload,
    PrefixCache,
    Requests,
    Seconds,
    Section,
    Sha256,
    Throughput,
    Tokens,
    fits_in_bytes,
)

__all__ = [
    "MAX_AMOUNT",
    "MAX_INT64",
    "MAX_INTERVAL_S",
    "MAX_KV_BYTES_PER_TOKEN",
    "MAX_TIME_S",
    "MAX_WINDOW_SCRAPES",
    "MIN_SCRAPE_INTERVAL_S",
    "Disagg",
    "Fleet",
    "FleetAlerts",
    "Offload",
    "Pool",
    "Summary",
]


class Summary(Section):
    """A run's ``summary.json``: the fields every run writes, a fleet's ``fleet`` and the
    tables' ``digests``."""

    scenario: str
    """The scenario's name."""
    seed: int
    """Its seed."""
    requests: Requests
    """Request counts."""
    span_s: Seconds
    """From the first arrival to the run's end (the rates' denominator)."""
    throughput: Throughput
    """Finished work per second."""
    latency_s: Latency
    """Latency percentiles of finished requests, in seconds."""
    failures: Failures
    """Allocation failures, preemptions and restarts."""
    memory: Memory
    """KV memory use and fragmentation."""
    prefix_cache: PrefixCache
    """Prefix-cache hits."""
    alerts: list[Alert]
    """The seed's alerts whose condition held, in ``sim.results.seed_alerts`` order."""
    allocator: str
    """The allocator kind (pools' kinds joined by `` + `` when they differ)."""
    kv_capacity_tokens: Tokens | None
    """KV capacity of a replica; null when pools differ."""
    kv_bytes_per_token: BytesPerToken | None
    """KV bytes per token of a replica; null when pools differ."""
    latency: LatencyReport
    """The latency model (pools' out-of-range steps summed)."""
    engine: Engine
    """The engine's counters."""
    fleet: Fleet | None = None
    """A fleet run's section (absent for a single replica)."""
    kv_layout: list[str] | None = None
    """A single pool of a KV manager only: how it laid the memory out (as the pool's)."""
    offload: Offload | None = None
    """A run with KV offload tiers only (``kv_offload``)."""
    digests: dict[str, Sha256] | None = None
    """Each table's SHA-256 by file name (written with the files)."""

    @model_validator(mode="after")
    def _bytes_fit(self) -> Summary:
        fits_in_bytes(self.kv_capacity_tokens, self.kv_bytes_per_token)
        return self

    @classmethod
    def from_json_dict(cls, data: JsonObject) -> Summary:
        """The summary a JSON object holds (``pydantic.ValidationError`` when no run could
        have written it; :func:`sim.results.summary_check.parse_summary` says it in one
        line)."""
        return cls.model_validate(data)
