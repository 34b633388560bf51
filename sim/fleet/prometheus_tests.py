"""``promtool test rules`` unit tests for the exported rules (:mod:`sim.fleet.prometheus`),
generated from a run: for each rule, the first episode in which fragsim's own
evaluation (:func:`sim.fleet.alerts.conditions`) fires it on a replica long enough for
Prometheus to fire it too, written as the series Prometheus would have scraped and the
alert expected then.

One test per rule found firing (a rule that never fires long enough in the run gets
none: the file's header lists them). For a replica's episode starting at scrape ``k``
(the condition false at ``k - 1``, true from ``k``), the test's series are the replica's
scraped values (:func:`sim.fleet.alerts.scraped`: the latest periodic sample at or
before each scrape) from scrape ``k - 2`` on, one per evaluation interval:

* a gauge rule (``for: F``, ``n = ceil(F / I)`` scrapes) needs the condition to hold
  at scrapes ``k .. k + n`` (with data at every scrape of the test): at ``k + n`` the
  alert fires with the labels of the series, the severity and the annotations rendered
  with the value scraped then; one scrape earlier it is still pending (no alert). The
  uptime rule's series are the ratio, the uptime and the correlation gauge as
  ``fragsim export openmetrics`` writes it (:func:`sim.fleet.alerts.uptime_correlation`
  at every scrape with data: the function that evaluates the alert);
* the failure rule reads the counter of failures above the high-free share at each
  scrape (the export's counter, cumulated over the scrape windows ``(t_{j-1}, t_j]``);
  an episode at ``k >= 1`` fires at ``k`` (``increase`` over two samples) and not at
  ``k - 1``.

``{{ $value }}`` is rendered as Prometheus's templates print a float (Go's ``%v``):
shortest digits, integers without a point, which equals :func:`sim.fleet.openmetrics.
number` for the values rendered here (ratios and rho in [-1, 1]).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sim.fleet.openmetrics import number, pool_of
from sim.fleet.prometheus import METRIC, RuleOptions, duration

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from sim.results.seed_alerts import AlertThresholds

FAILURE_COUNTER = METRIC["high_free_failures"]
RATIO = METRIC["largest_contiguous_free_block_ratio"]
UPTIME = METRIC["uptime_s"]
RHO = METRIC["node_uptime_vs_fragmentation_correlation"]


def _render(text: str, label: str, replica: int, value: float | None) -> str:
    text = text.replace(f"{{{{ $labels.{label} }}}}", str(replica))
    return text if value is None else text.replace("{{ $value }}", number(value))


def _series(name: str, labels: dict[str, str], values: np.ndarray) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": " ".join(number(float(v)) for v in values)}


def _episode(firing: np.ndarray, has: np.ndarray, need: int, first: int) -> int | None:
    """The first scrape ``k >= first`` starting an episode that holds ``need`` scrapes,
    with data from ``k - 2`` to its end; None when there is none."""
    import numpy as np

    starts = np.flatnonzero(firing & ~np.concatenate([[False], firing[:-1]]))
    for k in starts.tolist():
        if k < first or k + need > len(firing):
            continue
        if firing[k : k + need].all() and has[max(0, k - 2) : k + need].all():
            return int(k)
    return None


def rule_tests(
    rules: dict[str, Any],
    timeseries: pd.DataFrame,
    events: pd.DataFrame,
    summary: dict[str, Any],
    thresholds: AlertThresholds,
    scrape_interval_s: float,
    trend_window_s: float,
    options: RuleOptions,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``tests`` list of a promtool test file for ``rules`` (one per rule found
    firing long enough) and the names of the rules without a test."""
    import numpy as np

    from sim.fleet.alerts import (
        conditions,
        high_free_failures,
        scrape_times,
        scraped,
        trend_window_scrapes,
        uptime_correlation,
    )

    times = scrape_times(timeseries, scrape_interval_s)
    pool = pool_of(summary)
    label = options.instance_label
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    todo = dict(by_name)
    tests: list[dict[str, Any]] = []
    interval = duration(scrape_interval_s)
    for replica in sorted(set(timeseries["replica"].tolist())):
        if not todo:
            break
        found = conditions(
            timeseries, events, replica, times, thresholds, trend_window_s, scrape_interval_s
        )
        s = scraped(timeseries, times, replica)
        has = s["has_data"].to_numpy()
        labels = {label: str(replica), "pool": pool(replica)}
        counter = np.cumsum(high_free_failures(events, times, replica, thresholds.high_free_share))
        window = trend_window_scrapes(trend_window_s, scrape_interval_s)
        gauges = {
            RATIO: s["ratio"].to_numpy(),
            UPTIME: s["uptime_s"].to_numpy(),
            RHO: uptime_correlation(s, window, has),  # as fragsim export openmetrics writes it
        }
        for name in list(todo):
            rule = todo[name]
            firing, value = found[name]
            gauge = "for" in rule
            n = math.ceil(_seconds(rule["for"]) / scrape_interval_s) if gauge else 0
            k = _episode(firing, has if gauge else np.ones_like(has), n + 1, 0 if gauge else 1)
            if k is None:
                continue
            k0 = max(0, k - 2)
            end = k + n
            if gauge:
                used = [m for m in gauges if m in rule["expr"]]
                series = [_series(m, labels, gauges[m][k0 : end + 1]) for m in used]
                expected_labels = {**labels, "severity": rule["labels"]["severity"]}
                shown: float | None = float(value[end])
            else:
                series = [_series(FAILURE_COUNTER, labels, counter[k0 : end + 1])]
                expected_labels = {label: str(replica), "severity": rule["labels"]["severity"]}
                shown = None
            annotations = {
                key: _render(text, label, replica, shown)
                for key, text in rule["annotations"].items()
            }
            at = (end - k0) * scrape_interval_s
            tests.append(
                {
                    "name": f"{name} on replica {replica} from {times[k]:g} s of the run",
                    "interval": interval,
                    "input_series": series,
                    "alert_rule_test": [
                        {
                            "eval_time": _at(at - scrape_interval_s),
                            "alertname": name,
                            "exp_alerts": [],
                        },
                        {
                            "eval_time": _at(at),
                            "alertname": name,
                            "exp_alerts": [
                                {"exp_labels": expected_labels, "exp_annotations": annotations}
                            ],
                        },
                    ],
                }
            )
            del todo[name]
    return tests, list(todo)


def _at(at_s: float) -> str:
    return duration(at_s) if at_s > 0 else "0s"


def _seconds(text: str) -> float:
    """A duration as :func:`duration` writes it -> seconds."""
    import re

    units = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|d|h|m|s)", text))


def tests_file(
    rule_file: str, tests: list[dict[str, Any]], untested: list[str], scrape_interval_s: float
) -> str:
    """The promtool test file's YAML text."""
    import yaml

    head = "# fragsim: promtool test rules for the exported alerts, generated from a run."
    if untested:
        head += "\n# No episode in the run to test: " + ", ".join(untested)
    body = {
        "rule_files": [rule_file],
        "evaluation_interval": duration(scrape_interval_s),
        "tests": tests,
    }
    return head + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=1000)
