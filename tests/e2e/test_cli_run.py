"""`fragsim run SCENARIO -o OUT/` end to end through the real CLI (typer's CliRunner).

Contracts checked: the four output files with their documented columns; same scenario +
seed => byte-identical files; ``--seed`` changes the outputs; ``--mode exact`` gives the
fast mode's per-request times (to float rounding); ``--json`` prints the summary; every
bad input exits with status 2, a message naming the file and the field, and no output
directory (nor a half-written temporary sibling); a relative ``workload.trace`` is
resolved against the scenario file's folder, not the working directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner, Result

from sim.cli import app
from sim.engine.recorder import EVENT_COLUMNS, SAMPLE_COLUMNS
from sim.results.frames import REQUEST_COLUMNS

runner = CliRunner()

FILES = ("requests.parquet", "timeseries.parquet", "events.parquet", "summary.json")

# 200 chat requests (~37 s of arrivals) on a 20,000-token pool: allocation failures of
# both causes and preemptions happen, so the outputs are not trivially empty.
TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "workload": {"preset": "chat", "synth": {"num_requests": 200}},
    "hardware": {"kv_capacity_tokens": 20_000},
    "allocator": {"kind": "best_fit"},
    "metrics": {"sample_interval_s": 5},
}
TRACE_HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"


def write_scenario(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fragsim_run(scenario: Path, out: Path, *extra: str) -> Result:
    return runner.invoke(app, ["run", str(scenario), "-o", str(out), "-q", *extra])


def requests_of(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "requests.parquet")


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny scenario run four ways: twice as is, once reseeded, once exact."""
    root = tmp_path_factory.mktemp("runs")
    scenario = write_scenario(root / "tiny.yaml", TINY)
    outs = {name: root / name for name in ("first", "again", "seed2", "exact")}
    for name, extra in (
        ("first", ()),
        ("again", ()),
        ("seed2", ("--seed", "2")),
        ("exact", ("--mode", "exact")),
    ):
        result = fragsim_run(scenario, outs[name], *extra)
        assert result.exit_code == 0, result.output
    return outs


