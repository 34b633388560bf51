"""The result tables read their one definition of each table's columns (the table
dataclasses of ``sim.engine.recorder``, ``REQUEST_FIELDS``): ``frame`` and
``request_frame`` build the same DataFrame ``pd.DataFrame.from_records`` would of the
rows (values, dtypes, column order), on hand-made rows and on a real run's records; a
column left short is an error; the Outputs table of docs/scenarios.md lists exactly
those columns."""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim.runner
from sim.engine.batch import Group
from sim.engine.recorder import EVENT_COLUMNS, SAMPLE_COLUMNS, EventTable, Recorder
from sim.results.frames import (
    PREFIX_CACHE_COLUMNS,
    RECORD_FIELDS,
    REQUEST_COLUMNS,
    columns_of,
    frame,
    request_frame,
)
from sim.runner import run
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload
from sim.simulate.records import KEPT_COPY_ROWS, STATUSES, Records, copy_records

OUTPUTS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"


def rows_of(table: object) -> list[tuple[object, ...]]:
    return list(zip(*(getattr(table, name) for name in columns_of(table)), strict=True))


def same_as_from_records(table: object) -> None:
    columns = columns_of(table)
    want = pd.DataFrame.from_records(rows_of(table), columns=list(columns))
    got = frame(table)
    assert list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@dataclass
class HandTable:
    a: list[object] = field(default_factory=list)
    b: list[object] = field(default_factory=list)
    c: list[object] = field(default_factory=list)
    d: list[object] = field(default_factory=list)


def hand_table(rows: list[tuple[object, ...]]) -> HandTable:
    table = HandTable()
    for row in rows:
        for name, value in zip(columns_of(table), row, strict=True):
            getattr(table, name).append(value)
    return table


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [(1, 0.5, "ok", True)],
        [(1, 0.5, "ok", True), (2, math.nan, "rejected-capacity", False)],
        [(1, 2, "a", None), (3, 4.5, None, None)],  # int+float; str+None; all None
        [(1 << 40, -0.0, "x", 1.0), (-(1 << 40), math.inf, "y", None)],  # float+None
        [(True, 1, "b", 7), (False, 2, "c", 8)],
        [(True, 1.5, (1, 2), 1 << 70), (2, False, (3,), 5)],  # bool+number; uneven; huge
        [(1 << 63, math.nan, "", True), (1, math.inf, "é", False)],  # int past int64; strs
        [(-(1 << 63), 0.25, "z", 1 << 64), (0, -1.0, "z", 2)],  # int64's least; uint64
    ],
)
def test_hand_made_rows(rows: list[tuple[object, ...]]) -> None:
    table = hand_table(rows)
    assert rows_of(table) == rows
    same_as_from_records(table)


def test_a_column_left_short_is_an_error() -> None:
    table = hand_table([(1, 2, 3, 4), (5, 6, 7, 8)])
    table.c.pop()
    with pytest.raises(AssertionError, match=r"\['c'\]"):
        frame(table)


def test_column_names_are_unique() -> None:
    for columns in (SAMPLE_COLUMNS, EVENT_COLUMNS, REQUEST_COLUMNS):
        assert len(set(columns)) == len(columns)


