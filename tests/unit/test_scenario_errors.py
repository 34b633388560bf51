"""Scenarios that must be refused (or warned about), and the shape of their messages.

Contracts checked, each as the user meets it:

* YAML: an alias bomb is refused at the alias, in milliseconds, whatever field it is
  bound to; a value quoted in a message is a bounded prefix; a duplicate key is refused
  with its line; numbers are numbers and flags are flags (``seed: '7'``, ``seed: true``,
  ``chunked_prefill: 'yes'`` are refused, ``duration_s: 1e3`` is a number).
* Cost, before anything is drawn or simulated (``sim.scenario.bounds``): requests of a
  synthetic spec, rows of tiling, periodic samples and restarts over the span the run
  must reach; and, while simulating, samples and restarts past the same bounds.
* ``workload.arrival`` on a trace with its own times: a ScenarioWarning.
* Requests arriving after ``duration_s`` are left out, counted as
  ``requests.beyond_duration``.
* An empirical-lengths ``path`` is relative to the scenario file; its errors name
  ``workload.synth.lengths.path``.
* Overriding a preset's ``lengths`` / ``arrival`` with another ``kind`` replaces it.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

import sim
from sim.scenario import bounds
from sim.scenario.schema import ScenarioError, ScenarioWarning, load_scenario, parse_scenario
from sim.scenario.workload import load_workload, synth_spec

BASE: dict[str, Any] = {
    "workload": {"preset": "chat", "synth": {"num_requests": 20}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "paged"},
}
HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def refused(path_or_data: Path | dict[str, Any], *words: str) -> str:
    """The ScenarioError of loading (and sizing) a scenario; its lines hold ``words``."""
    with pytest.raises(ScenarioError) as info:
        if isinstance(path_or_data, Path):
            scenario = load_scenario(path_or_data)
        else:
            scenario = parse_scenario(path_or_data, source="s.yaml")
        sim.run(scenario)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)
    for line in message.splitlines():
        assert len(line) < 600, line
    return message


# -- YAML -------------------------------------------------------------------------------

BOMB = """\
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


@pytest.mark.parametrize(
    "bound_to",
    ["seed: *h", "name: *h", "workload: {preset: chat, synth: *h}", "allocator: *h"],
)
def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, bound_to: str) -> None:
    path = write(tmp_path / "bomb.yaml", BOMB + bound_to + "\n")
    start = time.perf_counter()
    message = refused(path, "bomb.yaml", "aliases", "100,000", "line ")
    assert time.perf_counter() - start < 2.0
    assert message.count("\n") == 0


def test_an_alias_of_its_own_node_is_refused(tmp_path: Path) -> None:
    refused(write(tmp_path / "loop.yaml", "seed: &x [1, *x]\n"), "loop.yaml", "alias", "line 1")


def test_messages_quote_a_bounded_prefix_of_a_huge_value() -> None:
    """A value made of shared references (what YAML aliases build) that would be 10^8
    elements long if printed: quoted as a short prefix, in milliseconds."""
    bomb: Any = ["lol"] * 10
    for _ in range(7):
        bomb = [bomb] * 10
    for data in (
        BASE | {"seed": bomb},
        BASE | {"name": bomb},
        BASE | {"workload": {"preset": "chat", "synth": {"extra": bomb}}},
        BASE | {"allocator": {"kind": "paged", "block_size_tokens": bomb}},
        BASE | {"workload": {"preset": "chat", "synth": {"arrival": {"kind": bomb}}}},
        BASE | {"workload": {"trace": "t.csv", "arrival": {"kind": "x" * 10**6}}},
    ):
        start = time.perf_counter()
        refused(data, "s.yaml" if "trace" not in data["workload"] else "field")
        assert time.perf_counter() - start < 2.0


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    refused(BASE | {"workload": {"preset": "chat", "synth": {"lengths": loop}}}, "contains itself")


