"""reports.comparison and reports.sweep: the compare report opens on the verdicts and a
table of deltas against the baseline, its bars mark the baseline; the sweep report has
readable labels, intervals, one colour scale per metric from zero, a table of results,
and a bounded size."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from plotly.offline import get_plotlyjs
from unit.test_compare import summary

from reports.comparison import BASELINE, BETTER, WORSE, comparison_bars, comparison_table
from reports.sweep import (
    MAX_PANELS,
    MAX_TABLE_POINTS,
    SIZE_BOUND_BYTES,
    build_sweep_report,
    figures,
    sweep_heatmap,
)
from sim.sweep.summary import METRICS

HOSTILE = "<b>x</b>"


def test_comparison_table_opens_on_the_verdicts_then_the_deltas() -> None:
    runs = [summary("base", 200.0, 40), summary(HOSTILE, 300.0, 40), summary("paged", 50.0, 4)]
    html = comparison_table(runs, ["base", HOSTILE, "paged"])
    assert HOSTILE not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    first, second = html.index("rank 1: paged saves $150.00"), html.index("rank 3: &lt;b&gt;")
    assert first < second < html.index("<table")
    assert "base<br>(baseline, rank 2)" in html
    assert html.index("paged (rank 1)") < html.index("&lt;b&gt;x&lt;/b&gt; (rank 3)")
    assert f'<td style="color:{BETTER}">−150.0 (−75.0 %)</td>' in html
    assert f'<td style="color:{WORSE}">+100.0 (+50.0 %)</td>' in html
    assert "<b>failures at &gt; 25 % free memory</b>" in html  # a compared metric
    assert '<td class="sub">replicas (peak)</td>' in html  # values only


def test_comparison_bars_mark_the_baseline() -> None:
    runs = [summary("single", None, 10), summary("paged", None, 2, ttft_p99_s=None)]
    fig = comparison_bars(runs, ["single", "paged"])
    names = [t.name for t in fig.data]
    assert "cost ($)" not in names and "TTFT p99 (s)" in names  # no price anywhere
    failures = fig.data[names.index("allocation failures")]
    assert list(failures.y) == ["single", "paged"] and list(failures.x) == [10, 2]
    assert list(failures.marker.color) == [BASELINE, BETTER]
    assert failures.text[0] == "10 (baseline)" and failures.text[1] == "2 (-80.0 %)"
    assert any(s.line.dash == "dash" for s in fig.layout.shapes)  # the baseline's value
    html = comparison_table(runs, ["single", "paged"])
    assert "no prices to compare: ranked by fewer allocation failures" in html


def sweep_summary(values: dict[str, list[object]], replications: int = 3) -> pd.DataFrame:
    """A summary_frame-shaped table over the grid ``values`` (a cartesian product),
    each metric's mean growing with the point number, intervals of +/- 10 %."""
    points = list(itertools.product(*values.values()))
    rows = []
    for i, point in enumerate(points):
        row: dict[str, object] = {"point": i, **dict(zip(values, point, strict=True))}
        row.update({"replications": replications, "failed_runs": 0})
        for m in METRICS:
            mean = 100.0 + i
            row.update({f"{m}_mean": mean, f"{m}_ci95_low": 0.9 * mean})
            row[f"{m}_ci95_high"] = 1.1 * mean
        rows.append(row)
    return pd.DataFrame(rows)


def test_sweep_heatmaps_share_one_scale_from_zero_with_intervals_in_cells() -> None:
    frame = sweep_summary(
        {"allocator.kind": ["paged", "best_fit"], "fleet.router.kind": ["a", "b"], "seed": [1, 2]}
    )
    fig = sweep_heatmap(frame, "allocator.kind", "fleet.router.kind", "cost_usd_mean", by=["seed"])
    assert len(fig.data) == 2 and {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 107.0
    assert fig.layout.xaxis.title.text == "allocator" and fig.layout.yaxis.title.text == "router"
    assert fig.data[0].text[0][0] == "104 ± 10.4"  # best_fit, router a, seed 1: point 4
    assert [a.text for a in fig.layout.annotations] == ["seed 1", "seed 2"]


def test_one_varied_parameter_draws_bars_with_error_bars() -> None:
    frame = sweep_summary({"workload.synth.arrival.rate_per_s": [1.0, 2.0]})
    figs = figures(frame, ["workload.synth.arrival.rate_per_s"])
    assert figs and all(f.data[0].type == "bar" for f in figs)
    assert np.allclose(figs[0].data[0].error_y.array, [10.0, 10.1])
    assert figs[0].layout.xaxis.title.text == "arrival rate (req/s)"


def test_sweep_report_labels_a_table_and_percent_vs_the_first_point() -> None:
    frame = sweep_summary({"allocator.kind": ["paged", HOSTILE], "fleet.router.kind": ["a"]})
    html = build_sweep_report(frame, ["allocator.kind", "fleet.router.kind"], "s")
    assert "<h1>sweep: s</h1>" in html and html.count(get_plotlyjs()) == 1
    assert "varied: allocator</p>" in html and "held: router a" in html
    assert HOSTILE not in html and "fleet.router.kind" not in html.split("<script")[0]
    assert "<th>cost ($)</th>" in html and "101 ± 10.1<br>" in html and "+1.0 %" in html


def test_sweep_report_size_is_bounded() -> None:
    """2,000 points over three parameters: the table and the panels stop at their bounds."""
    frame = sweep_summary({"a": list(range(10)), "b": list(range(10)), "c": list(range(20))}, 1)
    params = ["a", "b", "c"]
    html = build_sweep_report(frame, params, "big")
    assert html.count("<tr>") == MAX_TABLE_POINTS + 1
    assert f"first {MAX_PANELS} of 20 panels" in html
    assert len(html.encode()) - len(get_plotlyjs().encode()) < SIZE_BOUND_BYTES