def documented_columns() -> dict[str, tuple[str, ...]]:
    """docs/scenarios.md's Outputs table: file -> the columns it lists, in order."""
    text = OUTPUTS_PAGE.read_text(encoding="utf-8")
    section = text[text.index("\n## Outputs") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)\.parquet` \|[^|]*\| `([^`]*)`[^|]*\|", section, re.MULTILINE)
    return {name: tuple(c.strip() for c in columns.split(",")) for name, columns in rows}


def test_the_docs_name_the_prefix_cache_columns_in_order() -> None:
    text = " ".join(OUTPUTS_PAGE.read_text(encoding="utf-8").split())
    assert f"`{', '.join(PREFIX_CACHE_COLUMNS)}` (`PREFIX_CACHE_FIELDS`)" in text


def test_the_prefix_cache_columns_follow_the_others_when_asked_for() -> None:
    groups = [Group(i, float(i), 100, 10) for i in (2, 0, 1)]
    groups[0].prefix_queried_tokens, groups[0].preempted_hit_tokens = 100, 32
    plain, cached = request_frame(groups, [0, 0, 0]), request_frame(groups, [0, 0, 0], True)
    assert tuple(plain.columns) == REQUEST_COLUMNS
    assert tuple(cached.columns) == REQUEST_COLUMNS + PREFIX_CACHE_COLUMNS
    assert cached["prefix_queried_tokens"].tolist() == [0, 0, 100]
    assert cached["preempted_hit_tokens"].dtype == "int64"
    assert cached[list(REQUEST_COLUMNS)].equals(plain)


def test_an_event_row_is_written_by_name_with_every_column() -> None:
    try:
        params = inspect.signature(EventTable.add).parameters
    except ValueError:  # the compiled build's method has no signature to read
        params = None
    if params is not None:
        assert tuple(name for name in params if name != "self") == EVENT_COLUMNS
    table = EventTable()
    table.add(time_s=1.5, replica=2, kind="alert", cause="x")
    row = frame(table).iloc[0].to_dict()
    assert row["request_id"] == -1 and row["detail"] == "" and math.isnan(row["free_share"])


def test_the_docs_document_every_column() -> None:
    assert documented_columns() == {
        "requests": REQUEST_COLUMNS,
        "timeseries": SAMPLE_COLUMNS,
        "events": EVENT_COLUMNS,
    }


def test_a_real_runs_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 chat requests on a 20,000-token pool: failures of both causes, preemptions.
    scenario = parse_scenario(
        {
            "name": "frame-check",
            "seed": 1,
            "workload": {"preset": "chat", "synth": {"num_requests": 200}},
            "hardware": {"kv_capacity_tokens": 20_000},
            "allocator": {"kind": "best_fit"},
            "restart": {"every_s": 15, "mode": "kill", "downtime_s": 2},
            "metrics": {"sample_interval_s": 5},
        }
    )
    recorders: list[Recorder] = []
    ended: list[tuple[Group, int]] = []

    def recorder_kept() -> Recorder:
        recorders.append(Recorder())
        return recorders[-1]

    class RecordsKept(Records):
        def end(self, g: Group, replica_id: int) -> None:
            ended.append((g, replica_id))
            super().end(g, replica_id)

        def close(self) -> None:
            ended.extend((g, -1) for g in self.live.values())
            super().close()

    # The runner's names, not the (possibly compiled) classes, are patched.
    monkeypatch.setattr(sim.runner, "Recorder", recorder_kept)
    monkeypatch.setattr(sim.runner, "Records", RecordsKept)
    result = run(scenario, load_workload(scenario))
    (recorder,) = recorders
    groups, replicas = [g for g, _ in ended], [r for _, r in ended]
    # Every path that writes a row: each sample trigger, a failure and a restart event.
    assert set(recorder.samples.trigger) == {"periodic", "failure", "final"}
    kinds = {"admission_failure", "growth_failure", "preemption", "restart"}
    assert set(recorder.events.kind) == kinds
    rows = [
        tuple(replica if name == "replica" else getattr(g, name) for name in REQUEST_COLUMNS)
        for g, replica in ended
    ]
    want = pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))
    want = want.sort_values("request_id", kind="stable").reset_index(drop=True)
    got = request_frame(groups, replicas)
    assert list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    pd.testing.assert_frame_equal(result.requests, want, check_exact=True)
    same_as_from_records(recorder.samples)
    same_as_from_records(recorder.events)


