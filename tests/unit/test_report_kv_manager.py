"""reports.kv_manager: a KV manager's run gets the figure of its waste by cause, its
windows the capacity-weighted means of the timeseries' columns, with the layout notes
and the summary's means below it; a run of a single-pool allocator has no such panel
and no trace of it in its report."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import reports.html
from reports.aggregate import quantile_window_s, up_samples, window_index
from reports.common import figure_note
from reports.html import build_report, figure_html, run_panels
from reports.kv_manager import CAUSES, TITLE, kv_manager_waste
from sim.engine.recorder import KV_WASTE_COLUMNS
from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.builtin import builtin_data
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

HOSTILE = "<script>alert(1)</script>"


def _run(kind: str, mixed: bool = False) -> RunResult:
    """The built-in ``hybrid-kv-managers`` (Gemma-3-27B), 10 minutes on two replicas;
    ``mixed``: and a third one, in a pool of its own, ``paged``."""
    data: dict[str, Any] = builtin_data("hybrid-kv-managers")
    data["name"] = f"kv-{kind}"
    data["allocator"] = {"kind": kind}
    data["workload"] = {**data["workload"], "synth": {"duration_s": 600}}
    data["metrics"] = {"sample_interval_s": 20}
    data["fleet"]["pools"][0]["count"] = 2
    if mixed:
        data["fleet"]["pools"].append({"name": "paged", "count": 1, "allocator": {"kind": "paged"}})
    scenario = parse_scenario(data)
    return run(scenario, load_workload(scenario))


@pytest.fixture(scope="module")
def hybrid() -> RunResult:
    return _run("hybrid_kv")


@pytest.fixture(scope="module")
def paged() -> RunResult:
    return _run("paged")


def test_the_causes_are_the_recorders_columns() -> None:
    assert tuple(c for c, *_ in CAUSES) == KV_WASTE_COLUMNS


def test_a_kv_managers_run_draws_its_causes_per_window(hybrid: RunResult) -> None:
    fig = kv_manager_waste(hybrid)
    assert fig is not None and fig.layout.title.text.startswith(TITLE)
    assert [t.name.split(":")[0] for t in fig.data] == [label for _, label, *_ in CAUSES]
    samples = up_samples(hybrid.timeseries)
    width_s = quantile_window_s(samples)
    key = window_index(samples["time_s"].to_numpy(dtype=float), width_s)
    first = samples[key == key.min()]
    capacity = first["capacity_tokens"].to_numpy(dtype=float)
    for trace, (column, *_) in zip(fig.data, CAUSES, strict=True):
        expected = (first[column].to_numpy(dtype=float) * capacity).sum() / capacity.sum()
        assert trace.y[0] == pytest.approx(expected * 100.0)
        assert trace.x[0] == pytest.approx((key.min() + 0.5) * width_s)
    padding = np.asarray(fig.data[0].y, dtype=float)
    assert len(padding) > 1 and (padding > 0).all()  # Gemma's 8 padding layers


def test_the_notes_below_it_are_the_summarys(hybrid: RunResult) -> None:
    fig = kv_manager_waste(hybrid)
    assert fig is not None
    note = figure_note(fig)
    assert note is not None
    pools = hybrid.summary.fleet.pools if hybrid.summary.fleet is not None else []
    layout = hybrid.summary.kv_layout or pools[0].kv_layout or []
    assert layout and all(line in note for line in layout)
    waste = hybrid.summary.memory.kv_manager_waste or {}
    assert f"<td>padding</td><td>{waste['padding']:.1%}</td>" in note
    html = figure_html(fig, 7)
    assert html.endswith(note + "</div>") and "html_note" not in html  # not in the JSON
    page = build_report([("hybrid", hybrid)])
    assert page.count(TITLE) == 1 and page.count('class="answer kv-causes"') == 1


def test_layout_notes_are_escaped(hybrid: RunResult) -> None:
    hostile = hybrid.summary.model_copy(update={"kv_layout": [HOSTILE]})
    fig = kv_manager_waste(replace(hybrid, summary=hostile))
    assert fig is not None
    note = figure_note(fig) or ""
    assert HOSTILE not in note and "&lt;script&gt;" in note


def test_a_single_pool_run_has_no_such_panel(
    paged: RunResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not set(KV_WASTE_COLUMNS) & set(paged.timeseries.columns)
    assert kv_manager_waste(paged) is None
    titles = [fig.layout.title.text or "" for fig in run_panels(paged)]
    assert not any(t.startswith(TITLE) for t in titles)
    assert all(figure_note(fig) is None for fig in run_panels(paged))
    page = build_report([("paged", paged)])
    assert "KV manager waste" not in page and "kv-causes" not in page
    without = tuple(f for f in reports.html.FIGURES if f is not kv_manager_waste)
    monkeypatch.setattr(reports.html, "FIGURES", without)
    assert build_report([("paged", paged)]) == page  # its report as before, byte for byte


def test_a_mixed_fleet_draws_the_kv_managers_replicas_alone() -> None:
    mixed = _run("hybrid_kv", mixed=True)
    fig = kv_manager_waste(mixed)
    assert fig is not None
    samples = up_samples(mixed.timeseries)
    managed = samples[samples["share_padding"].notna()]
    assert 0 < managed["replica"].nunique() < samples["replica"].nunique()
    width_s = quantile_window_s(managed)
    key = window_index(managed["time_s"].to_numpy(dtype=float), width_s)
    first = managed[key == key.min()]
    capacity = first["capacity_tokens"].to_numpy(dtype=float)
    expected = (first["share_padding"].to_numpy(dtype=float) * capacity).sum() / capacity.sum()
    assert fig.data[0].y[0] == pytest.approx(expected * 100.0)  # of their capacity alone
    note = figure_note(fig) or ""
    assert "pool a100: " in note  # the layout named by the pool it is of
