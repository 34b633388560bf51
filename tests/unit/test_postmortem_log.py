"""Reading a postmortem LOG_DIR: the two files, what they become, and every refusal
naming the file, the line (CSV) or row (Parquet), the field and what was expected."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.postmortem.log import LogError, PostmortemLog, load_postmortem_log
from traces.errors import TraceError
from traces.table import from_frame

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postmortem"

REQUESTS = """\
request_id,attempt,arrival_s,prompt_tokens,output_tokens,replica,status,session_id
1,0,0.5,100,10,a,ok,7
2,0,1.0,20000,5,b,OOM,8
2,1,3.0,20000,5,b,oom,8
3,0,2.0,300,0,c,timeout,
4,0,2.5,50,4,a,rejected,7
"""
NODES = """\
time_s,replica,event,pool
-3600,b,start,long
0,a,start,short
-60,c,start,short
100,b,restart,long
50,a,crash,
60,a,restart,
"""


def _dir(tmp_path: Path, requests: str = REQUESTS, nodes: str = NODES) -> Path:
    (tmp_path / "requests.csv").write_text(requests)
    (tmp_path / "nodes.csv").write_text(nodes)
    return tmp_path


def _error(log_dir: Path) -> LogError:
    with pytest.raises(LogError) as info:
        load_postmortem_log(log_dir)
    return info.value


def test_a_log_becomes_requests_routes_and_a_fleet(tmp_path: Path) -> None:
    log = load_postmortem_log(_dir(tmp_path))
    assert log.replica_names == ["b", "a", "c"]  # order of first appearance in nodes.csv
    assert log.pools == ["long", "short", "short"]
    assert log.requests["request_id"].tolist() == [1, 2, 3, 4]
    assert log.requests["attempts"].tolist() == [1, 2, 1, 1]
    assert log.requests["arrival_s"].tolist() == [0.5, 1.0, 2.0, 2.5]  # first attempts
    assert log.requests["session_id"].tolist() == [7, 8, pd.NA, 7]
    assert log.routes.tolist() == [1, 0, 2, 1]
    assert log.recorded_status.tolist() == ["ok", "failed", "timed-out", "failed"]
    assert log.up_at_start.tolist() == [True, True, True]
    assert log.initial_uptime_s.tolist() == [3600.0, 0.0, 60.0]
    # initial starts are state, not events; the rest sorted by time
    assert log.node_events[["time_s", "replica", "event"]].values.tolist() == [
        [50.0, 1, "crash"],
        [60.0, 1, "restart"],
        [100.0, 0, "restart"],
    ]
    assert log.attempts["attempt"].tolist() == [0, 0, 0, 0, 1]


def test_recorded_failures_at_the_requests_arrival_on_the_last_attempts_node(
    tmp_path: Path,
) -> None:
    failures = load_postmortem_log(_dir(tmp_path)).recorded_failures()
    assert failures.values.tolist() == [
        [2, 0, "failed", 1.0],  # its retry failed at 3.0 s: the request arrived at 1.0 s
        [3, 2, "timed-out", 2.0],
        [4, 1, "failed", 2.5],
    ]
    rerouted = REQUESTS.replace("2,1,3.0,20000,5,b,oom", "2,1,3.0,20000,5,c,oom")
    failures = load_postmortem_log(_dir(tmp_path, rerouted)).recorded_failures()
    assert failures.values.tolist()[0] == [2, 2, "failed", 1.0]  # failed last on c


def test_requests_are_a_canonical_trace(tmp_path: Path) -> None:
    log = load_postmortem_log(_dir(tmp_path))
    table = from_frame(log.requests.drop(columns="attempts"))
    assert table.column("request_id").to_pylist() == [1, 2, 3, 4]
    assert str(log.requests["session_id"].dtype) == "Int64"


def test_without_request_id_rows_are_numbered_in_file_order(tmp_path: Path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens,replica,status\n5,1,1,a,ok\n1,2,2,b,ok\n"
    log = load_postmortem_log(_dir(tmp_path, text))
    assert log.requests["request_id"].tolist() == [1, 0]  # sorted by arrival
    assert log.routes.tolist() == [0, 1]


def test_timestamps_count_from_the_first_request(tmp_path: Path) -> None:
    requests = (
        "timestamp,prompt_tokens,output_tokens,replica,status\n"
        "2024-05-01T10:00:05Z,1,1,a,ok\n"
        "2024-05-01 10:00:00,1,1,a,ok\n"
        "2024-05-01T12:00:01.5+02:00,1,1,a,ok\n"
    )
    nodes = (
        "timestamp,replica,event\n2024-05-01T09:00:00Z,a,start\n2024-05-01T10:00:30Z,a,restart\n"
    )
    log = load_postmortem_log(_dir(tmp_path, requests, nodes))
    assert log.requests["arrival_s"].tolist() == [0.0, 1.5, 5.0]
    assert log.initial_uptime_s.tolist() == [3600.0]
    assert log.node_events["time_s"].tolist() == [30.0]


def test_negative_start_is_initial_uptime_and_a_later_start_an_event(tmp_path: Path) -> None:
    nodes = "time_s,replica,event\n-432000,a,start\n0,b,start\n900,c,start\n"
    requests = "arrival_s,prompt_tokens,output_tokens,replica,status\n1,1,1,a,ok\n"
    log = load_postmortem_log(_dir(tmp_path, requests, nodes))
    assert log.initial_uptime_s.tolist() == [432000.0, 0.0, 0.0]
    assert log.up_at_start.tolist() == [True, True, False]
    assert log.node_events.values.tolist() == [[900.0, 2, "start"]]


def _as_parquet(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in ("requests", "nodes"):
        frame = pd.read_csv(src / f"{name}.csv", dtype={"replica": str, "pool": str})
        frame.to_parquet(dst / f"{name}.parquet")
    return dst


def _same(a: PostmortemLog, b: PostmortemLog) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.node_events, b.node_events)
    pd.testing.assert_frame_equal(a.attempts, b.attempts)
    for name in ("routes", "recorded_status", "initial_uptime_s", "up_at_start"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert (a.replica_names, a.pools) == (b.replica_names, b.pools)


def test_csv_and_parquet_load_the_same(tmp_path: Path) -> None:
    (tmp_path / "csv").mkdir()
    csv_dir = _dir(tmp_path / "csv")
    _same(load_postmortem_log(csv_dir), load_postmortem_log(_as_parquet(csv_dir, tmp_path / "pq")))


def test_the_example_log_loads_the_same_as_parquet(tmp_path: Path) -> None:
    log = load_postmortem_log(EXAMPLE)
    _same(log, load_postmortem_log(_as_parquet(EXAMPLE, tmp_path / "pq")))


def test_parquet_integer_replica_ids(tmp_path: Path) -> None:
    pd.DataFrame({"time_s": [0, 0], "replica": [3, 1], "event": ["start"] * 2}).to_parquet(
        tmp_path / "nodes.parquet"
    )
    pd.DataFrame(
        {"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [1], "replica": [1]}
        | {"status": ["ok"]}
    ).to_parquet(tmp_path / "requests.parquet")
    log = load_postmortem_log(tmp_path)
    assert log.replica_names == ["3", "1"]
    assert log.routes.tolist() == [1]


def test_the_example_log(tmp_path: Path) -> None:
    log = load_postmortem_log(EXAMPLE)
    assert len(log.requests) == 1800
    assert log.replica_names == ["node-a", "node-b", "node-c"]
    assert log.initial_uptime_s.tolist() == [432000.0, 86400.0, 7200.0]
    assert log.node_events.values.tolist() == [[1800.0, 0, "restart", "routine restart"]]
    failures = log.recorded_failures()
    assert len(failures) == 30 and set(failures["replica"]) == {0, 1, 2}
    retried = log.attempts[log.attempts["attempt"] > 0]
    assert len(retried) == (log.requests["attempts"] > 1).sum() > len(failures)
    long = log.requests["prompt_tokens"] >= 15_000
    assert (log.requests["prompt_tokens"][~long] < 500).all()
    assert 0.25 < long.mean() < 0.35
    total = sum((EXAMPLE / f).stat().st_size for f in ("requests.csv", "nodes.csv"))
    assert total < 200_000


@pytest.mark.slow
def test_the_example_log_is_what_its_script_writes(tmp_path: Path) -> None:
    """The script simulates the example's production fleet (about 3 s): the files are
    its output, and change only when the engine's numbers do (then rerun the script)."""
    script = runpy.run_path(str(EXAMPLE / "make_example.py"))
    script["write_example"](tmp_path)
    for name in ("requests.csv", "nodes.csv"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes()


# -- refusals ----------------------------------------------------------------------------


def test_log_error_is_a_value_error_and_a_trace_error() -> None:
    assert issubclass(LogError, ValueError) and issubclass(LogError, TraceError)


@pytest.mark.parametrize("present", [(), ("csv", "parquet")])
def test_one_requests_file_exactly(tmp_path: Path, present: tuple[str, ...]) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    for ext in present:
        (tmp_path / f"requests.{ext}").write_text("x")
    err = _error(tmp_path)
    assert str(tmp_path) in str(err) and "requests.csv and requests.parquet" in str(err)


def test_one_nodes_file_exactly(tmp_path: Path) -> None:
    (tmp_path / "requests.csv").write_text(REQUESTS)
    assert "neither nodes.csv and nodes.parquet" in str(_error(tmp_path))


def _bad(rows: str, header: str = REQUESTS.splitlines()[0]) -> str:
    return header + "\n" + "1,0,0.5,100,10,a,ok,7\n" + rows


@pytest.mark.parametrize(
    ("rows", "field", "expected", "got"),
    [
        ("2,0,1,abc,1,a,ok,1\n", "prompt_tokens", "a whole number >= 1", "abc"),
        ("2,0,1,1,1,a,ok,1,9\n", "<record>", "8 comma-separated fields", None),
        ("2,0,1,0,1,a,ok,1\n", "prompt_tokens", "a whole number >= 1", "0"),
        ("2,0,1,1.5,1,a,ok,1\n", "prompt_tokens", "a whole number >= 1", "1.5"),
        ("2,0,1,1,-1,a,ok,1\n", "output_tokens", "a whole number >= 0", "-1"),
        ("2,0,-1,1,1,a,ok,1\n", "arrival_s", "seconds from the start", "-1"),
        ("2,0,1,1,1,z,ok,1\n", "replica", "a replica of nodes.csv (b, a, c)", "z"),
        ("2,0,1,1,1,a,meh,1\n", "status", "one of ok, oom, rejected", "meh"),
        ("2,0,1,1,1,,ok,1\n", "replica", "a non-empty value", None),
        ("x,0,1,1,1,a,ok,1\n", "request_id", "an integer", "x"),
        ("1,0,1,1,1,a,ok,1\n", "attempt", "each once (first at line 2)", "0"),
        ("2,-1,1,1,1,a,ok,1\n", "attempt", "a whole number >= 0", "-1"),
        ("1,1,0.1,1,1,a,ok,1\n", "arrival_s", "a time >= 0.5 s (line 2)", "0.1"),
    ],
)
def test_request_refusals_name_file_line_and_field(
    tmp_path: Path, rows: str, field: str, expected: str, got: str | None
) -> None:
    err = _error(_dir(tmp_path, _bad(rows)))
    assert (err.path, err.line, err.field) == (str(tmp_path / "requests.csv"), 3, field)
    assert expected in (err.expected or "")
    assert str(err).startswith(f"{tmp_path / 'requests.csv'}: line 3 (row 1): field '{field}'")
    if got is not None:
        assert f"got {got}" in str(err)


def test_duplicate_request_id_without_attempts(tmp_path: Path) -> None:
    text = "request_id,arrival_s,prompt_tokens,output_tokens,replica,status\n"
    text += "7,0,1,1,a,ok\n\n8,0,1,1,a,ok\n7,1,1,1,a,ok\n"
    err = _error(_dir(tmp_path, text))
    assert (err.line, err.field, err.got) == (5, "request_id", 7)  # blank line 3 counted
    assert "duplicate request id" in str(err) and "first at line 2" in str(err)


def test_attempt_needs_request_id(tmp_path: Path) -> None:
    text = "attempt,arrival_s,prompt_tokens,output_tokens,replica,status\n0,0,1,1,a,ok\n"
    err = _error(_dir(tmp_path, text))
    assert err.field == "attempt" and "request_id" in str(err)


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ("arrival_s,prompt_tokens,output_tokens,replica", "status"),
        ("prompt_tokens,output_tokens,replica,status", "arrival_s"),
        ("arrival_s,timestamp,prompt_tokens,output_tokens,replica,status", "arrival_s"),
    ],
)
def test_missing_or_doubled_columns(tmp_path: Path, header: str, field: str) -> None:
    err = _error(_dir(tmp_path, header + "\n"))
    assert (err.line, err.field) == (1, field)


