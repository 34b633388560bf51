"""The bodies of ``fragsim alerts export`` and ``fragsim alerts show`` (their front,
``sim.cli.alerts``, states the contract). A scenario's thresholds (``--scenario``) are
:mod:`sim.cli.bodies.scenario_thresholds`, loaded only when one is given."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import pandas as pd
import typer

from sim.cli import lazy
from sim.cli.alert_times import (
    MAX_INTERVAL_S,
    MAX_SCRAPES,
    MIN_SCRAPE_INTERVAL_S,
    RunScrapeOpt,
    RunWindowOpt,
    ShowScrapeOpt,
    ShowWindowOpt,
    check_times,
    run_thresholds,
    run_times,
)
from sim.cli.bodies.alert_timing import run_timing
from sim.cli.bodies.run_folder import check_not_an_input, checked_run, too_many_scrapes
from sim.cli.common import fail
from sim.cli.output import Cell, clock_text, echo_prose, print_table
from sim.cli.progress import progress
from sim.errors import clip, os_error_line
from sim.results.io import FILES
from sim.results.runfolder import RunFolderError, read_result, read_run
from sim.results.seed_alerts import THRESHOLD_FIELDS, AlertThresholds, alerts_for
from sim.results.summary_model import Summary
from sim.telemetry.alerts import evaluate_alerts, tier_kinds
from sim.telemetry.diagnosis import diagnose_failures
from sim.telemetry.openmetrics import pool_of
from sim.telemetry.prometheus import (
    INSTANCE_LABELS,
    RuleOptions,
    RulesFile,
    alert_rules,
    duration,
    rules_yaml,
)
from sim.telemetry.prometheus_tests import rule_tests, tests_file
from traces import TraceError
from traces.atomic import atomic_path, check_distinct, staged

HELD_NOTE = (
    "held: episodes of scrapes where the alert's condition held; fired: those that held "
    "its for: (the alerts Prometheus fires)"
)


def _recorded(summary: Summary | None) -> AlertThresholds | None:
    """The thresholds a fleet run recorded (:func:`run_thresholds`), or None."""
    values = run_thresholds(summary)
    if values is None:
        return None
    return AlertThresholds(**{k: v for k, v in values.items() if k in THRESHOLD_FIELDS})


def _thresholds(scenario: Path | None) -> AlertThresholds:
    """The seed's thresholds, or (``--scenario``) that scenario's: loading a scenario
    pulls in the engine, so its body loads only then (:mod:`sim.cli.lazy`)."""
    if scenario is None:
        return AlertThresholds()
    chosen: AlertThresholds = lazy.call(
        "sim.cli.bodies.scenario_thresholds:thresholds", scenario=scenario
    )
    return chosen


def _tier_kinds(scenario: Path | None, summary: Summary | None) -> tuple[str, ...]:
    """The KV offload tier kinds whose alerts the rules file gets: ``--scenario``'s
    tiers, else the ``--run``'s (its summary's ``offload``), else none."""
    if scenario is not None:
        kinds: tuple[str, ...] = lazy.call(
            "sim.cli.bodies.scenario_thresholds:tier_kinds", scenario=scenario
        )
        return kinds
    if summary is None or summary.offload is None:
        return ()
    return tuple(tier.kind for tier in summary.offload.tiers)


def _write(path: Path, write: Callable[[Path], object]) -> None:
    """Run ``write(tmp)`` on a temporary beside ``path``, moved into place on success."""
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except TraceError as e:
        raise fail(str(e)) from None


def _check_distinct(outputs: dict[str, Path | None]) -> None:
    """One ``error:`` line when two outputs name one file (links, relative forms)."""
    try:
        check_distinct({flag: path for flag, path in outputs.items() if path is not None})
    except TraceError as e:
        raise fail(str(e)) from None


def _write_together(files: dict[Path, str]) -> None:
    """Write each text to its file, all or none (``traces.atomic.staged``: every file is
    complete in its temporary before any is put in place)."""
    try:
        with staged() as outputs:
            for path, text in files.items():
                outputs.file(path).write_text(text, encoding="utf-8")
    except TraceError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{clip(str(path))}: cannot write file ({e.strerror or e})") from None


def export_rules(
    *,
    out: Path,
    scenario: Path | None,
    scrape_interval_s: RunScrapeOpt,
    trend_window_s: RunWindowOpt,
    for_s: float | None,
    failure_window_s: float | None,
    runbook_url: str,
    metrics: str,
    instance_label: str,
    tests: Path | None,
    run_dir: Path | None,
) -> None:
    """The work of ``sim.cli.alerts.export_command``, on the options it parsed."""
    if metrics not in ("fragsim", "vllm"):
        raise typer.BadParameter(
            f"got {metrics!r}, expected fragsim or vllm", param_hint="--metrics"
        )
    if instance_label not in INSTANCE_LABELS:
        raise typer.BadParameter(
            f"got {instance_label!r}, expected one of {', '.join(INSTANCE_LABELS)}",
            param_hint="--instance-label",
        )
    if (tests is None) != (run_dir is None):
        raise typer.BadParameter("--tests and --run go together", param_hint="--tests")
    _check_distinct({"-o": out, "--tests": tests})
    if run_dir is not None:
        check_not_an_input(out, run_dir)
        if tests is not None:
            check_not_an_input(tests, run_dir, "--tests")
    if tests is not None and metrics != "fragsim":
        raise typer.BadParameter(
            "tests are generated over fragsim's metric names", param_hint="--metrics"
        )
    summary, summary_path = _run_summary(run_dir)
    scrape_s, window_s, note = run_times(summary, summary_path, scrape_interval_s, trend_window_s)
    _check_holds(for_s, failure_window_s, scrape_s)
    options = RuleOptions(
        for_s=for_s,
        failure_window_s=failure_window_s,
        timing=run_timing(summary, summary_path),
        runbook_url=runbook_url,
        metrics="vllm" if metrics == "vllm" else "fragsim",
        instance_label=instance_label,
    )
    thresholds = _thresholds(scenario)
    if scenario is None:  # the --run's, where it records them
        thresholds = _recorded(summary) or thresholds
    kinds = _tier_kinds(scenario, summary)
    rules = alert_rules(thresholds, scrape_s, window_s, options, kinds)
    text = rules_yaml(rules, options)
    tests_text = None
    if tests is not None and run_dir is not None:
        tests_text = _rule_tests(rules, run_dir, tests, out, thresholds, options)(
            scrape_s, window_s
        )
    files = {out: text} if tests is None or tests_text is None else {out: text, tests: tests_text}
    _write_together(files)
    typer.echo(f"wrote {len(alerts_for(kinds))} alerting rules to {out}")
    if tests is not None and tests_text is not None:
        typer.echo(f"wrote promtool tests to {tests}")
    if note is not None:
        typer.echo(note, err=True)


def _check_holds(for_s: float | None, failure_window_s: float | None, scrape_s: float) -> None:
    """Refuse a ``--for`` below 0 or a ``--failure-window`` below two scrape intervals."""
    for value, name, least in (
        (for_s, "--for", 0.0),
        (failure_window_s, "--failure-window", 2 * scrape_s),
    ):
        if value is not None and not (math.isfinite(value) and least <= value <= MAX_INTERVAL_S):
            raise typer.BadParameter(
                f"got {value:g}, expected seconds in [{least:g}, {MAX_INTERVAL_S:g}]",
                param_hint=name,
            )


def _run_summary(run_dir: Path | None) -> tuple[Summary | None, Path]:
    """The ``--run``'s summary and its path, read once (None without ``--run``:
    :func:`run_times` and :func:`_recorded` then give the defaults)."""
    if run_dir is None:
        return None, Path("summary.json")
    folder, summary = checked_run(run_dir)
    return summary, folder / "summary.json"


def _rule_tests(
    rules: RulesFile,
    run_dir: Path,
    tests: Path,
    out: Path,
    thresholds: AlertThresholds,
    options: RuleOptions,
) -> Callable[[float, float], str]:
    """The promtool test file's text for ``rules`` from the run in ``run_dir``
    (:mod:`sim.telemetry.prometheus_tests`), once given the scrape interval and window."""
    try:
        result = read_run(run_dir)
    except RunFolderError as e:
        raise fail(str(e)) from None
    rule_file = os.path.relpath(out.absolute(), tests.absolute().parent)

    def text(scrape_interval_s: float, trend_window_s: float) -> str:
        found, untested = rule_tests(
            rules,
            result.timeseries,
            result.events,
            result.summary,
            thresholds,
            scrape_interval_s,
            trend_window_s,
            options,
        )
        return tests_file(rule_file, found, untested, scrape_interval_s)

    return text


def show(
    *,
    run_dir: Path,
    out: Path | None,
    scenario: Path | None,
    scrape_interval_s: ShowScrapeOpt,
    trend_window_s: ShowWindowOpt,
    for_s: float | None,
    fmt: str,
    all_rows: bool,
    limit: int | None,
) -> None:
    """The work of ``sim.cli.alerts.show_command``, on the options it parsed."""
    if scrape_interval_s is not None or trend_window_s is not None:
        # a bad flag is refused before the run is read; the pair again once it is
        early_s = MIN_SCRAPE_INTERVAL_S if scrape_interval_s is None else scrape_interval_s
        check_times(early_s, early_s if trend_window_s is None else trend_window_s)
    thresholds = _thresholds(scenario)
    _check_run_dir(run_dir)
    if out is not None:
        check_not_an_input(out, run_dir)
    with progress("alerts show", 3, what="steps") as p:
        p.update(0, note="reading the run")
        try:
            result = read_result(run_dir)
            ts, events, requests = result.timeseries, result.events, result.requests
            span_s = float(ts["time_s"].max() - ts["time_s"].min()) if len(ts) else 0.0
        except (OSError, ValueError, KeyError) as e:
            raise fail(f"{clip(str(run_dir))}: not a readable fragsim run: {_reason(e)}") from None
        given_s = scrape_interval_s
        scrape_interval_s, trend_window_s, note = run_times(
            result.summary, run_dir / "summary.json", scrape_interval_s, trend_window_s
        )
        if scenario is None:  # the run's own thresholds, where it records them
            thresholds = _recorded(result.summary) or thresholds
        _check_holds(for_s, None, scrape_interval_s)
        timing = RuleOptions(
            for_s=for_s, timing=run_timing(result.summary, run_dir / "summary.json")
        ).rule_timing()
        if span_s / scrape_interval_s >= MAX_SCRAPES:
            raise too_many_scrapes(
                f"got {scrape_interval_s:g}: the run's {span_s:g} s would be more than "
                f"{MAX_SCRAPES:,} scrapes",
                given_s,
                result.summary,
                run_dir / "summary.json",
            )
        try:
            p.update(1, note="evaluating the alerts")
            log = evaluate_alerts(
                ts,
                events,
                scrape_interval_s=scrape_interval_s,
                thresholds=thresholds,
                trend_window_s=trend_window_s,
                timing=timing,
            )
            p.update(2, note="diagnosing the failed requests")
            diagnosis = diagnose_failures(requests, events, thresholds)
            p.update(3, note="")
        except KeyError as e:
            raise fail(f"{clip(str(run_dir))}: not a fragsim run: missing column {e}") from None
    log.insert(
        list(log.columns).index("time_s") + 1, "time", [clock_text(t) for t in log["time_s"]]
    )
    summary = result.summary
    if summary is not None and summary.fleet is not None and len(summary.fleet.pools) > 1:
        # Which pool each replica is in (a P/D fleet's prefill and decode), as the
        # exported rules' alerts label it.
        pool = pool_of(summary)
        log.insert(list(log.columns).index("replica") + 1, "pool", log["replica"].map(pool))
    if out is not None:
        _write(out, lambda tmp: log.to_csv(tmp, index=False))
    title = f"alerts over {clip(str(run_dir))}"
    if all_rows or limit is not None:
        shown = log if all_rows or limit is None else log.head(limit)
        print_transitions(shown, f"{title} ({len(shown):,} of {len(log):,} transitions)", fmt)
    else:
        run_alerts = alerts_for(tier_kinds(ts))
        shown_alerts = [(a.name, str(a.severity), timing.hold_s(a.name)) for a in run_alerts]
        print_alert_summary(log, shown_alerts, title, fmt)
    if fmt in ("table", "markdown"):
        if not (all_rows or limit is not None):
            echo_prose(HELD_NOTE, fmt=fmt)
        for spec in alerts_for(tier_kinds(ts)):
            if (log["alert"] == spec.name).any():
                echo_prose(f"{spec.name}: {spec.response}", fmt=fmt)
        echo_prose(_diagnosis_line(diagnosis, thresholds.high_free_share), fmt=fmt)
        if not all_rows and len(log) > (limit or 0):
            echo_prose(
                f"{len(log):,} transitions: --all or --limit N lists them, -o FILE writes "
                "them as CSV",
                fmt=fmt,
            )
    if out is not None:
        typer.echo(f"wrote {len(log):,} alert log rows to {out}", err=True)
    if note is not None:
        typer.echo(note, err=True)


def _diagnosis_line(diagnosis: pd.DataFrame, high_free_share: float) -> str:
    counts = pd.Series(diagnosis["diagnosis"]).value_counts().sort_index()
    shown = ", ".join(f"{name}: {n:,}" for name, n in counts.items())
    high = int(diagnosis["at_high_free_memory"].sum())
    share = f"{high_free_share:.0%}"
    return f"failed requests: {len(diagnosis):,}" + (
        f" (by diagnosis: {shown}); overlapping that split, {high:,} of them failed at "
        f"> {share} free memory (any diagnosis)"
        if len(diagnosis)
        else ""
    )


def print_alert_summary(
    log: pd.DataFrame, alerts: list[tuple[str, str, float]], title: str, fmt: str
) -> None:
    """One row per alert (every one, in the seed's order): severity, its ``for:``, the
    episodes its condition held, those that fired, the replicas it fired on (and, with a
    ``pool`` column: how many in each pool, ``decode 2, prefill 1``), first and last
    firing (``2d 03:14:05``; seconds in csv/json)."""
    machine = fmt in ("csv", "json")
    pooled = "pool" in log.columns
    rows = []
    for name, severity, hold in alerts:
        mine = log[log["alert"] == name]
        fired = mine[mine["state"] == "firing"]
        held = int((mine["state"] == "pending").sum())
        times = fired["time_s"]
        first = float(times.min()) if len(times) else None
        last = float(times.max()) if len(times) else None
        row: list[object] = [name, severity, hold if machine else _hold_text(hold), held]
        row += [len(fired), fired["replica"].nunique()]
        if pooled:
            per_pool = fired.groupby("pool", sort=True)["replica"].nunique()
            row.append(", ".join(f"{p} {n}" for p, n in per_pool.items()) or None)
        if machine:
            row += [first, last, *(None if t is None else clock_text(t) for t in (first, last))]
        else:
            row += [None if t is None else Cell(t, clock_text(t)) for t in (first, last)]
        rows.append(row)
    columns = ["alert", "severity"]
    pools = ["replicas_by_pool" if machine else "by pool"] if pooled else []
    if machine:
        columns += ["for_s", "condition_episodes", "firings", "replicas", *pools]
        columns += ["first_firing_s", "last_firing_s", "first_firing", "last_firing"]
    else:
        columns += ["for", "held", "fired", "replicas", *pools, "first firing", "last firing"]
    print_table(title, columns, rows, fmt)


def _hold_text(for_s: float) -> str:
    return duration(for_s) if for_s > 0 else "0s"


def print_transitions(log: pd.DataFrame, title: str, fmt: str) -> None:
    """The alert log's rows: when (``2d 03:14:05``; seconds too in csv/json), on which
    replica (and its pool, with a ``pool`` column), which alert, pending, firing or
    resolved, the value then."""
    machine = fmt in ("csv", "json")
    pooled = "pool" in log.columns
    columns = ["time", "replica", *(["pool"] if pooled else []), "alert", "state", "value"]
    columns.append("severity")
    if machine:
        columns = ["time_s", *columns]
    rows = []
    records: list[dict[Hashable, Any]] = log.to_dict("records")
    for row in records:
        cells: list[object] = [
            row["time"],
            int(row["replica"]),
            *([row["pool"]] if pooled else []),
            row["alert"],
            row["state"],
            Cell(float(row["value"]), f"{row['value']:.3g}"),
            row["severity"],
        ]
        rows.append([float(row["time_s"]), *cells] if machine else cells)
    print_table(title, columns, rows, fmt)


def _check_run_dir(run_dir: Path) -> None:
    """Fail unless ``run_dir`` is a folder holding a run's files."""
    try:
        if not run_dir.is_dir():
            raise fail(f"{clip(str(run_dir))}: no such run folder (fragsim run -o writes one)")
        missing = [name for name in FILES if not (run_dir / name).is_file()]
    except OSError as e:
        raise fail(os_error_line(e)) from None
    if missing:
        raise fail(f"{clip(str(run_dir))}: not a fragsim run: missing {', '.join(missing)}")


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError):
        return os_error_line(e)
    return clip(" ".join(str(e).split()) or type(e).__name__)
