"""Input rules closed after the hardening audit (issues 9 and 10): canonical files
without ids, values quoted as written, parser errors with their line, negative and
absurd arrivals, hash lists longer than the prompt, duplicate columns, zero-token
prompts, non-UTF-8 bytes and non-regular files. Each case fails with one TraceError
naming the file, the line/row and the field, or loads."""

from __future__ import annotations

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
