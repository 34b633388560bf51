"""`fragsim trace ...` end to end: output, exit status 2 on bad input, no partial files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import traces
from sim.cli import app

runner = CliRunner()


def test_describe_json_on_mooncake(shared_traces: Path) -> None:
    path = shared_traces / "mooncake_fast25" / "conversation_trace.jsonl"
    result = runner.invoke(app, ["trace", "describe", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["format"] == "mooncake" and summary["rows"] == 12_031
    assert round(summary["prefix_reuse_token_ratio"], 3) == 0.374


def test_describe_table_on_sample() -> None:
    result = runner.invoke(
        app, ["trace", "describe", str(traces.sample_path("system_prompt_200.jsonl"))]
    )
    assert result.exit_code == 0, result.output
    assert "prefix reuse" in result.stdout and "prompt_tokens" in result.stdout


def test_describe_length_file_with_rate(shared_traces: Path) -> None:
    path = shared_traces / "sharegpt_sarathi" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    result = runner.invoke(app, ["trace", "describe", str(path), "--json", "--rate", "4"])
    summary = json.loads(result.stdout)
    assert summary["format"] == "lengths" and summary["rate_per_s"] == pytest.approx(4.0, rel=0.05)


def test_convert_azure_to_parquet_and_back(shared_traces: Path, tmp_path: Path) -> None:
    src = shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    out = tmp_path / "conv.parquet"
    result = runner.invoke(app, ["trace", "convert", str(src), str(out)])
    assert result.exit_code == 0, result.output
    assert "19,366" in result.stdout
    pd.testing.assert_frame_equal(traces.load(out), traces.load(src))


def test_bad_input_exits_2_and_leaves_no_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "request_id,arrival_s,prompt_tokens,output_tokens\n"
        + "0,0.0,10,5\n" * 1
        + "".join(f"{i},{i}.0,10,5\n" for i in range(1, 50))
        + "50,51.0,-4,5\n"
    )
    out = tmp_path / "out.parquet"
    result = runner.invoke(app, ["trace", "convert", str(bad), str(out)])
    assert result.exit_code == 2
    assert "line 52" in result.stderr and "prompt_tokens" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]
    result = runner.invoke(app, ["trace", "describe", str(bad)])
    assert result.exit_code == 2 and "error:" in result.stderr


def test_error_mid_stream_leaves_no_output(tmp_path: Path) -> None:
    """A bad row after the first chunk has been written still leaves nothing behind."""
    src = tmp_path / "big.csv"
    rows = "".join(f"{i},{i}.0,10,5\n" for i in range(3_000))
    src.write_text(
        "request_id,arrival_s,prompt_tokens,output_tokens\n" + rows + "3000,3000.0,1.5,5\n"
    )
    out = tmp_path / "out.csv"
    with pytest.raises(traces.TraceError):
        traces.convert(src, out, chunk_rows=1_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.csv"]


def test_unsorted_warns_or_fails_under_strict(tmp_path: Path) -> None:
    src = tmp_path / "u.csv"
    src.write_text("request_id,arrival_s,prompt_tokens,output_tokens\n0,5.0,1,1\n1,1.0,1,1\n")
    result = runner.invoke(app, ["trace", "convert", str(src), str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0 and "warning:" in result.stderr
    result = runner.invoke(
        app, ["trace", "convert", str(src), str(tmp_path / "s.jsonl"), "--strict"]
    )
    assert result.exit_code == 2 and not (tmp_path / "s.jsonl").exists()


def test_synth_preset_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for out in (a, b):
        result = runner.invoke(
            app,
            ["trace", "synth", "bimodal", "-o", str(out), "--seed", "3", "--num-requests", "300"],
        )
        assert result.exit_code == 0, result.output
    assert a.read_bytes() == b.read_bytes()
    assert len(traces.load(a)) == 300


def test_synth_from_yaml_spec(tmp_path: Path) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text(
        "arrival: {kind: gamma, rate_per_s: 3, cv: 2}\n"
        "lengths: {kind: pair, prompt: {kind: fixed, tokens: 64}, output: {kind: fixed, tokens: 8}}\n"
        "shared_prefix: {fraction: 1.0, prefix_tokens: 32, block_tokens: 16}\n"
        "duration_s: 100\n"
    )
    out = tmp_path / "w.parquet"
    result = runner.invoke(app, ["trace", "synth", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    df = traces.load(out)
    assert (df["prompt_tokens"] == 96).all()


@pytest.mark.parametrize(
    "args",
    [
        ["trace", "synth", "no-such-preset", "-o", "x.csv"],
        ["trace", "synth", "bimodal", "-o", "x.txt"],
        ["trace", "synth", "bursty-bimodal", "-o", "x.csv", "--rate", "3"],
        ["trace", "describe", "does-not-exist.csv"],
    ],
)
def test_user_errors_exit_2(
    tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:")
    assert list(tmp_path.iterdir()) == []


def test_presets() -> None:
    result = runner.invoke(app, ["trace", "presets"])
    assert result.exit_code == 0
    assert "bimodal" in result.stdout


def test_python_dash_m_sim_runs_trace() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "trace",
            "describe",
            str(traces.sample_path("bimodal_200.csv")),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 200


HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"


def _fails_cleanly(tmp_path: Path, args: list[str]) -> list[str]:
    """Run, check exit 2 with only ``error:`` lines on stderr and no new file; return them."""
    before = sorted(tmp_path.rglob("*"))
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert "Traceback" not in result.output and "errors.pydantic.dev" not in result.stderr
    assert sorted(tmp_path.rglob("*")) == before
    return lines


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("0,0.0,4,5\n1,1.0,4,5,7\n", ["line 3", "<record>", "5 fields", "4-column header"]),
        ("0,0.0,4,5\n1,1.0,4\n", ["line 3", "'output_tokens'", "3 fields"]),
        ("0,0.0,4,5\n1,1.0,4,5\n1,2.0,4,5\n", ["line 4", "'request_id'", "duplicate request id"]),
    ],
)
@pytest.mark.parametrize("command", ["describe", "convert"])
def test_bad_rows_name_their_line(
    tmp_path: Path, body: str, words: list[str], command: str
) -> None:
    src = tmp_path / "bad.csv"
    src.write_text(HEADER + body)
    args = ["trace", command, str(src)] + (
        [str(tmp_path / "o.parquet")] if command == "convert" else []
    )
    (line,) = _fails_cleanly(tmp_path, args)
    assert line.startswith(f"error: {src}: ")
    for word in words:
        assert word in line


def test_azure_offsets_convert_and_bad_one_names_line(tmp_path: Path) -> None:
    src = tmp_path / "az.csv"
    src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.0000000+00:00,10,5\n2024-05-10 00:00:02.0000000Z,10,5\n"
    )
    out = tmp_path / "az.jsonl"
    result = runner.invoke(app, ["trace", "convert", str(src), str(out)])
    assert result.exit_code == 0, result.output
    assert traces.load(out)["arrival_s"].tolist() == [0.0, 2.0]
    out.unlink()
    src.write_text(src.read_text() + "2024-05-10 00:00:03+25:00,1,1\n")
    (line,) = _fails_cleanly(tmp_path, ["trace", "convert", str(src), str(out)])
    assert "line 4" in line and "'TIMESTAMP'" in line and "+HH:MM" in line


def test_synth_bad_spec_one_line_per_error(tmp_path: Path) -> None:
    spec = tmp_path / "badspec.yaml"
    spec.write_text(
        "arrival: {kind: poisson, rate_per_s: -1}\n"
        "lengths: {kind: pair, prompt: {kind: fixed, tokens: 4}}\n"
        "duration_s: 5\nbogus: 1\n"
    )
    lines = _fails_cleanly(tmp_path, ["trace", "synth", str(spec), "-o", str(tmp_path / "o.csv")])
    assert lines == [
        f"error: {spec}: field arrival.rate_per_s: got -1: input should be greater than 0",
        f"error: {spec}: field lengths.output: field required",
        f"error: {spec}: field bogus: unknown field; expected one of arrival, beam_width, "
        "duration_s, lengths, num_requests, num_samples, shared_prefix",
    ]


def test_synth_invalid_yaml_names_file(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("arrival: {kind: poisson\nlengths: [\n")
    (line,) = _fails_cleanly(tmp_path, ["trace", "synth", str(spec), "-o", str(tmp_path / "o.csv")])
    assert line.startswith(f"error: {spec}: not valid YAML: ") and "(line " in line


def test_synth_option_errors_name_preset_and_option(tmp_path: Path) -> None:
    out = str(tmp_path / "o.csv")
    (line,) = _fails_cleanly(
        tmp_path, ["trace", "synth", "bursty-bimodal", "-o", out, "--rate", "3"]
    )
    assert line.startswith("error: bursty-bimodal: option --rate: got 3.0: ") and "bursty" in line
    (line,) = _fails_cleanly(
        tmp_path, ["trace", "synth", "bimodal", "-o", out, "--duration-s", "-5"]
    )
    assert line == (
        "error: bimodal with --duration-s: field duration_s: got -5.0: input should be greater than 0"
    )


def test_synth_missing_output_folder_names_output(tmp_path: Path) -> None:
    out = tmp_path / "nodir" / "o.csv"
    (line,) = _fails_cleanly(tmp_path, ["trace", "synth", "bimodal", "-o", str(out)])
    assert line.startswith(f"error: {out}: output folder does not exist") and ".tmp" not in line


def test_show_trace_warnings_formats_only_trace_warnings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import warnings

    from sim.cli.bodies.trace import show_trace_warnings

    with show_trace_warnings():
        for _ in range(2):  # shown every time, not once per place
            warnings.warn("u.csv: arrivals not sorted", traces.TraceWarning, stacklevel=1)
        with pytest.warns(DeprecationWarning):  # other warnings keep their usual handling
            warnings.warn("old", DeprecationWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err.splitlines() == ["warning: u.csv: arrivals not sorted"] * 2


def test_cli_warning_lines_are_plain(tmp_path: Path) -> None:
    src = tmp_path / "u.csv"
    src.write_text(HEADER + "0,5.0,1,1\n1,1.0,1,1\n")
    result = runner.invoke(app, ["trace", "describe", str(src), "--json"])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"warning: {src}: arrivals not sorted (first at request 1); sorted by arrival_s"
    ]


def test_bench_allocators_rejects_unknown_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from benchmarks.bench_allocators import parse_args

    for argv in (["--help"], ["--bogus"], ["no_such_policy"]):
        with pytest.raises(SystemExit) as info:
            parse_args(argv)
        assert info.value.code == (0 if argv == ["--help"] else 2)
    assert "usage:" in capsys.readouterr().out
    args = parse_args(["--quick", "paged", "buddy"])
    assert args.quick and args.kinds == ["paged", "buddy"]
    assert parse_args([]).kinds == [] and not parse_args([]).quick


# -- hardening (issue 10): options, pipes, outputs ---------------------------------------

LENGTHS = "num_prefill_tokens,num_decode_tokens\n10,5\n20,6\n"


def _lengths_file(tmp_path: Path) -> Path:
    src = tmp_path / "len.csv"
    src.write_text(LENGTHS)
    return src


def _args(command: str, src: Path, tmp_path: Path) -> list[str]:
    return ["trace", command, str(src)] + (
        [str(tmp_path / "o.csv")] if command == "convert" else []
    )


@pytest.mark.parametrize("command", ["describe", "convert"])
def test_negative_seed_on_a_length_file_is_one_error_line(tmp_path: Path, command: str) -> None:
    src = _lengths_file(tmp_path)
    (line,) = _fails_cleanly(tmp_path, [*_args(command, src, tmp_path), "--seed", "-1"])
    assert line == f"error: {src}: option --seed: got -1: expected an integer >= 0"


def test_negative_seed_on_synth_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    (line,) = _fails_cleanly(
        tmp_path, ["trace", "synth", "bimodal", "-o", str(out), "--seed", "-3"]
    )
    assert line == "error: bimodal: option --seed: got -3: expected an integer >= 0"


@pytest.mark.parametrize("rate", ["inf", "2000000", "0", "-1", "nan"])
@pytest.mark.parametrize("command", ["describe", "convert"])
def test_bad_rate_on_a_length_file_is_one_error_line(
    tmp_path: Path, command: str, rate: str
) -> None:
    src = _lengths_file(tmp_path)
    (line,) = _fails_cleanly(tmp_path, [*_args(command, src, tmp_path), "--rate", rate])
    assert line.startswith(f"error: {src}: option --rate: got ") and "<= 1e+06" in line


@pytest.mark.parametrize("command", ["describe", "convert"])
def test_rate_and_seed_do_not_matter_for_a_file_with_times(tmp_path: Path, command: str) -> None:
    src = tmp_path / "t.csv"
    src.write_text(HEADER + "0,0.0,4,5\n1,2.0,4,5\n")
    plain = runner.invoke(
        app, [*_args(command, src, tmp_path), *(["--json"] * (command == "describe"))]
    )
    assert plain.exit_code == 0 and plain.stderr == ""
    first = (tmp_path / "o.csv").read_bytes() if command == "convert" else plain.stdout
    result = runner.invoke(
        app,
        [
            *_args(command, src, tmp_path),
            *(["--json"] * (command == "describe")),
            "--rate",
            "inf",
            "--seed",
            "-7",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: {src}: --rate and --seed ignored: the file has its own arrival times "
        "(format canonical)"
    ]
    again = (tmp_path / "o.csv").read_bytes() if command == "convert" else result.stdout
    assert again == first


def test_fifo_trace_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)

    def writer() -> None:  # blocks until someone opens the FIFO for reading
        with contextlib.suppress(OSError):
            fifo.write_text(HEADER + "0,0.0,4,5\n")

    threading.Thread(target=writer, daemon=True).start()
    results: list[object] = []
    worker = threading.Thread(
        target=lambda: results.append(runner.invoke(app, ["trace", "describe", str(fifo)])),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=30)
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer
    assert not worker.is_alive(), "describe blocked on a FIFO"
    (result,) = results
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert result.stderr.splitlines() == [  # type: ignore[attr-defined]
        f"error: {fifo}: not a regular file (a FIFO (named pipe)); expected a trace file on "
        "disk (save a pipe's output to a file first)"
    ]


def test_spec_file_not_utf8_names_line_and_byte_offset(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_bytes(b"arrival: {kind: poisson, rate_per_s: 1}\n# caf\xe9\n")
    (line,) = _fails_cleanly(tmp_path, ["trace", "synth", str(spec), "-o", str(tmp_path / "o.csv")])
    assert line.startswith(f"error: {spec}: line 2: not UTF-8 text (byte 0xe9 at byte offset 45)")


def test_non_utf8_trace_names_line_and_byte_offset(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_bytes((HEADER + "0,0.0,4,5\n1,1").encode() + b"\xff.0,4,5\n")
    (line,) = _fails_cleanly(tmp_path, ["trace", "describe", str(src)])
    assert line == (
        f"error: {src}: line 3: not UTF-8 text (byte 0xff at byte offset 62); expected UTF-8 text"
    )


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        (  # a quoted newline inside a number: the record's first line and the field
            "q2.csv",
            b'arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,"10\n",5\n',
            ["line 3 (row 1)", "'prompt_tokens'", "runs over lines 3-4", "expected a number"],
        ),
        (  # a quote never closed: the line where it opens
            "open.csv",
            b'arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,"10,5\n2,10,5\n',
            ["line 3 (row 1)", "'prompt_tokens'", "quote not closed"],
        ),
        (  # a 5,000-digit number in the first JSON line (was a traceback)
            "digits.jsonl",
            b'{"arrival_s": 0, "prompt_tokens": ' + b"1" * 5000 + b', "output_tokens": 5}\n',
            ["line 1 (row 0)", "'prompt_tokens'", "too many digits (5,000)"],
        ),
        (  # two files joined: the second one's byte-order mark
            "joined.jsonl",
            b'\xef\xbb\xbf{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 5}\n'
            b'\xef\xbb\xbf{"arrival_s": 1, "prompt_tokens": 1, "output_tokens": 5}\n',
            ["line 2 (row 1)", "byte-order mark (U+FEFF)"],
        ),
    ],
)
def test_parse_errors_name_line_and_field_in_own_words(
    tmp_path: Path, name: str, data: bytes, words: list[str]
) -> None:
    src = tmp_path / name
    src.write_bytes(data)
    (line,) = _fails_cleanly(tmp_path, ["trace", "describe", str(src)])
    assert line.startswith(f"error: {src}: ")
    for word in words:
        assert word in line, line
    for leak in ("sys.set_int_max_str_digits", "utf-8-sig", "pyarrow", "CSV conversion error"):
        assert leak not in line


def test_leading_bom_is_accepted(tmp_path: Path) -> None:
    src = tmp_path / "bom.csv"
    src.write_bytes(b"\xef\xbb\xbf" + (HEADER + "0,0.0,4,5\n").encode())
    result = runner.invoke(app, ["trace", "describe", str(src), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 1
