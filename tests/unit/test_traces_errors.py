"""Error reporting gaps closed after the audit: CSV rows with the wrong number of fields,
Azure timestamps with zone offsets, duplicate request ids across streamed chunks, and
output paths whose folder is missing. Each error names the file, the line/row, the
field and what was expected."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traces
from traces.ids import UniqueIds
from traces.validate import ReadContext

HEADER = "request_id,arrival_s,prompt_tokens,output_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _load_error(path: Path, **kw: object) -> traces.TraceError:
    with pytest.raises(traces.TraceError) as info:
        traces.load(path, **kw)  # type: ignore[arg-type]
    err = info.value
    assert str(path) in str(err)
    return err


def _stream_error(path: Path, **kw: object) -> traces.TraceError:
    with pytest.raises(traces.TraceError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", traces.TraceWarning)
        for _ in traces.iter_tables(path, **kw):  # type: ignore[arg-type]
            pass
    return info.value


@pytest.mark.parametrize(
    ("body", "line", "row", "field", "fields"),
    [
        ("0,0.0,4,5\n1,1.0,4,5,7\n", 3, 1, "<record>", "5 fields"),  # one too many
        ("0,0.0,4,5\n1,1.0,4\n", 3, 1, "output_tokens", "3 fields"),  # short: first missing
        ("0,0.0,4,5\n\n1,1.0,4,5\n2,2.0\n", 5, 2, "prompt_tokens", "2 fields"),  # blank line
    ],
)
def test_wrong_field_count_names_line(
    tmp_path: Path, body: str, line: int, row: int, field: str, fields: str
) -> None:
    path = _write(tmp_path, HEADER + body)
    for err in (_load_error(path), _stream_error(path, chunk_rows=1)):
        assert (err.line, err.row, err.field) == (line, row, field)
        assert fields in str(err) and "4 comma-separated fields" in (err.expected or "")


def test_wrong_field_count_after_a_quoted_newline(tmp_path: Path) -> None:
    """A quoted newline in a text column (a hash list) is one record over two lines: the
    line of a later record counts both."""
    header = HEADER.strip() + ",prefix_hashes,prefix_block_tokens\n"
    path = _write(tmp_path, header + '0,0.0,4,5,,0\n1,1.0,40,5,"1\n2",16\n2,2.0,4,5,,0,9\n')
    for err in (_load_error(path), _stream_error(path, chunk_rows=1)):
        assert (err.line, err.row, err.field) == (5, 2, "<record>")
        assert "7 fields" in str(err) and "6 comma-separated fields" in (err.expected or "")
    path.write_text(header + '0,0.0,4,5,,0\n1,1.0,40,5,"1\n2",16\n')
    assert traces.load(path)["prefix_hashes"].tolist()[1] == [1, 2]


def test_wrong_field_count_deep_in_a_big_file(tmp_path: Path) -> None:
    """Past pyarrow's first block (where its message names no line) the line is exact."""
    rows = "".join(f"{i},{i}.0,10,5\n" for i in range(60_000))
    path = _write(tmp_path, HEADER + rows + "60000,60000.0,10\n")
    err = _stream_error(path, chunk_rows=10_000)
    assert (err.line, err.row, err.field) == (60_002, 60_000, "output_tokens")


@pytest.mark.parametrize(
    "stamps",
    [
        ("2024-05-10 00:00:00.0000000+00:00", "2024-05-10 00:00:01.5000000+00:00"),
        ("2024-05-10T00:00:00Z", "2024-05-10T00:00:01.5Z"),
        ("2024-05-10 02:00:00+02:00", "2024-05-09 19:00:01.5-05:00"),
        ("2024-05-10 00:00:00", "2024-05-10 00:00:01.5+00:00"),  # mixed: naive is UTC
    ],
)
def test_azure_zone_offsets_convert_to_utc(tmp_path: Path, stamps: tuple[str, str]) -> None:
    path = _write(tmp_path, AZURE + "".join(f"{s},10,5\n" for s in stamps))
    df = traces.load(path)
    assert df["arrival_s"].tolist() == [0.0, 1.5]