def test_duplicate_keys_are_refused_with_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.yaml", "seed: 1\nallocator: {kind: paged}\nseed: 2\n")
    refused(path, "dup.yaml", "duplicate key 'seed'", "line 3")
    nested = write(tmp_path / "dup2.yaml", "allocator: {kind: paged, kind: best_fit}\n")
    refused(nested, "duplicate key 'kind'", "line 1")


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE) + "base: &m {max_num_seqs: 8, chunked_prefill: true}\n"
    text = text.replace("base:", "x-base:")
    path = write(tmp_path / "merge.yaml", text + "scheduler: {<<: *m, max_num_seqs: 4}\n")
    with pytest.raises(ScenarioError, match="x-base"):  # an unknown field, not a duplicate
        load_scenario(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", "'7'"),
        ("seed", "true"),
        ("seed", "7.5"),
        ("duration_s", "'100'"),
        ("duration_s", "true"),
        ("initial_uptime_s", ".inf"),
        ("scheduler", "{max_num_seqs: '4'}"),
        ("scheduler", "{max_num_seqs: false}"),
        ("scheduler", "{chunked_prefill: 'yes'}"),
        ("scheduler", "{head_of_line: 1}"),
        ("scheduler", "{retry_backoff_s: '1'}"),
        ("metrics", "{sample_interval_s: '60'}"),
        ("restart", "{every_s: '60'}"),
        ("latency", "{kind: constant, step_s: '0.01'}"),
        ("latency", "{kind: roofline, overhead_s: true}"),
        ("latency", "{kind: calibrated, path: x.json, check_hardware: 'no'}"),
        ("workload", "{preset: chat, max_requests: '5'}"),
        ("workload", "{preset: chat, rate_scale: '2'}"),
        ("workload", "{preset: chat, synth: {num_requests: '5'}}"),
        ("workload", "{preset: chat, synth: {num_requests: 5, num_samples: true}}"),
        (
            "workload",
            "{preset: chat, synth: {num_requests: 5, arrival: {kind: poisson, rate_per_s: '2'}}}",
        ),
        ("hardware", "{kv_capacity_tokens: '20000'}"),
        ("hardware", "{tensor_parallel: true}"),
        ("hardware", "{memory_utilization: '0.9'}"),
        ("allocator", "{kind: paged, block_size_tokens: '16'}"),
        ("allocator", "{kind: paged, prefix_caching: 'yes'}"),
        ("allocator", "{kind: best_fit, growth_factor: '2'}"),
    ],
)
def test_strings_and_booleans_are_not_numbers(tmp_path: Path, field: str, value: str) -> None:
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != field})
    path = write(tmp_path / "s.yaml", text + f"{field}: {value}\n")
    refused(path, "field " + field)  # (the CLI prefixes the file to a workload's lines)


def test_exponent_numbers_are_numbers(tmp_path: Path) -> None:
    """``1e3`` is a number (YAML 1.2, JSON), so a float field takes it; an integer field
    takes integers only."""
    text = yaml.safe_dump(BASE) + "duration_s: 2.5e3\nmetrics: {sample_interval_s: 6E1}\n"
    scenario = load_scenario(write(tmp_path / "s.yaml", text))
    assert scenario.duration_s == 2500.0 and scenario.metrics.sample_interval_s == 60.0
    refused(write(tmp_path / "s.yaml", text + "seed: 1e3\n"), "field seed", "valid integer")


# -- cost bounds ------------------------------------------------------------------------


def trace(tmp_path: Path, arrivals: list[float], name: str = "t.csv") -> str:
    rows = "".join(f"{i},{a!r},10,5\n" for i, a in enumerate(arrivals))
    return str(write(tmp_path / name, HEADER + rows))


@pytest.mark.parametrize(
    ("synth", "words"),
    [
        ({"num_requests": 1_000_000_000}, ("workload.synth.num_requests", "1000000000")),
        ({"num_requests": 20_000_000}, ("workload.synth.num_requests", "20,000,000")),
        ({"duration_s": 1e8}, ("workload.synth.duration_s", "540,000,000")),
        ({"duration_s": 3e6}, ("workload.synth.duration_s", "16,200,000")),
    ],
)
def test_a_synthetic_workload_too_big_is_refused_before_drawing(
    synth: dict[str, Any], words: tuple[str, ...]
) -> None:
    start = time.perf_counter()
    refused(BASE | {"workload": {"preset": "chat", "synth": synth}}, *words)
    assert time.perf_counter() - start < 2.0


def test_cost_bounds_refuse_before_simulating(tmp_path: Path) -> None:
    near = trace(tmp_path, [0.0, 1.0, 2.0, 30.0])
    cases: list[tuple[dict[str, Any], tuple[str, ...]]] = [
        ({"trace": near, "tile_to_s": 1e12}, ("workload.tile_to_s", "1000000000000.0")),
        ({"trace": near, "rate_scale": 1e-300}, ("workload.rate_scale", "1e-300")),
        ({"trace": near, "rate_scale": 1e-7}, ("sample_interval_s", "300,000,000 s", "rate_scale")),
        ({"trace": trace(tmp_path, [0.0, 9e8], "far.csv")}, ("sample_interval_s", "900,000,000")),
    ]
    for workload, words in cases:
        start = time.perf_counter()
        refused(BASE | {"workload": workload}, *words)
        assert time.perf_counter() - start < 5.0
    restart = {"every_s": 1e-6, "downtime_s": 0}
    refused(
        BASE | {"workload": {"trace": near}, "restart": restart}, "restart.every_s", "30,000,000"
    )
    down = {"every_s": 1.0, "downtime_s": 1e9}  # the last arrival waits it out
    refused(
        BASE | {"workload": {"trace": near}, "restart": down},
        "sample_interval_s",
        "a restart at 1 s",
    )


def test_a_long_duration_alone_is_no_cost(tmp_path: Path) -> None:
    """duration_s caps the run; a run that ends earlier is not refused for it."""
    data = BASE | {"workload": {"trace": trace(tmp_path, [0.0, 1.0])}, "duration_s": 1e9}
    result = sim.run(parse_scenario(data))
    assert result.summary.requests.by_status == {"ok": 2}