def test_header_only_file(tmp_path: Path) -> None:
    err = _error(_dir(tmp_path, REQUESTS.splitlines()[0] + "\n"))
    assert "no data rows" in str(err) and err.path.endswith("requests.csv")


def test_bad_timestamp(tmp_path: Path) -> None:
    text = "timestamp,prompt_tokens,output_tokens,replica,status\n2024-05-01 00:00:00,1,1,a,ok\nnope,1,1,a,ok\n"
    err = _error(_dir(tmp_path, text))
    assert (err.line, err.field) == (3, "timestamp") and "got nope" in str(err)


def test_node_timestamps_need_request_timestamps(tmp_path: Path) -> None:
    nodes = "timestamp,replica,event\n2024-05-01T09:00:00Z,a,start\n"
    err = _error(_dir(tmp_path, nodes=nodes))
    assert err.path.endswith("nodes.csv") and err.field == "timestamp"


@pytest.mark.parametrize(
    ("rows", "line", "field", "words"),
    [
        ("0,a,reboot\n", 3, "event", "unknown event"),
        ("-5,a,restart\n", 3, "time_s", "restart before the log start"),
        ("nan,a,start\n", 3, "time_s", "missing or not finite"),
        ("1e15,a,restart\n", 3, "time_s", "time out of range; expected within 1e+09 s"),
        ("-2e9,b,start\n", 3, "time_s", "got -2e9"),  # as written: an uptime of 63 years
        ("0,,start\n", 3, "replica", "missing value"),
        ("0,a,start\n", 3, "event", "start of replica 'a' at 0 s, when it is up"),
        ("9,b,crash\n", 3, "event", "crash of replica 'b' at 9 s, when it is gone"),
        (
            "5,a,scale_down\n8,a,restart\n",
            4,
            "event",
            "restart of replica 'a' at 8 s, when it is gone",
        ),
    ],
)
def test_node_refusals_name_file_line_and_field(
    tmp_path: Path, rows: str, line: int, field: str, words: str
) -> None:
    requests = "arrival_s,prompt_tokens,output_tokens,replica,status\n1,1,1,a,ok\n"
    err = _error(_dir(tmp_path, requests, "time_s,replica,event\n0,a,start\n" + rows))
    assert (err.path, err.line, err.field) == (str(tmp_path / "nodes.csv"), line, field)
    assert words in str(err)


