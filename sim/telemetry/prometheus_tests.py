"""``promtool test rules`` unit tests for the exported rules (:mod:`sim.telemetry.prometheus`),
generated from a run: for each rule, the first episode fragsim's own evaluation fires
(:func:`sim.telemetry.alerts.conditions` through :func:`sim.telemetry.alert_states.hold`, the
rule's own ``for:``) and, for a rule with a ``for:``, the first episode it suppresses,
written as the series Prometheus would have scraped and the firing alerts fragsim says
Prometheus holds at instants of the episode.

One test per such episode (a rule the run never fires, with data throughout, gets
none: the file's header lists them). For a replica's episode of the scrapes
``s .. r - 1`` (the condition held from ``s``, fired at ``f`` where it did, resolved at
``r``; ``r`` the run's last scrape where it still holds), the test's series are the
replica's scraped values (:func:`sim.telemetry.alerts.scraped`: the latest periodic sample
at or before each scrape) from ``k0`` to ``r``, one per evaluation interval, and its
``alert_rule_test`` asserts the firing alerts (none, or the one alert with the series'
labels, its severity and its annotations rendered with the value then) at ``s - 1``,
``s``, ``f - 1``, ``f``, ``r - 1`` and ``r`` (those in the test's range):

* a gauge rule's test starts at ``k0 = s - 2``, with data at every scrape of the test;
  a tier rule's series are the tier's ratio, free and capacity bytes;
  the uptime rule's series are the ratio, the uptime and the correlation gauge as
  ``fragsim export openmetrics`` writes it (:func:`sim.telemetry.alerts.uptime_correlation`
  at every scrape with data: the function that evaluates the alert);
* the failure rule's test is the counter of failures above the high-free share as the
  export writes it (cumulated over the scrape windows ``(t_{j-1}, t_j]``, from the
  replica's first scrape to its last: ``_`` outside), from one ``increase()`` range
  before ``s - 1``, so that every range the test evaluates is the run's.

``{{ $value }}`` is rendered as Prometheus's templates print a float (Go's ``%v``):
shortest digits, integers without a point, which equals :func:`sim.telemetry.openmetrics.
number` for the values rendered here (ratios and rho in [-1, 1]).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import yaml

from sim.results.seed_alerts import FRAGMENTATION_FAILURE
from sim.telemetry.alert_states import Held, hold
from sim.telemetry.alerts import (
    conditions,
    counter_span,
    high_free_failures,
    scrape_times,
    scraped,
    tier_kinds,
    trend_window_scrapes,
    uptime_correlation,
)
from sim.telemetry.openmetrics import number, pool_of
from sim.telemetry.prometheus import METRIC, RuleOptions, RulesFile, duration, tier_metrics

if TYPE_CHECKING:
    import pandas as pd

    from sim.results.seed_alerts import AlertThresholds
    from sim.results.summary_model import Summary

FAILURE_COUNTER = METRIC["high_free_failures"]
RATIO = METRIC["largest_contiguous_free_block_ratio"]
UPTIME = METRIC["uptime_s"]
RHO = METRIC["node_uptime_vs_fragmentation_correlation"]
FAILURE_RULE = FRAGMENTATION_FAILURE.name


class InputSeries(TypedDict):
    """A series of a test: ``name{labels}`` and its values, one per interval (``_``: none)."""

    series: str
    values: str


class ExpectedAlert(TypedDict):
    exp_labels: dict[str, str]
    exp_annotations: dict[str, str]


class AlertCheck(TypedDict):
    """The alerts of one rule firing at ``eval_time`` (none: an empty list)."""

    eval_time: str
    alertname: str
    exp_alerts: list[ExpectedAlert]


class RuleTest(TypedDict):
    """One test of a promtool test file: its series and the checks at its instants."""

    name: str
    interval: str
    input_series: list[InputSeries]
    alert_rule_test: list[AlertCheck]


def _render(text: str, label: str, replica: int, value: float | None) -> str:
    text = text.replace(f"{{{{ $labels.{label} }}}}", str(replica))
    return text if value is None else text.replace("{{ $value }}", number(value))


def _series(name: str, labels: dict[str, str], values: list[float | None]) -> InputSeries:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    text = " ".join("_" if v is None else number(float(v)) for v in values)
    return {"series": f"{name}{{{inner}}}", "values": text}


def _episodes(held: Held, n: int) -> list[tuple[int, int | None, int]]:
    """(start, the instant it fired or None, its end ``r``) of each episode; ``r`` is the
    instant it resolved, or the last where it still holds at the run's end."""
    active = held.active
    out = []
    for s in np.flatnonzero(active & ~np.concatenate([[False], active[:-1]])).tolist():
        stop = np.flatnonzero(~active[s:])
        r = s + int(stop[0]) if len(stop) else n - 1
        fired = np.flatnonzero(held.firing[s : r + 1])
        out.append((s, s + int(fired[0]) if len(fired) else None, r))
    return out