def test_bounds_hold_while_simulating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What only the run can tell -- a backlog draining long after the last arrival --
    meets the same bounds (made small here so the test is quick)."""
    monkeypatch.setattr(bounds, "MAX_SAMPLES", 50)
    monkeypatch.setattr(bounds, "MAX_RESTARTS", 20)
    rows = HEADER + "0,0.0,10,2000\n1,1.0,10,2000\n"
    long_tail = {
        "workload": {"trace": str(write(tmp_path / "long.csv", rows))},
        "latency": {"kind": "constant", "step_s": 1.0},
        "metrics": {"sample_interval_s": 1.0},
    }
    refused(BASE | long_tail, "sample_interval_s", "more than 50 samples")
    restarts = long_tail | {
        "metrics": {"sample_interval_s": 60.0},
        "restart": {"every_s": 10.0, "mode": "kill", "downtime_s": 0.0},
    }
    refused(BASE | restarts, "restart.every_s", "20 times")


# -- workload ---------------------------------------------------------------------------


def test_arrival_for_a_trace_with_times_warns(tmp_path: Path) -> None:
    data = BASE | {
        "workload": {
            "trace": trace(tmp_path, [0.0, 1.0]),
            "arrival": {"kind": "poisson", "rate_per_s": 2},
        }
    }
    with pytest.warns(ScenarioWarning, match="workload.arrival: ignored: .*t.csv"):
        df = load_workload(parse_scenario(data))
    assert df["arrival_s"].tolist() == [0.0, 1.0]
    lengths = write(tmp_path / "len.csv", "num_prefill_tokens,num_decode_tokens\n10,5\n20,5\n")
    data["workload"] = {"trace": str(lengths), "arrival": {"kind": "poisson", "rate_per_s": 2}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        assert len(load_workload(parse_scenario(data))) == 2


def test_arrival_for_a_synthetic_workload_is_refused() -> None:
    data = BASE | {"workload": {"preset": "chat", "arrival": {"kind": "poisson", "rate_per_s": 1}}}
    refused(data, "s.yaml", "field workload", "synth.arrival")


def test_requests_after_the_duration_are_left_out_and_counted(tmp_path: Path) -> None:
    data = BASE | {"workload": {"trace": trace(tmp_path, [0.0, 1.0, 2.0, 30.0, 31.0])}}
    result = sim.run(parse_scenario(data | {"duration_s": 10.0}))
    assert result.requests["request_id"].tolist() == [0, 1, 2]
    assert result.summary.requests.beyond_duration == 2
    assert result.summary.requests.total == 3
    assert result.summary.engine.end_s == 10.0
    assert "beyond_duration" not in sim.run(parse_scenario(data)).summary.requests.to_json_dict()


def test_empirical_lengths_path_is_relative_to_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "scen" / "data" / "lens.csv", "num_prefill_tokens,num_decode_tokens\n111,7\n")
    synth: dict[str, Any] = {
        "num_requests": 5,
        "lengths": {"kind": "empirical", "path": "data/lens.csv"},
    }
    path = write(
        tmp_path / "scen" / "s.yaml",
        yaml.safe_dump(BASE | {"workload": {"preset": "chat", "synth": synth}}),
    )
    monkeypatch.chdir(tmp_path)
    df = load_workload(load_scenario(path))
    assert df["prompt_tokens"].tolist() == [111] * 5
    synth["lengths"]["path"] = "data/absent.csv"
    write(path, yaml.safe_dump(BASE | {"workload": {"preset": "chat", "synth": synth}}))
    with pytest.raises(
        ScenarioError, match=r"workload\.synth\.lengths\.path: .*absent\.csv"
    ) as info:
        load_workload(load_scenario(path))
    assert "workload.trace" not in str(info.value)


def test_overriding_a_preset_block_with_another_kind_replaces_it(tmp_path: Path) -> None:
    lens = write(tmp_path / "lens.csv", "num_prefill_tokens,num_decode_tokens\n111,7\n")
    scenario = parse_scenario(
        BASE
        | {
            "workload": {
                "preset": "chat",
                "synth": {
                    "num_requests": 5,
                    "lengths": {"kind": "empirical", "path": str(lens)},
                    "arrival": {
                        "kind": "bursty",
                        "on_rate_per_s": 5,
                        "mean_on_s": 1,
                        "mean_off_s": 1,
                    },
                },
            }
        }
    )
    spec = synth_spec(scenario.workload)
    assert spec.lengths.kind == "empirical" and spec.arrival.kind == "bursty"
    same_kind = BASE | {"workload": {"preset": "chat", "synth": {"arrival": {"rate_per_s": 1.0}}}}
    spec = synth_spec(parse_scenario(same_kind).workload)
    assert spec.arrival.kind == "poisson" and spec.duration_s == 3600


def test_a_nul_byte_is_one_line_with_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "nul.yaml", "name: x\nseed: 1\n\0\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message and "#x0000" in message and "(line 3, column 1)" in message
