"""One malformed input per validation rule: each raises TraceError naming the file, the
line/row, the field and what was expected (or, for unsorted arrivals, sorts and warns)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traces

HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path, **kw: object) -> traces.TraceError:
    with pytest.raises(traces.TraceError) as info:
        traces.load(path, **kw)  # type: ignore[arg-type]
    err = info.value
    assert str(path) in str(err)
    return err


@pytest.mark.parametrize(
    ("body", "line", "field", "words"),
    [
        ("0,0.0,10,5\n1,1.0,12.5,5\n", 3, "prompt_tokens", "whole number"),
        ("0,0.0,10,5\n1,1.0,10,-3\n", 3, "output_tokens", "out of range"),
        ("0,0.0,10,5\n1,1.0,,5\n", 3, "prompt_tokens", "missing or NaN"),
        ("0,0.0,10,5\n1,1.0,NaN,5\n", 3, "prompt_tokens", "missing or NaN"),
        ("0,0.0,10,5\n1,1.0,ten,5\n2,2.0,10,5\n", 3, "prompt_tokens", "cannot parse"),
        ("0,0.0,10,5\n1,soon,10,5\n", 3, "arrival_s", "cannot parse"),
        ("0,0.0,10,5\n1,inf,10,5\n", 3, "arrival_s", "not finite"),
        ("0,0.0,10,5\n,1.0,10,5\n", 3, "request_id", "missing request id"),
        ("0,0.0,10,5\n1.5,1.0,10,5\n", 3, "request_id", "cannot parse"),
    ],
)
def test_bad_values_name_line_and_field(
    tmp_path: Path, body: str, line: int, field: str, words: str
) -> None:
    err = _error(_write(tmp_path, HEADER + body))
    assert (err.line, err.row, err.field) == (line, line - 2, field)
    assert words in str(err)
    assert err.expected


def test_missing_column(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "request_id,arrival_s,prompt_tokens\n0,0.0,10\n"))
    assert err.field == "output_tokens" and "missing column" in str(err) and err.line == 1


def test_missing_column_jsonl_and_parquet(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, '{"timestamp": 0, "input_length": 10}\n', "m.jsonl"))
    assert err.field == "output_length"
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"request_id": [0], "arrival_s": [0.0], "prompt_tokens": [1]}), path)
    assert _error(path).field == "output_tokens"


def test_unparsable_azure_timestamp(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 25:15:50.99,396,109\n",
    )
    err = _error(path)
    assert (err.line, err.field) == (3, "TIMESTAMP")
    assert "timestamp" in (err.expected or "")


def test_missing_azure_timestamp(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n,396,109\n",
    )
    err = _error(path)
    assert (err.line, err.field) == (3, "TIMESTAMP")


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    assert "empty file" in str(_error(_write(tmp_path, text)))


def test_header_only(tmp_path: Path) -> None:
    assert "no requests" in str(_error(_write(tmp_path, HEADER)))


def test_unrecognised_header(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "a,b,c\n1,2,3\n"))
    assert "unrecognised header" in str(err) and err.line == 1


def test_unsorted_arrivals_sorted_with_warning(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "0,5.0,10,5\n1,1.0,11,5\n2,3.0,12,5\n")
    with pytest.warns(traces.TraceWarning, match="not sorted"):
        df = traces.load(path)
    assert df["request_id"].tolist() == [1, 2, 0]
    err = _error(path, strict=True)
    assert (err.field, err.line) == ("arrival_s", 3)


def test_unsorted_across_chunks(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "".join(f"{i},{(i * 7) % 10}.0,10,5\n" for i in range(10)))
    with pytest.warns(traces.TraceWarning):
        df = traces.load(path)
    assert df["arrival_s"].is_monotonic_increasing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chunks = list(traces.iter_chunks(path, chunk_rows=3))
    assert any("across chunks" in str(w.message) for w in caught)
    assert all(c["arrival_s"].is_monotonic_increasing for c in chunks)
    with pytest.raises(traces.TraceError, match="not sorted"):
        traces.load(path, strict=True)


def test_duplicate_request_ids(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, HEADER + "0,0.0,10,5\n1,1.0,10,5\n1,2.0,10,5\n"))
    assert err.field == "request_id" and err.got == 1


def test_num_samples_must_be_positive(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "request_id,arrival_s,prompt_tokens,output_tokens,num_samples\n0,0.0,10,5,0\n"
    )
    err = _error(path)
    assert (err.field, err.line) == ("num_samples", 2)


def test_hashes_need_block_size_and_integers(tmp_path: Path) -> None:
    head = "request_id,arrival_s,prompt_tokens,output_tokens,prefix_hashes,prefix_block_tokens\n"
    err = _error(_write(tmp_path, head + "0,0.0,10,5,1 2,16\n1,1.0,10,5,3,0\n"))
    assert (err.field, err.line) == ("prefix_block_tokens", 3)
    err = _error(_write(tmp_path, head + "0,0.0,10,5,1 2,16\n1,1.0,10,5,3 x,16\n"))
    assert (err.field, err.line, err.got) == ("prefix_hashes", 3, "x")


def test_jsonl_bad_line_and_bad_hash(tmp_path: Path) -> None:
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
    err = _error(_write(tmp_path, good + good + "{not json\n", "m.jsonl"))
    assert err.line == 3
    bad = '{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [1, "a"]}\n'
    err = _error(_write(tmp_path, good + bad, "m2.jsonl"))
    assert (err.line, err.field) == (2, "hash_ids")
    neg = '{"timestamp": 5, "input_length": -1, "output_length": 2, "hash_ids": []}\n'
    err = _error(_write(tmp_path, good + neg, "m3.jsonl"))
    assert (err.line, err.field) == (2, "input_length")


def test_from_frame_checks_dataframes() -> None:
    df = pd.DataFrame(
        {
            "request_id": [0, 1],
            "arrival_s": [0.0, 1.0],
            "prompt_tokens": [10, -1],
            "output_tokens": [1, 2],
        }
    )
    with pytest.raises(traces.TraceError) as info:
        traces.from_frame(df)
    assert (info.value.row, info.value.field) == (1, "prompt_tokens")
    with pytest.raises(traces.TraceError, match="missing column"):
        traces.from_frame(df.drop(columns="arrival_s"))


def test_clean_file_raises_no_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = traces.load(_write(tmp_path, HEADER + "7,0.0,10,5\n3,1.0,10,5\n"))
    assert df["request_id"].tolist() == [7, 3]


def test_accepted_variants_bom_crlf_and_bracketed_hashes(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_bytes(
        b"\xef\xbb\xbfrequest_id,arrival_s,prompt_tokens,output_tokens,prefix_hashes,prefix_block_tokens\r\n"
        b'0,0.0,20,5,"[1, 2]",16\r\n1,1.0,10,5,[],16\r\n2,2.0,20,5,3 4,16\r\n'
    )
    df = traces.load(path)
    assert [list(h) for h in df["prefix_hashes"]] == [[1, 2], [], [3, 4]]


def test_integer_columns_from_parquet_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "neg.parquet"
    table = pa.table(
        {
            "request_id": [0, 1],
            "arrival_s": [0.0, 1.0],
            "prompt_tokens": [3, -2],
            "output_tokens": [1, None],
        }
    )
    pq.write_table(table, path)
    err = _error(path)
    assert (err.row, err.field, err.line) == (1, "prompt_tokens", None)