def test_azure_offsets_match_naive_on_real_file(shared_traces: Path, tmp_path: Path) -> None:
    src = shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    header, *body = src.read_text().splitlines()
    zoned = "".join(f"{ts}+00:00,{rest}\n" for ts, rest in (b.split(",", 1) for b in body))
    path = _write(tmp_path, header + "\n" + zoned)
    pd.testing.assert_frame_equal(traces.load(path), traces.load(src))


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("2024-05-10 00:00:02+0x:00", "cannot parse timestamp"),
        ("2024-13-10 00:00:02+00:00", "cannot parse timestamp"),
        ("yesterday", "cannot parse timestamp"),
        ("   ", "missing timestamp"),
    ],
)
def test_bad_azure_timestamp_names_line(tmp_path: Path, bad: str, words: str) -> None:
    good = "2024-05-10 00:00:00+00:00,10,5\n2024-05-10 00:00:01,10,5\n"
    path = _write(tmp_path, AZURE + good + f"{bad},10,5\n2024-05-10 00:00:03+00:00,1,1\n")
    for err in (_load_error(path), _stream_error(path, chunk_rows=2)):
        assert (err.line, err.row, err.field) == (4, 2, "TIMESTAMP")
        assert words in str(err) and "+HH:MM" in (err.expected or "")


@pytest.mark.parametrize(
    ("body", "row"),
    [
        ("0,0,1,1\n1,1,1,1\n1,2,1,1\n", 2),  # adjacent
        ("5,0,1,1\n3,1,1,1\n9,2,1,1\n4,3,1,1\n3,4,1,1\n5,5,1,1\n", 4),  # unordered
        ("0,0,1,1\n1,1,1,1\n2,2,1,1\n3,3,1,1\n4,4,1,1\n0,5,1,1\n", 5),  # across chunks
        ("10,0,1,1\n12,1,1,1\n14,2,1,1\n11,3,1,1\n13,4,1,1\n12,5,1,1\n", 5),  # gaps
    ],
)
@pytest.mark.parametrize("chunk_rows", [1, 2, 4, 1_000])
def test_duplicate_ids_found_when_streaming(
    tmp_path: Path, body: str, row: int, chunk_rows: int
) -> None:
    path = _write(tmp_path, HEADER + body)
    err = _stream_error(path, chunk_rows=chunk_rows)
    assert (err.row, err.line, err.field) == (row, row + 2, "request_id")
    assert "duplicate request id" in str(err) and "unique" in (err.expected or "")
    assert _load_error(path).row == row


def test_convert_rejects_duplicates_and_writes_nothing(tmp_path: Path) -> None:
    rows = "".join(f"{i},{i}.0,10,5\n" for i in range(3_000))
    src = _write(tmp_path, HEADER + rows + "17,3000.0,10,5\n", "dup.csv")
    with pytest.raises(traces.TraceError, match="duplicate request id") as info:
        traces.convert(src, tmp_path / "out.parquet", chunk_rows=1_000)
    assert info.value.row == 3_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.csv"]


def test_unique_ids_keeps_runs_not_ids() -> None:
    seen = UniqueIds()
    ctx = ReadContext(Path("x.csv"), 2)
    for start in range(0, 100_000, 1_000):
        ctx.row_offset = start
        seen.add(ctx, np.arange(start, start + 1_000))
    assert seen.starts.tolist() == [0] and seen.ends.tolist() == [99_999]
    ctx.row_offset = 100_000
    with pytest.raises(traces.TraceError) as info:
        seen.add(ctx, np.array([200_000, 54_321]))
    assert (info.value.row, info.value.got) == (100_001, 54_321)


def test_numbered_formats_skip_the_id_check(tmp_path: Path) -> None:
    path = _write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,2,2\n")
    assert traces.load(path)["request_id"].tolist() == [0, 1]


def test_missing_output_folder_names_the_output(tmp_path: Path) -> None:
    df = traces.load(traces.sample_path("bimodal_200.csv"))
    out = tmp_path / "nodir" / "o.csv"
    with pytest.raises(traces.TraceError) as info:
        traces.write(df, out)
    text = str(info.value)
    assert text.startswith(str(out)) and "folder does not exist" in text and ".tmp" not in text
    assert list(tmp_path.iterdir()) == []


def test_output_that_is_a_folder_names_the_output(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.mkdir()
    with pytest.raises(traces.TraceError) as info:
        traces.write(traces.load(traces.sample_path("bimodal_200.csv")), out)
    assert str(info.value).startswith(str(out)) and ".tmp" not in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["o.csv"]
