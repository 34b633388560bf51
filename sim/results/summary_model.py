"""What a run's ``summary.json`` holds, as a pydantic model: the fields the commands that
read a run folder use (``report``, ``alerts``, ``export openmetrics``, ``compare``, a
resumed sweep), each with the type and range any run writes. :func:`check_summary`
refuses a summary no run could have written with one :class:`RunFolderError` line
naming the file and the field (``field fleet.pools.0: expected an object, got a
string``).

What is checked beyond each field's type and range:

* ``fleet``, where present (a fleet run), is an object with at least one pool: ``null``
  is refused (a single replica's summary has no ``fleet`` key at all);
* ``fleet.alerts``: the scrape interval in [:data:`MIN_SCRAPE_INTERVAL_S`,
  :data:`MAX_INTERVAL_S`], the trend window at least one scrape and at most
  :data:`MAX_WINDOW_SCRAPES` scrapes, the thresholds an object of shares in [0, 1];
* a pool's (and the run's) KV capacity times its KV bytes per token fits in a signed
  64-bit integer, so memory exported in bytes cannot overflow (each is bounded by
  :data:`MAX_KV_BYTES_PER_TOKEN` and ``MAX_TOKENS`` too).

Later versions may add keys: unknown keys are accepted. The summary is checked, not
converted: readers keep the dict as read.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import clip, short
from sim.fields import MAX_COUNT, MAX_SECONDS, MAX_TOKENS
from sim.results.folder_errors import RunFolderError

MIN_SCRAPE_INTERVAL_S = 1.0
"""``sim.cli.alert_times.MIN_SCRAPE_INTERVAL_S`` (a test holds them equal)."""
MAX_INTERVAL_S = 86_400.0 * 365
"""``sim.cli.alert_times.MAX_INTERVAL_S`` (a test holds them equal)."""
MAX_WINDOW_SCRAPES = 100_000
"""``sim.cli.alert_times.MAX_WINDOW_SCRAPES`` (a test holds them equal)."""
MAX_KV_BYTES_PER_TOKEN = 1 << 40
"""KV bytes per token of a replica: far above any model (a few MiB at most)."""
MAX_INT64 = 2**63 - 1
MAX_TIME_S = 10.0 * MAX_SECONDS
"""A simulated instant or span: ten times the longest trace (``MAX_SECONDS``), far past
any run's end, and small enough that exported millisecond timestamps fit 64 bits."""
MAX_AMOUNT = 1e15
"""Dollars or replica-hours of one run."""

Seconds = Annotated[float, Field(ge=0, le=MAX_TIME_S, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_INT64)]
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
BytesPerToken = Annotated[int, Field(ge=1, le=MAX_KV_BYTES_PER_TOKEN)]
Replica = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class Requests(_Checked):
    total: Count
    by_status: dict[str, Count]


class Percentiles(_Checked):
    p99: Seconds | None


class Latency(_Checked):
    ttft: Percentiles
    e2e: Percentiles


class Failures(_Checked):
    allocation_failures: Count
    at_high_free_memory: Count
    restarts: Count
    by_cause: dict[str, Count]


class Engine(_Checked):
    end_s: Seconds


def _fits_in_bytes(capacity: int | None, per_token: int | None) -> None:
    if capacity is not None and per_token is not None and capacity * per_token > MAX_INT64:
        raise ValueError(
            f"kv_capacity_tokens {capacity:,} x kv_bytes_per_token {per_token:,} "
            "overflows 64-bit bytes"
        )


class Pool(_Checked):
    name: str
    count: Count
    replicas: list[Replica] | None = None
    kv_capacity_tokens: Tokens | None = None
    kv_bytes_per_token: BytesPerToken | None = None

    @model_validator(mode="after")
    def _bytes_fit(self) -> Pool:
        _fits_in_bytes(self.kv_capacity_tokens, self.kv_bytes_per_token)
        return self


class FleetAlerts(_Checked):
    scrape_interval_s: (
        Annotated[float, Field(ge=MIN_SCRAPE_INTERVAL_S, le=MAX_INTERVAL_S, allow_inf_nan=False)]
        | None
    ) = None
    trend_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    thresholds: dict[str, Share] | None = None

    @model_validator(mode="after")
    def _window_spans_scrapes(self) -> FleetAlerts:
        scrape, window = self.scrape_interval_s, self.trend_window_s
        if scrape is None or window is None:
            return self
        if window < scrape:
            raise ValueError(
                f"trend_window_s {window:g} is shorter than scrape_interval_s {scrape:g}"
            )
        if window / scrape > MAX_WINDOW_SCRAPES:
            raise ValueError(
                f"trend_window_s {window:g} spans more than {MAX_WINDOW_SCRAPES:,} scrapes"
            )
        return self


class FleetReplicas(_Checked):
    mean: Annotated[float, Field(ge=0, le=MAX_COUNT, allow_inf_nan=False)]
    peak: Count


class Fleet(_Checked):
    pools: Annotated[list[Pool], Field(min_length=1)]
    replicas: FleetReplicas
    replica_hours: Amount
    avoidable_replica_hours: Amount
    cost_usd: Amount
    cost_per_million_output_tokens_usd: Amount | None
    alerts: FleetAlerts | None = None


class Summary(_Checked):
    requests: Requests
    throughput: dict[str, Any]
    latency_s: Latency
    failures: Failures
    memory: dict[str, Any]
    alerts: list[Any]
    scenario: str
    allocator: str
    engine: Engine
    span_s: Seconds | None = None
    kv_capacity_tokens: Tokens | None = None
    kv_bytes_per_token: BytesPerToken | None = None
    fleet: Fleet | None = None
    digests: dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] | None = None

    @model_validator(mode="after")
    def _bytes_fit(self) -> Summary:
        _fits_in_bytes(self.kv_capacity_tokens, self.kv_bytes_per_token)
        return self


SECTIONS = ("requests", "throughput", "latency_s", "failures", "memory", "alerts")
"""The sections every summary has (checked first, so a file that is not a summary at
all says so rather than naming a field deep inside)."""


def check_summary(data: dict[str, Any], shown: str) -> None:
    """Refuse ``data`` (read from the file named ``shown``) unless a run could have
    written it (module docstring): one :class:`RunFolderError` line naming the field."""
    for key in (*SECTIONS, "scenario", "allocator"):
        if key not in data:
            raise RunFolderError(f"{shown}: not a fragsim summary: no {key!r}")
    for key in ("fleet", "digests"):
        if key in data and data[key] is None:
            raise RunFolderError(f"{shown}: field {key}: expected an object, got null")
    try:
        Summary.model_validate(data)
    except ValidationError as e:
        raise RunFolderError(f"{shown}: {_first_error(e)}") from None


_EXPECTED = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
}
"""pydantic's type errors, said as what a run writes."""


def _first_error(error: ValidationError) -> str:
    """The first of pydantic's errors as ``field a.b.0: what (got VALUE)``."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"]
    kind = first["type"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "missing":
        message = "missing (every run writes it)"
    elif kind in ("model_type", "dict_type"):
        message = f"expected an object, got {json_type(first['input'])}"
    elif kind == "list_type":
        message = f"expected an array, got {json_type(first['input'])}"
    elif kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {short(first['input'], 40)}"
    else:
        message = f"{message[:1].lower()}{message[1:]} (got {short(first['input'], 40)})"
    return clip(f"field {where or '(top)'}: {message}", 300)


def json_type(value: object) -> str:
    """How JSON names ``value``'s type, with an article (``an object``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"
