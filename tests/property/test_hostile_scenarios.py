"""``fragsim run`` on scenarios and traces with hostile values: a result or an error line.

A small valid scenario (a dozen requests) has one to three of its fields -- or the rows
of its trace -- replaced by values a hostile user would try: negative, zero, 1e-300,
1e300, inf, nan, a numeric string, a boolean, null, a list, a mapping, a long string, a
64-bit overflow. Whatever is drawn, the command (run in-process):

* exits 0 with four readable output files whose summary counts the requests table, or
* exits 2 with only ``error:`` lines on stderr (``warning:`` lines aside), each naming
  the scenario file, and writes nothing;
* never raises (no traceback), and ends within a time bound.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import put, refusal_lines
from typer.testing import CliRunner

from sim.cli import app
from sim.results.io import FILES
from sim.results.runfolder import read_result

BASE: dict[str, Any] = {
    "name": "hostile",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 12}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
}

HOSTILE: list[Any] = [
    -1,
    0,
    3,
    0.5,
    1e-300,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    "7",
    True,
    None,
    [],
    {},
    [1, 2],
    "x" * 300,
    2**64,
    -(2**63),
]

# Where a hostile value may go; a path into a block the base lacks creates the block
# with the given defaults first (a restart needs every_s, a constant latency its kind).
FIELDS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("seed",), {}),
    (("name",), {}),
    (("mode",), {}),
    (("duration_s",), {}),
    (("initial_uptime_s",), {}),
    (("workload", "synth", "num_requests"), {}),
    (("workload", "synth", "arrival"), {}),
    (("workload", "synth", "arrival", "rate_per_s"), {}),
    (("workload", "synth", "lengths", "kind"), {}),
    (("workload", "preset"), {}),
    (("workload", "rate_scale"), {}),
    (("workload", "tile_to_s"), {}),
    (("workload", "max_requests"), {}),
    (("workload", "arrival"), {}),
    (("scheduler", "max_num_seqs"), {}),
    (("scheduler", "max_num_batched_tokens"), {}),
    (("scheduler", "chunked_prefill"), {}),
    (("scheduler", "retry_attempts"), {}),
    (("scheduler", "retry_backoff_s"), {}),
    (("scheduler", "queue_timeout_s"), {}),
    (("scheduler", "preemption"), {}),
    (("restart", "every_s"), {"restart": {"every_s": 1.0, "downtime_s": 1.0}}),
    (("restart", "downtime_s"), {"restart": {"every_s": 1.0, "downtime_s": 1.0}}),
    (("restart", "mode"), {"restart": {"every_s": 1.0, "downtime_s": 1.0}}),
    (("metrics", "sample_interval_s"), {}),
    (("metrics", "ratio_alert"), {}),
    (("latency", "step_s"), {"latency": {"kind": "constant", "step_s": 0.01}}),
    (("latency", "overhead_s"), {}),
    (("latency",), {}),
    (("latency", "mem_efficiency"), {}),
    (("latency", "tp_link_bytes_per_s"), {}),
    (("scheduler", "swap_bytes_per_s"), {}),
    (("hardware", "kv_capacity_tokens"), {}),
    (("hardware", "max_seq_tokens"), {}),
    (("hardware", "memory_utilization"), {}),
    (("allocator", "kind"), {}),
    (("allocator", "block_size_tokens"), {}),
    (("workload",), {}),
    (("allocator",), {}),
]

STATUSES = {
    "ok",
    "rejected-fragmentation",
    "rejected-capacity",
    "rejected-too-long",
    "failed-fragmentation",
    "failed-capacity",
    "timed-out",
    "unfinished",
}
TIME_BOUND_S = 30.0


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path, defaults = draw(st.sampled_from(FIELDS))
        for key, block in defaults.items():
            data.setdefault(key, copy.deepcopy(block))
        put(data, path, draw(st.sampled_from(HOSTILE)))
    return data


NUMBERS = st.sampled_from(["-1", "0", "1", "7", "1e300", "1e-300", "inf", "nan", "x", "", "1.5"])


@st.composite
def traces(draw: st.DrawFn) -> str:
    """A small canonical CSV: a few ordinary rows and a hostile one or two."""
    rows = [f"{i},{0.5 * i},{100 + i},{20 + i}" for i in range(8)]
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(rows)))
        rows.insert(at, f"{draw(NUMBERS)},{draw(NUMBERS)},{draw(NUMBERS)},{draw(NUMBERS)}")
    return "request_id,arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n"


def run_and_check(tmp: Path, data: dict[str, Any]) -> None:
    scenario = tmp / "s.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp / "out"
    start = time.perf_counter()
    result = CliRunner().invoke(app, ["run", str(scenario), "-o", str(out), "-q"])
    elapsed = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        data,
        result.exception,
    )
    assert elapsed < TIME_BOUND_S, (data, elapsed)
    said = ("warning: ", "wrote ", "report: ")  # warnings; where a run went
    lines = [line for line in result.stderr.splitlines() if not line.startswith(said)]
    if result.exit_code == 0:
        assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
        back = read_result(out)
        assert back.summary.requests.total == len(back.requests)
        assert set(back.requests["status"]) <= STATUSES
        assert not lines, lines
    else:
        refusal_lines(result, f"{scenario}: ", aside=said)
        assert not out.exists()
        assert sorted(p.name for p in tmp.iterdir() if p.name != "t.csv") == ["s.yaml"]


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@given(data=scenarios())
@SETTINGS
def test_hostile_scenario_values(tmp_path_factory: Any, data: dict[str, Any]) -> None:
    run_and_check(tmp_path_factory.mktemp("hostile"), data)


@given(rows=traces(), data=scenarios())
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_hostile_trace_rows(tmp_path_factory: Any, rows: str, data: dict[str, Any]) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "t.csv").write_text(rows)
    data = copy.deepcopy(data)
    workload = data.get("workload")
    if not isinstance(workload, dict) or "preset" not in workload:
        return  # the hostile value replaced the workload itself: covered above
    data["workload"] = {
        k: v for k, v in workload.items() if k not in ("preset", "synth", "arrival")
    } | {"trace": "t.csv"}
    run_and_check(tmp, data)