def test_writes_four_files_with_documented_columns(tiny_runs: dict[str, Path]) -> None:
    out = tiny_runs["first"]
    assert sorted(p.name for p in out.iterdir()) == sorted((*FILES, "report.html"))
    requests = requests_of(out)
    assert tuple(requests.columns) == REQUEST_COLUMNS
    assert len(requests) == 200 and requests["request_id"].is_monotonic_increasing
    assert tuple(pd.read_parquet(out / "timeseries.parquet").columns) == SAMPLE_COLUMNS
    events = pd.read_parquet(out / "events.parquet")
    assert tuple(events.columns) == EVENT_COLUMNS
    assert {"admission_failure", "preemption"} <= set(events["kind"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["total"] == 200 and summary["scenario"] == "tiny"
    assert summary["seed"] == 1 and summary["allocator"] == "best_fit"
    assert summary["engine"]["mode"] == "fast"
    ok = requests[requests["status"] == "ok"]
    assert len(ok) > 150
    assert (ok["arrival_s"] <= ok["admit_s"]).all()
    assert (ok["admit_s"] < ok["first_token_s"]).all()
    assert (ok["first_token_s"] <= ok["finish_s"]).all()


def test_same_scenario_twice_is_byte_identical(tiny_runs: dict[str, Path]) -> None:
    for name in FILES:
        a = (tiny_runs["first"] / name).read_bytes()
        b = (tiny_runs["again"] / name).read_bytes()
        assert a == b, f"{name} differs between two identical runs"


def test_seed_option_changes_the_outputs(tiny_runs: dict[str, Path]) -> None:
    for name in ("requests.parquet", "timeseries.parquet", "summary.json"):
        assert (tiny_runs["first"] / name).read_bytes() != (tiny_runs["seed2"] / name).read_bytes()
    assert json.loads((tiny_runs["seed2"] / "summary.json").read_text())["seed"] == 2
    a, b = requests_of(tiny_runs["first"]), requests_of(tiny_runs["seed2"])
    assert not np.array_equal(a["arrival_s"].to_numpy(), b["arrival_s"].to_numpy())


def assert_same_request_times(fast: pd.DataFrame, exact: pd.DataFrame) -> None:
    assert fast["request_id"].tolist() == exact["request_id"].tolist()
    assert fast["status"].tolist() == exact["status"].tolist()
    for col in ("preemptions", "retries", "peak_reserved_tokens"):
        assert fast[col].tolist() == exact[col].tolist(), col
    for col in ("admit_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[col], exact[col], rtol=0, atol=1e-9, err_msg=col)


def test_exact_mode_gives_the_same_request_times(tiny_runs: dict[str, Path]) -> None:
    assert_same_request_times(requests_of(tiny_runs["first"]), requests_of(tiny_runs["exact"]))
    exact = json.loads((tiny_runs["exact"] / "summary.json").read_text())
    fast = json.loads((tiny_runs["first"] / "summary.json").read_text())
    assert exact["engine"]["mode"] == "exact"
    assert exact["engine"]["steps"] == fast["engine"]["steps"]
    assert exact["failures"]["by_cause"] == fast["failures"]["by_cause"]
    assert exact["failures"]["preemptions"] == fast["failures"]["preemptions"]


def test_exact_mode_same_times_paged_parallel_sampling(tmp_path: Path) -> None:
    """Forked sequences on a paged pool under pressure: fast == exact as well."""
    scenario = write_scenario(
        tmp_path / "n4.yaml",
        {
            "seed": 3,
            "workload": {"preset": "parallel-sampling", "synth": {"num_requests": 60}},
            "hardware": {"kv_capacity_tokens": 40_000},
            "allocator": {"kind": "paged"},
        },
    )
    fast, exact = tmp_path / "fast", tmp_path / "exact"
    for out, mode in ((fast, "fast"), (exact, "exact")):
        result = fragsim_run(scenario, out, "--mode", mode)
        assert result.exit_code == 0, result.output
    assert_same_request_times(requests_of(fast), requests_of(exact))


def test_json_option_prints_the_summary(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(scenario), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads((out / "summary.json").read_text())
    assert printed["requests"]["total"] == 200


def test_relative_trace_is_resolved_against_the_scenario_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = "".join(f"{i},{0.5 * i},{100 + 10 * i},{20 + i}\n" for i in range(40))
    (tmp_path / "scen" / "data").mkdir(parents=True)
    (tmp_path / "scen" / "data" / "trace.csv").write_text(TRACE_HEADER + rows)
    scenario = write_scenario(
        tmp_path / "scen" / "s.yaml",
        {
            "workload": {"trace": "data/trace.csv"},
            "allocator": {"kind": "first_fit"},
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = fragsim_run(scenario, tmp_path / "out")
    assert result.exit_code == 0, result.output
    requests = requests_of(tmp_path / "out")
    assert requests["prompt_tokens"].tolist() == [100 + 10 * i for i in range(40)]
    assert (requests["status"] == "ok").all()


# -- bad inputs: exit 2, the file and the field named, nothing written -----------------


def _bad_trace(tmp_path: Path) -> dict[str, Any]:
    rows = "".join(f"{i},{float(i)},10,5\n" for i in range(5)) + "5,5.0,-4,5\n"
    (tmp_path / "neg.csv").write_text(TRACE_HEADER + rows)
    return {"workload": {"trace": "neg.csv"}, "allocator": {"kind": "best_fit"}}


BAD_SCENARIOS: dict[str, tuple[Any, tuple[str, ...]]] = {
    # case: (scenario data or a callable making it, words the message must contain)
    "unknown_allocator_kind": (
        TINY | {"allocator": {"kind": "nope"}},
        ("bad.yaml", "allocator", "'nope'", "best_fit"),
    ),
    "negative_max_num_seqs": (
        TINY | {"scheduler": {"max_num_seqs": -1}},
        ("bad.yaml", "scheduler.max_num_seqs", "-1"),
    ),
    "string_for_int": (
        TINY | {"scheduler": {"max_num_seqs": "many"}},
        ("bad.yaml", "scheduler.max_num_seqs", "'many'"),
    ),
    "unknown_top_level_field": (TINY | {"bogus": 3}, ("bad.yaml", "bogus")),
    "unknown_allocator_field": (
        TINY | {"allocator": {"kind": "paged", "blok_tokens": 16}},
        ("bad.yaml", "allocator", "blok_tokens"),
    ),
    "unknown_gpu": (
        TINY | {"hardware": {"gpu": "tpu-v9"}},
        ("bad.yaml", "hardware.gpu", "'tpu-v9'", "a100-80gb"),
    ),
    "missing_trace_file": (
        {"workload": {"trace": "absent.csv"}, "allocator": {"kind": "best_fit"}},
        ("absent.csv",),
    ),
    "malformed_trace_file": (_bad_trace, ("neg.csv", "prompt_tokens", "-4")),
    "token_budget_below_a_prompt_without_chunking": (
        TINY | {"scheduler": {"max_num_batched_tokens": 512}},
        ("bad.yaml", "scheduler.max_num_batched_tokens", "512", "chunked_prefill"),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_bad_scenario_exits_2_naming_file_and_field(tmp_path: Path, case: str) -> None:
    data, words = BAD_SCENARIOS[case]
    scenario = write_scenario(tmp_path / "bad.yaml", data(tmp_path) if callable(data) else data)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = fragsim_run(scenario, tmp_path / "out")
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())  # rich wraps long lines
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_invalid_yaml_exits_2(tmp_path: Path) -> None:
    scenario = tmp_path / "broken.yaml"
    scenario.write_text("name: [unclosed\nworkload: : :\n")
    result = fragsim_run(scenario, tmp_path / "out")
    assert result.exit_code == 2
    assert "broken.yaml" in result.stderr and "YAML" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.yaml"]


def test_missing_scenario_file_exits_2(tmp_path: Path) -> None:
    result = fragsim_run(tmp_path / "nowhere.yaml", tmp_path / "out")
    assert result.exit_code == 2
    assert "nowhere.yaml" in " ".join(result.stderr.split())
    assert list(tmp_path.iterdir()) == []


def test_bad_mode_option_exits_2(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    result = fragsim_run(scenario, tmp_path / "out", "--mode", "turbo")
    assert result.exit_code == 2 and "--mode" in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_trace_message_names_scenario_and_field(tmp_path: Path) -> None:
    scenario = write_scenario(
        tmp_path / "bad.yaml",
        {
            "workload": {"trace": "absent.csv"},
            "allocator": {"kind": "best_fit"},
        },
    )
    result = fragsim_run(scenario, tmp_path / "out")
    message = " ".join(result.stderr.split())
    assert result.exit_code == 2
    assert "bad.yaml" in message and "workload.trace" in message


def test_output_parent_is_a_file_exits_2(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    (tmp_path / "afile").write_text("not a folder\n")
    result = fragsim_run(scenario, tmp_path / "afile" / "out")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert "afile" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "tiny.yaml"]


def test_rerun_into_a_previous_run_replaces_it(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "out"
    assert fragsim_run(scenario, out).exit_code == 0
    first = {name: (out / name).read_bytes() for name in FILES}
    assert fragsim_run(scenario, out, "--seed", "5").exit_code == 0
    assert json.loads((out / "summary.json").read_text())["seed"] == 5
    assert fragsim_run(scenario, out).exit_code == 0
    assert {name: (out / name).read_bytes() for name in FILES} == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tiny.yaml"]


def test_output_into_an_unrelated_folder_keeps_its_files(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious\n")
    result = fragsim_run(scenario, folder)
    assert result.exit_code in (0, 2)
    assert (folder / "notes.txt").read_text() == "precious\n"


def test_output_dot_does_not_delete_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = tmp_path / "proj"
    scenario = write_scenario(proj / "tiny.yaml", TINY)
    (proj / "notes.txt").write_text("precious\n")
    monkeypatch.chdir(proj)
    result = fragsim_run(scenario, Path("."))
    assert (proj / "notes.txt").exists() and scenario.exists()
    assert result.exit_code in (0, 2) and "Traceback" not in result.output


def test_negative_seed_option_exits_2(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    result = fragsim_run(scenario, tmp_path / "out", "--seed", "-1")
    assert result.exit_code == 2 and "seed" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_written_run_reads_back_as_the_same_frames(tmp_path: Path) -> None:
    from sim.results.runfolder import read_result

    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    result = fragsim_run(scenario, tmp_path / "out")
    assert result.exit_code == 0
    back = read_result(tmp_path / "out")
    assert len(back.requests) > 0 and set(back.requests["status"]) <= {
        "ok",
        "rejected-capacity",
        "rejected-fragmentation",
        "failed-capacity",
        "failed-fragmentation",
        "rejected-too-long",
    }
    assert back.summary.requests.total == len(back.requests)


def test_an_unknown_scenario_name_lists_the_built_in_ones(tmp_path: Path) -> None:
    result = fragsim_run(Path("no-such-scenario"), tmp_path / "out")
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "no-such-scenario" in message and "seed-bimodal-best-fit" in message
    assert not (tmp_path / "out").exists()


def test_the_out_of_range_warning_names_the_scenario_and_the_calibration(tmp_path: Path) -> None:
    """A calibrated model evaluated outside its validity range: one ``warning:`` line
    naming both files (the run still completes)."""
    calibration = {
        "format": "fragsim-latency/1",
        "model": "llama-2-7b",
        "gpu": "a100-80gb",
        "coefficients": {
            "intercept_s": 0.007,
            "per_prefill_token_s": 6.1e-05,
            "per_decode_seq_s": 4.0e-05,
            "per_kv_token_s": 3.2e-08,
        },
        "valid": {"prefill_tokens": [0, 16], "decode_seqs": [0, 2], "kv_tokens": [0, 64]},
    }
    (tmp_path / "lat.json").write_text(json.dumps(calibration))
    data = TINY | {"latency": {"kind": "calibrated", "path": "lat.json"}}
    scenario = write_scenario(tmp_path / "cal.yaml", data)
    result = fragsim_run(scenario, tmp_path / "out")
    assert result.exit_code == 0, result.output
    warnings = [x for x in result.stderr.splitlines() if not x.startswith(("wrote ", "report: "))]
    assert len(warnings) == 1, warnings
    line = warnings[0]
    assert line.startswith(f"warning: {scenario}: field latency.path: {tmp_path / 'lat.json'}: ")
    assert "outside its validity range" in line
