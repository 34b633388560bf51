"""Input rules closed after the hardening audit (issues 9 and 10): canonical files
without ids, values quoted as written, parser errors with their line, negative and
absurd arrivals, hash lists longer than the prompt, duplicate columns, zero-token
prompts, non-UTF-8 bytes and non-regular files. Each case fails with one TraceError
naming the file, the line/row and the field, or loads."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traces

HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"


def _write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _error(path: Path, **kw: object) -> traces.TraceError:
    with pytest.raises(traces.TraceError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", traces.TraceWarning)
        traces.load(path, **kw)  # type: ignore[arg-type]
    err = info.value
    assert str(path) in str(err) and "\n" not in str(err)
    return err


def _parquet(tmp_path: Path, table: pa.Table, name: str = "t.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(table, path)
    return path


# -- canonical files without request ids number their rows -------------------------------


@pytest.mark.parametrize("container", ["csv", "jsonl", "parquet"])
def test_canonical_without_ids_numbers_rows(tmp_path: Path, container: str) -> None:
    frame = pd.DataFrame(
        {"arrival_s": [0.5, 0.25, 1.0], "prompt_tokens": [10, 20, 30], "output_tokens": [1, 2, 3]}
    )
    path = tmp_path / f"noid.{container}"
    if container == "csv":
        frame.to_csv(path, index=False)
    elif container == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", traces.TraceWarning)  # unsorted: sorted with a warning
        df = traces.load(path)
        streamed = pd.concat(traces.iter_chunks(path, chunk_rows=2))
    assert traces.detect_format(path).name == "canonical"
    assert df["request_id"].tolist() == [1, 0, 2]  # data rows from 0 in file order
    assert df["prompt_tokens"].tolist() == [20, 10, 30]
    assert sorted(streamed["request_id"]) == [0, 1, 2]


def test_frame_without_ids_numbers_rows() -> None:
    frame = pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [3, 4], "output_tokens": [1, 1]}
    )
    assert traces.to_frame(traces.from_frame(frame))["request_id"].tolist() == [0, 1]


# -- values are quoted as the file wrote them, at their exact line -----------------------


def test_integer_quoted_as_written_in_csv(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, HEADER + "0,0.0,10,5\n\n1,1.0,-3,5\n"))
    assert (err.line, err.row, err.field) == (4, 1, "prompt_tokens")  # blank line counted
    assert err.got == -3.0 and err.written == "-3"
    assert str(err).endswith("got -3") and "-3.0" not in str(err)


def test_values_quoted_as_written_in_jsonl(tmp_path: Path) -> None:
    text = (
        '{"request_id": 0, "arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 1}\n'
        '{"request_id": 1, "arrival_s": 1.0, "prompt_tokens": 4, "output_tokens": -3}\n'
    )
    err = _error(_write(tmp_path, text, "t.jsonl"))
    assert (err.line, err.field, err.written) == (2, "output_tokens", "-3")
    assert str(err).endswith("got -3")


def test_long_values_are_quoted_by_a_bounded_prefix(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, HEADER + "0,0.0," + "ten" * 5000 + ",5\n"))
    assert err.field == "prompt_tokens" and len(str(err)) < 400 and "tenten" in str(err)


# -- errors from pyarrow's parser name the line ------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        ("id.csv", HEADER + "0,0.0,4,5\n99999999999999999999,1.0,4,5\n", 3, "request_id"),
        (
            "id.jsonl",
            '{"request_id": 0, "arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 1}\n'
            '{"request_id": 99999999999999999999, "arrival_s": 1.0, "prompt_tokens": 4, '
            '"output_tokens": 1}\n',
            2,
            "request_id",
        ),
        (
            "twice.jsonl",
            '{"request_id": 0, "arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 1}\n'
            '{"request_id": 1, "request_id": 2, "arrival_s": 1.0, "prompt_tokens": 4, '
            '"output_tokens": 1}\n',
            2,
            "request_id",
        ),
        (
            "twice_first.jsonl",
            '{"request_id": 1, "arrival_s": 1.0, "arrival_s": 2.0, "prompt_tokens": 4, '
            '"output_tokens": 1}\n',
            1,
            "arrival_s",
        ),
        (
            "spaces.csv",
            "request_id, arrival_s ,prompt_tokens,output_tokens\n0,0.0,4,5\n1,soon,4,5\n",
            3,
            "arrival_s",
        ),
    ],
)
def test_parser_errors_name_the_line(
    tmp_path: Path, name: str, text: str, line: int, field: str
) -> None:
    path = _write(tmp_path, text, name)
    for err in (_error(path), _stream_error(path)):
        assert (err.line, err.field) == (line, field), str(err)


def test_prefix_hash_beyond_64_bits_is_named(tmp_path: Path) -> None:
    header = HEADER.strip() + ",prefix_hashes,prefix_block_tokens\n"
    err = _error(_write(tmp_path, header + "0,0.0,40,5,1 99999999999999999999,16\n"))
    assert (err.line, err.field, err.got) == (2, "prefix_hashes", "99999999999999999999")


def test_header_names_with_spaces_are_trimmed(tmp_path: Path) -> None:
    path = _write(tmp_path, 'request_id, arrival_s , "prompt_tokens",output_tokens\n0,0.5,4,5\n')
    df = traces.load(path)
    assert (df["arrival_s"].tolist(), df["prompt_tokens"].tolist()) == ([0.5], [4])


def _stream_error(path: Path) -> traces.TraceError:
    with pytest.raises(traces.TraceError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", traces.TraceWarning)
        for _ in traces.iter_tables(path, chunk_rows=1):
            pass
    return info.value


# -- non-UTF-8 bytes ---------------------------------------------------------------------


def test_non_utf8_body_names_line_and_byte_offset(tmp_path: Path) -> None:
    data = (HEADER + "0,0.0,4,5\n1,1").encode() + b"\xff" + b".0,4,5\n"
    err = _error(_write(tmp_path, data))
    offset = data.index(b"\xff")
    assert err.line == 3 and f"byte offset {offset}" in str(err) and "UTF-8" in str(err)


def test_non_utf8_header_names_byte_offset(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, b"request_id,arr\xe9ival_s\n0,1\n"))
    assert err.line == 1 and "byte offset 14" in str(err)


# -- negative and absurd arrivals ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "field", "words"),
    [
        ("t.csv", HEADER + "0,0.0,4,5\n1,-0.5,4,5\n", "arrival_s", "negative"),
        ("t.csv", HEADER + "0,0.0,4,5\n1,1e300,4,5\n", "arrival_s", "too late"),
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0,4,5\n-2,4,5\n",
            "arrived_at",
            "negative",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 4, "output_length": 1}\n'
            '{"timestamp": -40, "input_length": 4, "output_length": 1}\n',
            "timestamp",
            "negative",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\n0,x,4,5\n-1,x,4,5\n",
            "Timestamp",
            "negative",
        ),
    ],
)
def test_arrivals_must_be_within_bounds(
    tmp_path: Path, name: str, text: str, field: str, words: str
) -> None:
    err = _error(_write(tmp_path, text, name))
    assert (err.line, err.row, err.field) == (3 if name.endswith("csv") else 2, 1, field)
    assert words in str(err) and "MAX_ARRIVAL_S" in (err.expected or "")


def test_azure_arrivals_count_from_the_earliest_timestamp(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:50.0,4,5\n2023-11-16 18:15:46.0,4,5\n",
    )
    with pytest.warns(traces.TraceWarning, match="not sorted"):
        df = traces.load(path)
    assert df["arrival_s"].tolist() == [0.0, 4.0] and df["request_id"].tolist() == [1, 0]


def test_azure_timestamp_before_the_first_chunk_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:50.0,4,5\n2023-11-16 18:15:46.0,4,5\n",
    )
    err = _stream_error(path)
    assert (err.line, err.field) == (3, "TIMESTAMP") and "before the trace's start" in str(err)


# -- prefix hashes longer than the prompt -----------------------------------------------


def test_more_hashes_than_prompt_blocks_is_refused(tmp_path: Path) -> None:
    header = HEADER.strip() + ",prefix_hashes,prefix_block_tokens\n"
    ok = "0,0.0,17,5,1 2,16\n"  # 17 tokens start two 16-token blocks
    err = _error(_write(tmp_path, header + ok + "1,1.0,16,5,1 2,16\n"))
    assert (err.line, err.field) == (3, "prefix_hashes") and "at most 1" in (err.expected or "")


def test_mooncake_hashes_longer_than_prompt_are_refused(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [0, 1]}\n'
    )
    err = _error(_write(tmp_path, text, "m.jsonl"))
    assert (err.line, err.field) == (2, "hash_ids")


# -- duplicate columns -------------------------------------------------------------------


def test_duplicate_csv_column_is_refused(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, HEADER.strip() + ", prompt_tokens\n0,0.0,4,5,6\n"))
    assert (err.line, err.field) == (1, "prompt_tokens") and "twice" in str(err)


def test_duplicate_parquet_column_is_refused(tmp_path: Path) -> None:
    table = pa.Table.from_arrays(
        [pa.array([0.0]), pa.array([4]), pa.array([1]), pa.array([5])],
        names=["arrival_s", "prompt_tokens", "output_tokens", "prompt_tokens"],
    )
    err = _error(_parquet(tmp_path, table))
    assert err.field == "prompt_tokens" and "twice" in str(err)


# -- zero-token prompts and outputs ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("t.csv", HEADER + "0,0.0,4,5\n1,1.0,0,5\n", "prompt_tokens"),
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0,4,5\n1,0,5\n",
            "num_prefill_tokens",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,4,5\n"
            "2023-11-16 18:15:47.0,0,5\n",
            "ContextTokens",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 4, "output_length": 1}\n'
            '{"timestamp": 1, "input_length": 0, "output_length": 1}\n',
            "input_length",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\n0,x,4,5\n1,x,0,5\n",
            "Request tokens",
        ),
    ],
)
def test_zero_token_prompt_is_refused(tmp_path: Path, name: str, text: str, field: str) -> None:
    err = _error(_write(tmp_path, text, name))
    assert (err.row, err.field, err.written) == (1, field, "0")
    assert "expected a whole number >= 1, got 0" in str(err)


def test_zero_output_tokens_are_kept_as_written(tmp_path: Path) -> None:
    df = traces.load(_write(tmp_path, HEADER + "0,0.0,4,0\n"))
    assert df["output_tokens"].tolist() == [0]
    burst = _write(
        tmp_path, "Timestamp,Model,Request tokens,Response tokens\n0,x,0,0\n1,x,4,7\n", "b.csv"
    )
    with pytest.warns(traces.TraceWarning, match="dropped 1 failed"):
        assert traces.load(burst)["request_id"].tolist() == [1]
    kept = _error(burst, keep_failed=True)  # a kept failed row still needs a prompt
    assert (kept.row, kept.field) == (0, "Request tokens")


@pytest.mark.parametrize(
    "prompt",
    [
        {"kind": "fixed", "tokens": 0},
        {"kind": "uniform", "min_tokens": 0, "max_tokens": 5},
        {"kind": "lognormal", "mean_tokens": 5, "cv": 1, "min_tokens": 0},
    ],
)
def test_synthetic_prompts_have_a_token(prompt: dict[str, object]) -> None:
    from pydantic import ValidationError

    from traces.synth import SynthSpec

    spec = {
        "arrival": {"kind": "poisson", "rate_per_s": 1},
        "lengths": {"kind": "pair", "prompt": prompt, "output": {"kind": "fixed", "tokens": 0}},
        "num_requests": 3,
    }
    with pytest.raises(ValidationError, match="at least one prompt token"):
        SynthSpec.model_validate(spec)


def test_frames_follow_the_same_rules() -> None:
    frame = pd.DataFrame(
        {"request_id": [0], "arrival_s": [-1.0], "prompt_tokens": [4], "output_tokens": [0]}
    )
    with pytest.raises(traces.TraceError, match="negative arrival"):
        traces.from_frame(frame)
    with pytest.raises(traces.TraceError, match=">= 1"):
        traces.from_frame(frame.assign(arrival_s=0.0, prompt_tokens=0))


# -- non-regular files -------------------------------------------------------------------


def _drain(path: Path) -> None:
    """Release a writer blocked on the FIFO (opening it for reading never blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.close(fd)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)

    def writer() -> None:
        try:
            with fifo.open("w") as fh:  # blocks until a reader opens the FIFO
                fh.write(HEADER + "0,0.0,4,5\n")
        except OSError:
            pass

    threading.Thread(target=writer, daemon=True).start()
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            traces.load(fifo)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    _drain(fifo)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], traces.TraceError), outcome
    assert "FIFO" in str(outcome[0]) and str(fifo) in str(outcome[0])


def test_directory_is_refused(tmp_path: Path) -> None:
    err = _error(tmp_path)
    assert "a directory" in str(err)