def test_the_run_records_columns_are_the_request_record_fields() -> None:
    """``copy_records`` writes every record field's column, by the same names, and the
    replica: a field added to ``RECORD_FIELDS`` and forgotten there keeps its sentinel
    and fails."""
    g = Group(7, 1.5, 100, 20)
    g.end("timed-out", 3.0)
    for i, (name, dtype) in enumerate(RECORD_FIELDS):
        if name not in ("request_id", "status"):  # every other field a distinct value
            setattr(g, name, float(1000 + i) if dtype == "float64" else 1000 + i)
    arrays = {
        name: np.full(3, -5, dtype=np.int8 if name == "status" else dtype)
        for name, dtype in RECORD_FIELDS
    }
    replicas = np.full(3, -5, dtype=np.int64)
    copy_records(arrays, replicas, 1, [g], [2])
    for name, _ in RECORD_FIELDS:
        want = STATUSES.index("timed-out") if name == "status" else getattr(g, name)
        assert arrays[name][1] == want, name
        assert arrays[name][0] == -5 and arrays[name][2] == -5, name
    assert replicas.tolist() == [-5, 2, -5]


def test_records_frame_of_ends_and_unfinished() -> None:
    """Ended requests keep their status and replica; those still live at ``close`` are
    ``unfinished`` on replica -1; the table is sorted by request id; the run is over
    (``on_all_ended``, once) when every request has ended."""
    records = Records(3)
    calls: list[int] = []
    records.on_all_ended = lambda: calls.append(records.ended)
    groups = [Group(i, float(i), 10, 5) for i in (2, 0, 1)]
    records.start_all(groups)
    groups[0].end("ok", 4.0)
    records.end(groups[0], 1)
    groups[2].end("rejected-too-long", 1.0)
    records.end(groups[2], 0)
    assert calls == [] and records.last_finish_s == 4.0
    records.close()
    df = records.frame()
    assert df["request_id"].tolist() == [0, 1, 2]
    assert df["status"].tolist() == ["unfinished", "rejected-too-long", "ok"]
    assert df["replica"].tolist() == [-1, 0, 1]
    assert list(df.columns) == list(REQUEST_COLUMNS)
    full = Records(1)
    full.on_all_ended = lambda: calls.append(full.ended)
    full.start(groups[1])
    groups[1].end("ok", 2.0)
    full.end(groups[1], 0)
    assert calls == [1]


def test_kept_records_are_the_started_ones_byte_for_byte() -> None:
    """A single replica's records (``keep_all``: ends keep the group, fields copied a
    batch at a time) hold the same arrays, in the same order, as records started one by
    one: ends in end order (across a flush), then the unfinished in arrival order."""
    outs: list[dict[str, bytes]] = []
    for keep in (False, True):
        groups = [Group(i, float(i), 10 + i, 5) for i in (4, 0, 3, 1, 2)]
        records = Records(5, flush_rows=2)  # one flush mid-run
        (records.keep_all if keep else records.start_all)(groups)
        for g, status, at_s in ((groups[3], "ok", 4.0), (groups[0], "timed-out", 2.0)):
            g.end(status, at_s)  # type: ignore[arg-type]
            records.end(g, 3)
        groups[4].end("ok", 6.0)
        records.end(groups[4], 1)
        records.close()
        assert records.ended == 3 and records.last_finish_s == 6.0
        assert records.arrays["request_id"][:5].tolist() == [1, 4, 2, 0, 3]
        assert records.replicas[:5].tolist() == [3, 3, 1, -1, -1]
        outs.append({k: a[: records.count].tobytes() for k, a in records.arrays.items()})
    assert outs[0] == outs[1]


def test_kept_records_over_several_copy_chunks_are_the_started_ones() -> None:
    """Kept ends are copied ``KEPT_COPY_ROWS`` at a time: over several chunks (and an
    unfinished tail) the arrays are still byte for byte those of started records."""
    n = 2 * KEPT_COPY_ROWS + 7
    outs: list[dict[str, bytes]] = []
    for keep in (False, True):
        groups = [Group(i, float(i), 10 + i % 13, 5) for i in range(n)]
        records = Records(n)
        (records.keep_all if keep else records.start_all)(groups)
        for g in groups[::-1][: n - 3]:  # ends in reverse arrival order; 3 unfinished
            g.end("ok", 100.0 - g.arrival_s * 1e-3)
            records.end(g, g.request_id % 3)
        records.close()
        assert records.count == n
        outs.append({k: a.tobytes() for k, a in records.arrays.items()})
        outs[-1]["replica"] = records.replicas.tobytes()
    assert outs[0] == outs[1]