def test_events_out_of_order_are_sorted(tmp_path: Path) -> None:
    nodes = "time_s,replica,event\n0,a,start\n90,a,restart\n30,a,crash\n"
    requests = "arrival_s,prompt_tokens,output_tokens,replica,status\n1,1,1,a,ok\n"
    log = load_postmortem_log(_dir(tmp_path, requests, nodes))
    assert log.node_events["event"].tolist() == ["crash", "restart"]


def test_a_replica_in_two_pools(tmp_path: Path) -> None:
    nodes = "time_s,replica,event,pool\n0,a,start,x\n10,a,restart,\n20,a,restart,y\n"
    requests = "arrival_s,prompt_tokens,output_tokens,replica,status\n1,1,1,a,ok\n"
    err = _error(_dir(tmp_path, requests, nodes))
    assert (err.line, err.field) == (4, "pool") and "'x', line 2" in str(err)


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 0], "output_tokens": [1, 1]}
        | {"replica": ["a", "a"], "status": ["ok", "ok"]}
    ).to_parquet(tmp_path / "requests.parquet")
    err = _error(tmp_path)
    assert (err.line, err.row, err.field) == (None, 1, "prompt_tokens")
    assert str(err).startswith(f"{tmp_path / 'requests.parquet'}: row 1: field 'prompt_tokens'")