def rule_tests(
    rules: RulesFile,
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    summary: Summary,
    thresholds: AlertThresholds,
    scrape_interval_s: float,
    trend_window_s: float,
    options: RuleOptions,
) -> tuple[list[RuleTest], list[str]]:
    """The ``tests`` list of a promtool test file for ``rules`` (module docstring) and
    the names of the rules the run never fires (with data throughout: no test)."""
    times = scrape_times(timeseries, scrape_interval_s)
    timing = options.rule_timing()
    window_scrapes = int(
        round(timing.window_s(scrape_interval_s) * 1000) // round(scrape_interval_s * 1000)
    )
    pool = pool_of(summary)
    label = options.instance_label
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    todo = {
        name: {"fired", "suppressed"} if "for" in rule else {"fired"}
        for name, rule in by_name.items()
    }
    tests: list[RuleTest] = []
    for replica in sorted(set(timeseries["replica"].tolist())):
        if not any(todo.values()):
            break
        found = conditions(
            timeseries,
            events,
            replica,
            times,
            thresholds,
            trend_window_s,
            scrape_interval_s,
            timing,
        )
        s = scraped(timeseries, times, replica)
        has = s["has_data"].to_numpy()
        lo, hi = counter_span(timeseries, times, replica)
        labels = {label: str(replica), "pool": pool(replica)}
        counter = np.cumsum(high_free_failures(events, times, replica, thresholds.high_free_share))
        window = trend_window_scrapes(trend_window_s, scrape_interval_s)
        gauges = {
            RATIO: s["ratio"].to_numpy(),
            UPTIME: s["uptime_s"].to_numpy(),
            RHO: uptime_correlation(s, window, has),  # as fragsim export openmetrics writes it
            **{
                name: s[column].to_numpy()
                for kind in tier_kinds(timeseries)
                for column, name, _, _ in tier_metrics(kind)
            },
        }
        for name, rule in by_name.items():
            if not todo[name]:
                continue
            condition, value = found[name]
            held = hold(condition, times, _seconds(rule.get("for", "0s")))
            gauge = name != FAILURE_RULE
            for start, fired, end in _episodes(held, len(times)):
                kind = "suppressed" if fired is None else "fired"
                if kind not in todo[name]:
                    continue
                k0 = max(0, start - 2) if gauge else max(0, lo, start - 1 - window_scrapes)
                if gauge and not has[k0 : end + 1].all():
                    continue
                if gauge:
                    used = [m for m in gauges if m in rule["expr"]]
                    series = [_series(m, labels, list(gauges[m][k0 : end + 1])) for m in used]
                    alert_labels = {**labels, "severity": rule["labels"]["severity"]}
                else:
                    cells = [counter[j] if lo <= j <= hi else None for j in range(k0, end + 1)]
                    series = [_series(FAILURE_COUNTER, labels, cells)]
                    alert_labels = {**labels, "severity": rule["labels"]["severity"]}
                marks = [start - 1, start, end - 1, end]
                if fired is not None:
                    marks += [fired - 1, fired]
                checks: list[AlertCheck] = []
                for k in sorted({k for k in marks if k0 <= k <= end}):
                    expected: list[ExpectedAlert] = []
                    if held.firing[k]:
                        shown = float(value[k]) if gauge else None
                        annotations = {
                            key: _render(text, label, replica, shown)
                            for key, text in rule["annotations"].items()
                        }
                        expected.append(
                            {"exp_labels": alert_labels, "exp_annotations": annotations}
                        )
                    at = _at((k - k0) * scrape_interval_s)
                    checks.append({"eval_time": at, "alertname": name, "exp_alerts": expected})
                what = "fires" if fired is not None else f"held {rule['for']} too briefly to fire"
                tests.append(
                    {
                        "name": f"{name} on replica {replica} from {times[start]:g} s of the run: {what}",
                        "interval": duration(scrape_interval_s),
                        "input_series": series,
                        "alert_rule_test": checks,
                    }
                )
                todo[name].discard(kind)
    return tests, [name for name, left in todo.items() if "fired" in left]


def _at(at_s: float) -> str:
    return duration(at_s) if at_s > 0 else "0s"


def _seconds(text: str) -> float:
    """A duration as :func:`duration` writes it -> seconds."""
    units = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|d|h|m|s)", text))


def tests_file(
    rule_file: str, tests: list[RuleTest], untested: list[str], scrape_interval_s: float
) -> str:
    """The promtool test file's YAML text."""
    head = "# fragsim: promtool test rules for the exported alerts, generated from a run."
    if untested:
        head += "\n# No firing in the run to test: " + ", ".join(untested)
    body = {
        "rule_files": [rule_file],
        "evaluation_interval": duration(scrape_interval_s),
        "tests": tests,
    }
    return head + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=1000)
