"""`fragsim export openmetrics`'s series beyond the timeseries columns: the
uptime-correlation gauge (the alert evaluation's rho at every scrape a replica reports,
NaN where it stops), memory in bytes at the KV bytes per token the summary records (per
pool; the flag overrides; a note naming the flag where a run records none), and pools
from the summary's replica lists -- a two-pool fleet that scales into its second pool
labels the new replicas by it; the counters on the scrape clock (every scrape of a live
replica), the scrape interval and window from the run's summary (flags override; a
note for older fleet runs), and a scrape interval giving too many scrapes refused."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.runfolder import seal, stub_fleet, stub_summary, write_stub_tables
from typer.testing import CliRunner

from sim.cli import app
from sim.results.summary_model import Summary
from sim.telemetry import openmetrics as om

runner = CliRunner()

BASE_SUMMARY: dict[str, Any] = stub_summary()


def _write_run(tmp_path: Path, ts: pd.DataFrame, summary: dict[str, Any]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    columns = ("capacity_tokens", "used_tokens", "free_extent_count", "running_requests")
    full = ts.assign(**{c: 0 for c in columns if c not in ts})
    if "capacity_tokens" not in ts:  # a pool larger than any sample's use
        full["capacity_tokens"] = 1_000_000
    full = full.assign(**{c: 0 for c in ("waiting_requests", "preemptions_total") if c not in full})
    full.to_parquet(run / "timeseries.parquet")
    events = {"time_s": [], "replica": [], "kind": [], "request_id": [], "free_share": []}
    events |= {"cause": []}
    pd.DataFrame(events).astype({"replica": "int64", "kind": object, "cause": object}).to_parquet(
        run / "events.parquet"
    )
    (run / "summary.json").write_text(json.dumps(summary))
    write_stub_tables(run, fleet="fleet" in summary)
    seal(run)
    return run


def _samples(text: str, family: str) -> list[tuple[str, float, float]]:
    """(labels, value, seconds since the origin 1000) of each sample of ``family``."""
    out = []
    for line in text.splitlines():
        if line.startswith(family + "{"):
            head, value, stamp = line.rsplit(" ", 2)
            out.append((head[len(family) :], float(value), round(float(stamp) - 1000, 3)))
    return out


def _trend_timeseries() -> pd.DataFrame:
    """One replica sampled every 30 s for 30 min, up 1 h at the start, fragmentation
    rising with a wobble; down (restarting) from 600 s to 690 s, then up from 0."""
    times = np.arange(0.0, 1800.0 + 1, 30.0)
    up = ~((times >= 600) & (times < 720))
    uptime = np.where(times < 600, 3600.0 + times, np.maximum(times - 690.0, 0.0))
    ratio = 0.9 - 0.4 * times / 1800 + 0.05 * np.sin(times / 50)
    return pd.DataFrame(
        {
            "time_s": times,
            "replica": 0,
            "trigger": ["periodic"] * (len(times) - 1) + ["final"],
            "up": up,
            "uptime_s": uptime,
            "free_tokens": 1000,
            "largest_free_extent_tokens": (1000 * ratio).astype(int),
            "largest_contiguous_free_block_ratio": ratio,
        }
    )


def test_the_correlation_gauge_is_the_alerts_rho_at_every_scrape_the_replica_reports(
    tmp_path: Path,
) -> None:
    from scipy.stats import spearmanr

    from sim.results.seed_alerts import AlertThresholds
    from sim.telemetry.alerts import conditions, scrape_times

    ts = _trend_timeseries()
    run = _write_run(tmp_path, ts, BASE_SUMMARY)
    out = io.StringIO()
    om.write_openmetrics(
        out, run, Summary.from_json_dict(BASE_SUMMARY), origin_s=1000, trend_window_s=300.0
    )
    got = _samples(out.getvalue(), om.UPTIME_CORRELATION.name)
    at = {t: v for _, v, t in got}
    # every scrape it reports, and the first one it does not (NaN): none during the
    # restart after that, none after the final sample
    want_times = [t for t in range(0, 1801, 30) if not 630 <= t < 720]
    assert sorted(at) == want_times
    assert math.isnan(at[600.0]) and all(lab == '{replica="0",pool="default"}' for lab, _, _ in got)
    # rho over the window's (uptime, 1 - ratio): the 10 scrapes of the last 300 s
    window = ts[(ts["time_s"] > 1200) & (ts["time_s"] <= 1500)]
    rho, _ = spearmanr(window["uptime_s"], 1 - window["largest_contiguous_free_block_ratio"])
    assert at[1500.0] == pytest.approx(float(rho), rel=1e-12) and -1 < rho < 1
    # the value the alert evaluation ranks wherever it ranks one (alerts.parquet's)
    times = scrape_times(ts, 30.0)
    events = pd.read_parquet(run / "events.parquet")
    _, value = conditions(ts, events, 0, times, AlertThresholds(), 300.0, 30.0)[
        "node_uptime_vs_fragmentation_correlation"
    ]
    ranked = [(float(t), float(v)) for t, v in zip(times, value, strict=True) if not np.isnan(v)]
    assert ranked and all(at[t] == v for t, v in ranked)


def test_the_correlation_gauge_ends_at_a_scaled_down_replicas_last_sample(
    tmp_path: Path,
) -> None:
    # replica 1 sampled to 300 s and then no more (scaled down: no row says so)
    ts = _trend_timeseries()
    gone = ts[ts["time_s"] <= 300].assign(replica=1, trigger="periodic")
    run = _write_run(tmp_path, pd.concat([ts, gone], ignore_index=True), BASE_SUMMARY)
    out = io.StringIO()
    om.write_openmetrics(
        out, run, Summary.from_json_dict(BASE_SUMMARY), origin_s=1000, trend_window_s=300.0
    )
    got = _samples(out.getvalue(), om.UPTIME_CORRELATION.name)
    mine = [(t, v) for labels, v, t in got if labels == '{replica="1",pool="default"}']
    assert [t for t, _ in mine] == [float(t) for t in range(0, 331, 30)]
    assert math.isnan(mine[-1][1]) and not math.isnan(mine[-2][1])


def _three_replicas() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "time_s": [0.0, 0.0, 0.0],
            "replica": [0, 1, 2],
            "trigger": "periodic",
            "up": True,
            "uptime_s": 0.0,
            "free_tokens": [100, 200, 300],
            "largest_free_extent_tokens": [50, 50, 50],
            "largest_contiguous_free_block_ratio": [0.5, 0.25, 1 / 6],
        }
    )


def test_bytes_at_each_pools_bytes_per_token_and_the_flag_overrides(tmp_path: Path) -> None:
    summary = BASE_SUMMARY | {
        "kv_bytes_per_token": None,
        "fleet": stub_fleet(
            [
                {"name": "a", "count": 1, "replicas": [0, 2], "kv_bytes_per_token": 4},
                {"name": "b", "count": 1, "replicas": [1], "kv_bytes_per_token": 8},
            ]
        ),
    }
    run = _write_run(tmp_path, _three_replicas(), summary)
    out = io.StringIO()
    assert om.write_openmetrics(out, run, Summary.from_json_dict(summary), origin_s=1000)
    free = _samples(out.getvalue(), "fragsim_kv_free_bytes")
    assert free == [
        ('{replica="0",pool="a"}', 400.0, 0.0),
        ('{replica="1",pool="b"}', 1600.0, 0.0),
        ('{replica="2",pool="a"}', 1200.0, 0.0),  # scaled up into pool a: its bytes
    ]
    out = io.StringIO()
    om.write_openmetrics(
        out, run, Summary.from_json_dict(summary), origin_s=1000, kv_bytes_per_token=3
    )
    assert [v for _, v, _ in _samples(out.getvalue(), "fragsim_kv_free_bytes")] == [300, 600, 900]


def test_a_run_that_records_no_bytes_per_token_gets_a_note_naming_the_flag(
    tmp_path: Path,
) -> None:
    run = _write_run(tmp_path, _three_replicas(), BASE_SUMMARY)
    out = tmp_path / "x.om"
    result = runner.invoke(app, ["export", "openmetrics", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    # one note, wrapped to the terminal: read it as one line
    (note,) = [n for n in " ".join(result.stderr.split()).split("note: ")[1:] if n]
    assert "records no KV bytes per token" in note and "--kv-bytes-per-token" in note
    assert "fragsim_kv_free_bytes" not in out.read_text()
    args = ["export", "openmetrics", str(run), "-o", str(out), "--kv-bytes-per-token", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "note: " not in result.stderr
    assert 'fragsim_kv_free_bytes{replica="2",pool="default"} 600 ' in out.read_text()


def test_a_two_pool_fleet_that_scales_labels_its_new_replicas_by_their_pool(
    tmp_path: Path,
) -> None:
    from support.fleet import fleet_data, run_fleet_data
    from support.scenarios import request_frame

    autoscaler = {
        "kind": "naive",
        "interval_s": 10.0,
        "step": 1,
        "queue_threshold": 1,
        "scale_up_cooldown_s": 0.0,
        "scale_down_window_s": 50.0,
    }
    pools = [{"name": "a", "count": 1}, {"name": "b", "count": 1}]
    data = fleet_data(
        pools=pools,
        autoscaler=autoscaler,
        scale_pool="b",
        max_replicas=4,
        provision_s=20.0,
        load_s=5.0,
        warmup_s=5.0,
        sample_interval_s=5.0,
    )
    df = request_frame([1.0 * i for i in range(80)], [3000] * 80, [500] * 80)
    result = run_fleet_data(data, df)
    result.write(tmp_path / "run")
    a, b = result.summary.fleet.pools
    assert result.summary.fleet.scale_ups >= 1
    assert a.replicas == [0] and b.replicas[0] == 1 and len(b.replicas) > 1
    out = tmp_path / "run.om"
    done = runner.invoke(app, ["export", "openmetrics", str(tmp_path / "run"), "-o", str(out)])
    assert done.exit_code == 0 and "note: " not in done.stderr, done.output
    text = out.read_text()
    for replica in b.replicas[1:]:  # the autoscaler's: in pool b, not the first pool
        assert f'fragsim_kv_free_tokens{{replica="{replica}",pool="b"}}' in text
        assert f'{{replica="{replica}",pool="a"}}' not in text
    # bytes at the summary's bytes per token, with no flag
    per_token = result.summary.kv_bytes_per_token
    assert per_token == a.kv_bytes_per_token == b.kv_bytes_per_token > 0
    first = result.timeseries.iloc[0]
    line = f'fragsim_kv_free_bytes{{replica="{first["replica"]}",pool="a"}} '
    assert line + f"{int(first['free_tokens']) * per_token} " in text
    # the scrape interval and window its alerts were evaluated with: the rules' (and
    # their tests') defaults with --run, the flags override them; older runs: a note
    assert result.summary.fleet.alerts.to_json_dict() == {
        "scrape_interval_s": 30.0,
        "trend_window_s": 3600.0,
        "thresholds": {
            "high_free_share": 0.25,
            "ratio_alert": 0.6,
            "ratio_severe": 0.5,
            "uptime_rho_alert": 0.5,
        },
        # each rule's for: and the failure window (sim.telemetry.alert_states)
        "for_s": {
            "fragmentation_driven_allocation_failure": 0.0,
            "severe_fragmentation": 0.0,
            "high_fragmentation_approaching_threshold": 30.0,
            "node_uptime_vs_fragmentation_correlation": 30.0,
        },
        "failure_window_s": 300.0,
    }
    summary_path = tmp_path / "run" / "summary.json"
    summary = json.loads(summary_path.read_text())

    def rules_for(*args: str) -> tuple[str, list[str]]:
        run = ["--tests", str(tmp_path / "t.yaml"), "--run", str(tmp_path / "run")]
        done = runner.invoke(app, ["alerts", "export", "-o", str(out), *run, *args])
        assert done.exit_code == 0, done.output
        return out.read_text(), [x for x in done.stderr.splitlines() if x.startswith("note: ")]

    summary["fleet"]["alerts"] = {"scrape_interval_s": 60.0, "trend_window_s": 600.0}
    summary_path.write_text(json.dumps(summary))
    assert rules_for() == (rules_for()[0], []) and "interval: 1m" in rules_for()[0]
    assert ">= 600.0" in rules_for()[0] and ">= 1200.0" in rules_for("--trend-window", "1200")[0]
    assert "interval: 2m" in rules_for("--scrape-interval", "120")[0]
    del summary["fleet"]["alerts"]
    summary_path.write_text(json.dumps(summary))
    text, (note,) = rules_for("--trend-window", "1200")
    assert "interval: 30s" in text and "pass --scrape-interval if" in note


def test_gauges_leave_out_the_samples_taken_at_failures_and_counters_are_scraped(
    tmp_path: Path,
) -> None:
    ts = _three_replicas()
    at_failure = ts.iloc[[0]].assign(time_s=5.0, trigger="failure")
    at_failure["largest_contiguous_free_block_ratio"] = 0.1
    later = ts.iloc[[0]].assign(time_s=10.0)
    run = _write_run(tmp_path, pd.concat([ts, at_failure, later], ignore_index=True), BASE_SUMMARY)
    out = io.StringIO()
    om.write_openmetrics(
        out, run, Summary.from_json_dict(BASE_SUMMARY), origin_s=1000, scrape_interval_s=5.0
    )
    text = out.getvalue()
    ratio = _samples(text, "fragsim_largest_contiguous_free_block_ratio")
    assert [(t, v) for lab, v, t in ratio if 'replica="0"' in lab] == [(0.0, 0.5), (10.0, 0.5)]
    counter = _samples(text, "fragsim_preemptions_total")
    assert [t for lab, _, t in counter if 'replica="0"' in lab] == [0.0, 5.0, 10.0]


def test_the_failure_counter_is_written_at_every_scrape_of_a_live_replica(
    tmp_path: Path,
) -> None:
    """Sampled every 300 s, scraped every 30 s: each replica's counter has a sample at
    every scrape from the last at or before its first row to the first at or after its
    last (replica 1 is scaled up at 310 s and down at 650 s), so increase() over two
    scrapes sees each failure, one alone between two rows included: its steps are
    fragsim's failures per scrape window (sim.telemetry.alerts.high_free_failures)."""
    from sim.telemetry.alerts import high_free_failures, scrape_times

    rows = [(t, 0, "periodic") for t in range(0, 1200, 300)] + [(1200, 0, "final")]
    rows += [(310, 1, "periodic"), (610, 1, "periodic"), (650, 1, "failure")]
    ts = pd.DataFrame(rows, columns=["time_s", "replica", "trigger"]).sort_values(
        ["time_s", "replica"], kind="stable"
    )
    ts = ts.assign(time_s=ts["time_s"].astype(float), up=True, uptime_s=ts["time_s"])
    ts = ts.assign(free_tokens=1000, largest_free_extent_tokens=500)
    ts = ts.assign(largest_contiguous_free_block_ratio=0.5)
    run = _write_run(tmp_path, ts.reset_index(drop=True), BASE_SUMMARY)
    events = pd.DataFrame(
        {
            "time_s": [45.0, 330.0, 500.0, 640.0, 650.0, 1199.0],
            "replica": [0, 1, 0, 1, 1, 0],
            "kind": ["growth_failure", "admission_failure", "growth_failure"]
            + ["growth_failure"] * 3,
            "free_share": [0.5, 0.6, 0.1, 0.4, 0.3, 0.9],  # 500 s: not at high free memory
        }
    )
    events.to_parquet(run / "events.parquet")
    out = io.StringIO()
    om.write_openmetrics(
        out, run, Summary.from_json_dict(BASE_SUMMARY), origin_s=1000, scrape_interval_s=30.0
    )
    counter = _samples(out.getvalue(), om.FAILURES.name + "_total")
    times = scrape_times(ts, 30.0)
    assert list(times) == [30.0 * k for k in range(41)]
    for replica, (lo_s, hi_s) in {0: (0.0, 1200.0), 1: (300.0, 660.0)}.items():
        mine = [(t, v) for labels, v, t in counter if f'replica="{replica}"' in labels]
        scraped = [t for t in times if lo_s <= t <= hi_s]
        assert [t for t, _ in mine] == scraped, replica
        steps = np.diff([v for _, v in mine])
        per_window = high_free_failures(events, times, replica, 0.25)
        assert list(steps) == list(per_window[np.isin(times, scraped)][1:]), replica
        assert per_window[~np.isin(times, scraped[1:])].sum() == 0
    assert [v for labels, v, t in counter if 'replica="0"' in labels and t in (30, 60)] == [0, 1]


