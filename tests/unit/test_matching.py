"""Which recorded failures a replay reproduces, on hand-made frames: the by-request rule,
the looser by-window rule (one-to-one, greedy by time), and the undefined scores."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.postmortem.matching import (
    TABLE_COLUMNS,
    failure_class,
    failures_by_replica,
    match_failures,
)


def _frame(rows: list[tuple[int, object, str, float]], time: str = "arrival_s") -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["request_id", "replica", "status", time])


RECORDED = _frame(
    [
        (1, 0, "failed", 10.0),
        (2, 0, "failed", 20.0),
        (3, 1, "timed-out", 30.0),
        (4, 1, "failed", 40.0),
        (5, 2, "ok", 50.0),
    ]
)


def test_failure_classes() -> None:
    assert [failure_class(s) for s in ("ok", "unfinished", "timed-out")] == [
        None,
        None,
        "timed-out",
    ]
    assert {failure_class(s) for s in ("failed", "rejected-capacity", "failed-fragmentation")} == {
        "failed"
    }
    with pytest.raises(ValueError, match="unknown status 'oom'"):
        failure_class("oom")


def test_by_request_precision_recall_and_reasons() -> None:
    simulated = _frame(
        [
            (1, 0, "rejected-fragmentation", 10.0),  # reproduced
            (2, 0, "ok", 21.0),  # not reproduced
            (3, 1, "failed-capacity", 33.0),  # wrong class: timed-out matches timed-out only
            (4, 2, "failed-fragmentation", 41.0),  # another replica
            (5, 2, "rejected-capacity", 50.0),  # a failure the log does not have
            (6, 0, "unfinished", 60.0),
        ],
        time="finish_s",
    )
    report = match_failures(RECORDED, simulated)
    assert (report.recorded_failures, report.simulated_failures, report.matched) == (4, 4, 1)
    assert (report.precision, report.recall) == (0.25, 0.25)
    assert list(report.table.columns) == list(TABLE_COLUMNS)
    assert report.table[["request_id", "matched", "reason"]].values.tolist() == [
        [1, True, "reproduced"],
        [2, False, "ok in the simulation"],
        [3, False, "failed-capacity in the simulation, timed-out in the log"],
        [4, False, "failed on replica 2, recorded on replica 1"],
        [3, False, "no recorded failure matches it"],  # then the unmatched simulated ones
        [4, False, "no recorded failure matches it"],
        [5, False, "no recorded failure matches it"],
    ]


def test_by_request_table_rows() -> None:
    simulated = _frame([(1, 0, "rejected-capacity", 1.0), (5, 2, "timed-out", 2.0)])
    report = match_failures(RECORDED, simulated)
    rows = report.table.to_dict("records")
    assert rows[0] == {
        "request_id": 1,
        "replica": 0,
        "recorded_status": "failed",
        "recorded_time_s": 10.0,
        "simulated_request_id": 1,
        "simulated_replica": 0,
        "simulated_status": "rejected-capacity",
        "simulated_time_s": 1.0,
        "matched": True,
        "reason": "reproduced",
    }
    assert [r["reason"] for r in rows[1:4]] == ["not in the simulation"] * 3
    assert rows[4]["recorded_status"] == "ok" and rows[4]["simulated_status"] == "timed-out"
    assert rows[4]["recorded_time_s"] is None and rows[4]["simulated_time_s"] == 2.0
    assert (report.precision, report.recall) == (0.5, 0.25)


def test_by_request_other_replica_counts_when_routing_differs() -> None:
    simulated = _frame([(4, 2, "failed-fragmentation", 41.0)])
    report = match_failures(RECORDED, simulated, same_replica=False)
    assert report.matched == 1
    assert "reproduced on another replica" in report.table["reason"].tolist()


def test_no_failures_leaves_scores_undefined() -> None:
    quiet = _frame([(1, 0, "ok", 1.0)])
    report = match_failures(quiet, quiet)
    assert (report.precision, report.recall, report.matched) == (None, None, 0)
    assert report.table.empty
    one_side = match_failures(RECORDED, quiet)
    assert (one_side.precision, one_side.recall) == (None, 0.0)


def test_by_window_is_one_to_one_and_greedy_by_time() -> None:
    recorded = _frame([(1, 0, "failed", 100.0), (2, 0, "failed", 104.0), (3, 0, "failed", 300.0)])
    simulated = _frame(
        [
            (71, 0, "failed-fragmentation", 103.0),  # nearest to both; the earlier takes it
            (72, 0, "rejected-capacity", 96.0),  # left for recorded 2: 8 s away
            (73, 1, "failed-capacity", 300.0),  # another replica
            (74, 0, "timed-out", 301.0),  # another class
        ]
    )
    report = match_failures(recorded, simulated, rule="by_window", tolerance_s=5.0)
    assert (report.matched, report.recorded_failures, report.simulated_failures) == (1, 3, 4)
    assert (report.precision, report.recall) == (0.25, 1 / 3)
    rows = report.table.to_dict("records")
    assert (rows[0]["simulated_request_id"], rows[0]["reason"]) == (71, "+3 s apart")
    assert not rows[1]["matched"] and not rows[2]["matched"]
    assert "within ±5 s" in rows[1]["reason"]
    wider = match_failures(recorded, simulated, rule="by_window", tolerance_s=10.0)
    assert wider.table["simulated_request_id"].tolist()[:2] == [71, 72]  # 104 takes 96 (8 s)
    assert wider.matched == 2


def test_by_window_one_simulated_failure_matches_once() -> None:
    recorded = _frame([(1, 0, "failed", 10.0), (2, 0, "failed", 10.0)])
    simulated = _frame([(9, 0, "failed-capacity", 10.0)])
    report = match_failures(recorded, simulated, rule="by_window", tolerance_s=1.0)
    assert report.matched == 1 and report.table["matched"].tolist() == [True, False]
    assert (report.precision, report.recall) == (1.0, 0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rule": "nearest"}, "unknown rule"),
        ({"tolerance_s": -1.0}, "tolerance_s must be >= 0"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        match_failures(RECORDED, RECORDED, **kwargs)  # type: ignore[arg-type]


def test_ids_must_be_unique() -> None:
    twice = _frame([(1, 0, "failed", 1.0), (1, 0, "failed", 2.0)])
    with pytest.raises(ValueError, match="request_id 1 twice"):
        match_failures(twice, RECORDED)


def test_failures_by_replica_counts_each_side_on_its_own_replica(tmp_path: Path) -> None:
    recorded = _frame([(1, "a", "failed", 1.0), (2, "a", "failed", 2.0), (3, "b", "failed", 3.0)])
    simulated = _frame(
        [
            (1, "a", "failed-capacity", 1.0),  # reproduced on a
            (2, "a", "ok", 2.0),  # missed on a
            (3, "c", "failed-capacity", 3.0),  # missed on b, extra on c
            (4, "c", "rejected-capacity", 4.0),  # extra on c
        ]
    )
    table = match_failures(recorded, simulated).table
    expected = [
        ["a", 2, 1, 1, 1, 0],
        ["b", 1, 0, 0, 1, 0],
        ["c", 0, 2, 0, 0, 2],
    ]
    assert failures_by_replica(table).values.tolist() == expected
    table.to_csv(tmp_path / "match.csv", index=False)  # as the report reads it back
    assert failures_by_replica(pd.read_csv(tmp_path / "match.csv")).values.tolist() == expected