def test_the_scrape_interval_and_window_default_to_the_runs_and_flags_override(
    tmp_path: Path,
) -> None:
    """The summary's fleet.alerts (what alerts.parquet was evaluated with) sets the
    export's scrape clock; a flag overrides it; a fleet run written before fragsim
    recorded them gets the defaults and one note."""
    recorded = {"scrape_interval_s": 60.0, "trend_window_s": 600.0}
    fleet = stub_fleet([{"name": "a", "count": 1}])
    run = _write_run(tmp_path, _trend_timeseries(), BASE_SUMMARY | {"fleet": fleet})
    out = tmp_path / "x.om"

    def clock(*args: str) -> tuple[list[float], list[str]]:
        done = runner.invoke(app, ["export", "openmetrics", str(run), "-o", str(out), *args])
        assert done.exit_code == 0, done.output
        stamps = [t for _, _, t in _samples(out.read_text(), "fragsim_preemptions_total")]
        notes = [line for line in done.stderr.splitlines() if "alert scrape interval" in line]
        return [float(t - stamps[0]) for t in stamps[:3]], notes

    steps, (note,) = clock()  # written before fragsim recorded them: defaults, a note
    assert steps == [0.0, 30.0, 60.0] and "--scrape-interval / --trend-window" in note
    assert clock("--scrape-interval", "30", "--trend-window", "3600") == ([0.0, 30.0, 60.0], [])
    (run / "summary.json").write_text(
        json.dumps(BASE_SUMMARY | {"fleet": fleet | {"alerts": recorded}})
    )
    assert clock() == ([0.0, 60.0, 120.0], [])
    assert clock("--scrape-interval", "15") == ([0.0, 15.0, 30.0], [])


def test_a_scrape_interval_giving_too_many_scrapes_is_one_error_line(tmp_path: Path) -> None:
    ts = _trend_timeseries().iloc[[0, -1]].assign(time_s=[0.0, 6e6])
    run = _write_run(tmp_path, ts, BASE_SUMMARY)
    out = tmp_path / "x.om"
    args = ["export", "openmetrics", str(run), "-o", str(out), "--scrape-interval", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert (
        line.startswith("error: ") and "5,000,000 scrapes" in line and "--scrape-interval" in line
    )
    assert not out.exists() and not list(tmp_path.glob(".x.om*"))
    assert runner.invoke(app, [*args[:-1], "3600"]).exit_code == 0
