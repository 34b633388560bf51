"""Where pyarrow's parser gives up, the slow path (traces.locate) names the line (issue 10):
a CSV record over several lines where a number is due, a quote never closed (also deep
in a large file, streamed in bounded time and memory), values pyarrow cannot convert
(judged as pyarrow judges them), numbers with too many digits or beyond a double, and
byte-order marks. Messages are the package's own words: no Python or pyarrow advice."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import traces
from traces.locate import _locate_csv, first_unconvertible

HEADER = "arrival_s,prompt_tokens,output_tokens\n"
TYPES = {"arrival_s": pa.float64(), "prompt_tokens": pa.float64(), "output_tokens": pa.float64()}
LEAKS = ("sys.set_int_max_str_digits", "utf-8-sig", "Traceback", "CSV conversion error")


def _write(tmp_path: Path, data: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _errors(path: Path) -> list[traces.TraceError]:
    """The error of a whole load and of a stream of one-row chunks: the same place."""
    found = []
    for read in (lambda: traces.load(path), lambda: list(traces.iter_tables(path, chunk_rows=1))):
        with pytest.raises(traces.TraceError) as info, warnings.catch_warnings():
            warnings.simplefilter("ignore", traces.TraceWarning)
            read()
        err = info.value
        assert str(path) in str(err) and "\n" not in str(err)
        assert not any(leak in str(err) for leak in LEAKS), str(err)
        found.append(err)
    return found


def _big(rows: int, bad_row: int, bad: str) -> str:
    return HEADER + "".join(f"{i},{bad if i == bad_row else 10},5\n" for i in range(rows))


# -- records over several lines and quotes left open -------------------------------------


def test_quoted_newline_inside_a_number_names_the_record_line(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + '0,10,5\n1,"10\n",5\n')
    for err in _errors(path):
        assert (err.line, err.row, err.field) == (3, 1, "prompt_tokens")
        assert "runs over lines 3-4" in err.message and err.expected == "a number"
        assert str(err).endswith("got '10\\n'")


def test_quote_in_a_later_field_is_named_at_its_own_line(tmp_path: Path) -> None:
    """The line counts the breaks of the record's earlier fields."""
    header = "arrival_s,prefix_hashes,prompt_tokens,prefix_block_tokens,output_tokens\n"
    path = _write(tmp_path, header + '0,,10,0,5\n1,"1\n2",20,"16\n",5\n')
    for err in _errors(path):
        assert (err.line, err.row, err.field) == (4, 1, "prefix_block_tokens")


def test_quote_open_to_the_end_of_a_small_file(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + '0,10,5\n1,"10,5\n2,10,5\n')
    for err in _errors(path):
        assert (err.line, err.row, err.field) == (3, 1, "prompt_tokens")
        assert err.message.startswith("quote not closed") and "end of the file (line 4)" in str(err)


def test_quote_closed_by_a_later_stray_quote_is_named_where_it_opens(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + '0,10,5\n1,"10,5\n2,"10,5\n3,10,5\n')
    for err in _errors(path):
        assert (err.line, err.row, err.field) == (3, 1, "prompt_tokens")
        assert "runs over lines 3-4" in err.message


def test_quoted_newline_in_a_text_column_is_read(tmp_path: Path) -> None:
    """Not every record over two lines is wrong: a hash list may hold a line break."""
    header = "arrival_s,prompt_tokens,output_tokens,prefix_hashes,prefix_block_tokens\n"
    path = _write(tmp_path, header + '0,40,5,"1\n2",16\n1,10,5,,0\n')
    assert traces.load(path)["prefix_hashes"].tolist() == [[1, 2], []]


def test_unclosed_quote_deep_in_a_large_file_is_named_fast(tmp_path: Path) -> None:
    """400,000 rows, a quote opened at row 300,000 and never closed: named at its line,
    in a streamed pass (its speed is benchmarks/bench_traces.py's, not a timed test)."""
    path = _write(tmp_path, _big(400_000, 300_000, '"10'))
    with pytest.raises(traces.TraceError) as info:
        traces.load(path)
    err = info.value
    assert (err.line, err.row, err.field) == (300_002, 300_000, "prompt_tokens")
    assert err.message.startswith("quote not closed") and "line 400001" in err.message


def test_locate_pass_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A bad cell near the end of a 400,000-row file: the pass holds one batch of
    records, not the file (all of it as Python lists would take ~100 MB)."""
    path = _write(tmp_path, _big(400_000, 399_000, "1x"))
    tracemalloc.start()
    try:
        err = _locate_csv(path, TYPES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err is not None and (err.line, err.row, err.field) == (399_002, 399_000, "prompt_tokens")
    assert peak < 40 << 20, peak


def test_bad_cell_deep_in_a_large_file_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, _big(100_000, 70_000, "1x"))
    err = _errors(path)[0]
    assert (err.line, err.row, err.field, err.written) == (70_002, 70_000, "prompt_tokens", "1x")


# -- cells judged as pyarrow judges them --------------------------------------------------


def test_pyarrow_conversion_rules_are_mirrored() -> None:
    """Null markers and spaces / tabs around a number are what pyarrow accepts; a line
    break, a sign on an integer or a stray letter are not."""
    ok = ["1", " 2 ", "\t3", "NA", "", "nan", "null", "1e5", "inf"]
    assert first_unconvertible(ok, pa.float64()) is None
    assert first_unconvertible([*ok, "4\n"], pa.float64()) == len(ok)
    assert first_unconvertible(["1", "2", "+3", "4"], pa.int64()) == 2
    assert first_unconvertible(["1"] * 1000 + ["x"] + ["1"] * 1000, pa.float64()) == 1000


def test_quoted_spaces_and_null_markers_are_not_parse_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + '0," 10 ",5\n1,"NA",5\n')
    err = _errors(path)[0]  # the null is refused by validation, at its row
    assert (err.line, err.field, err.message) == (3, "prompt_tokens", "missing or NaN")


# -- too many digits, beyond a double -----------------------------------------------------

DIGITS = "9" * 5000


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        ("count.csv", HEADER + f"0,{DIGITS},5\n", 2, "prompt_tokens"),
        ("arrival.csv", HEADER + f"{DIGITS},1,5\n", 2, "arrival_s"),
        ("id.csv", "request_id," + HEADER + f"0,0,1,5\n{DIGITS},1,1,5\n", 3, "request_id"),
        (
            "hash.csv",
            HEADER.strip() + ",prefix_hashes,prefix_block_tokens\n" + f"0,40,5,1 {DIGITS},16\n",
            2,
            "prefix_hashes",
        ),
        (
            "first.jsonl",
            f'{{"arrival_s": 0, "prompt_tokens": {DIGITS}, "output_tokens": 5}}\n',
            1,
            "prompt_tokens",
        ),
        (
            "id.jsonl",
            '{"request_id": 0, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 5}\n'
            f'{{"request_id": {DIGITS}, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 5}}\n',
            2,
            "request_id",
        ),
        (
            "hash.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 40, "output_tokens": 5, '
            f'"prefix_hashes": [1, {DIGITS}], "prefix_block_tokens": 16}}\n',
            1,
            "prefix_hashes",
        ),
    ],
)
def test_too_many_digits_is_named(
    tmp_path: Path, name: str, text: str, line: int, field: str
) -> None:
    for err in _errors(_write(tmp_path, text, name)):
        assert (err.line, err.field) == (line, field), str(err)
        assert "too many digits (5,000)" in err.message, str(err)
        assert len(str(err)) < 500


def test_int64_wording() -> None:
    from traces.records import int64_problem

    assert int64_problem("9223372036854775808") == "integer beyond 64 bits"
    assert int64_problem("-" + "1" * 30) == "too many digits (30)"
    assert int64_problem("+5") == "cannot parse value"  # pyarrow reads no sign
    assert int64_problem("0" * 40 + "7") == "cannot parse value"  # leading zeros: not digits


@pytest.mark.parametrize(
    ("name", "text", "line", "words"),
    [
        (
            "e.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 5}\n'
            '{"arrival_s": 1e999, "prompt_tokens": 1, "output_tokens": 5}\n',
            2,
            "beyond the range of a double",
        ),
        ("e.csv", HEADER + "0,1,5\n1e999,1,5\n", 3, "beyond the range of a double"),
        ("inf.csv", HEADER + "0,1,5\ninf,1,5\n", 3, "missing or not finite"),
    ],
)
def test_numbers_beyond_a_double_are_named(
    tmp_path: Path, name: str, text: str, line: int, words: str
) -> None:
    for err in _errors(_write(tmp_path, text, name)):
        assert (err.line, err.field) == (line, "arrival_s") and words in err.message, str(err)


def test_json_numbers_pyarrow_reads_as_infinite_are_refused_by_validation(tmp_path: Path) -> None:
    """2e308 is no parse error for pyarrow (it reads inf): validation names it."""
    text = '{"arrival_s": 2e308, "prompt_tokens": 1, "output_tokens": 5}\n'
    err = _errors(_write(tmp_path, text, "t.jsonl"))[0]
    assert (err.line, err.field) == (1, "arrival_s")
    assert "beyond the range of a double" in err.message


# -- byte-order marks ---------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("t.csv", HEADER + "0,10,5\n1,20,6\n"),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
            '{"arrival_s": 1, "prompt_tokens": 20, "output_tokens": 6}\n',
        ),
    ],
)
def test_a_leading_bom_is_accepted(tmp_path: Path, name: str, text: str) -> None:
    df = traces.load(_write(tmp_path, BOM + text.encode(), name))
    assert df["prompt_tokens"].tolist() == [10, 20]


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [
        ("two.csv", BOM + BOM + HEADER.encode() + b"0,10,5\n", 1),
        (
            "two.jsonl",
            BOM + BOM + b'{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n',
            1,
        ),
        ("joined.csv", BOM + HEADER.encode() + b"0,10,5\n" + BOM + b"1,10,5\n", 3),
        (
            "joined.jsonl",
            BOM
            + b'{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
            + BOM
            + b'{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 5}\n',
            2,
        ),
    ],
)
def test_a_bom_elsewhere_is_named(tmp_path: Path, name: str, data: bytes, line: int) -> None:
    for err in _errors(_write(tmp_path, data, name)):
        assert err.line == line and "byte-order mark (U+FEFF)" in err.message, str(err)


# -- frames: a value that cannot be converted names its row ---------------------------------


@pytest.mark.parametrize(
    ("column", "values", "words"),
    [
        ("arrival_s", [0.0, "soon", 2.0], "'soon'"),
        ("request_id", [0, 2**64, 2], "18446744073709551616"),
        ("request_id", [0.0, 1.0, 2.5], "2.5"),
        ("prefix_hashes", [[1], [2], ["x"]], "['x']"),
        ("prefix_hashes", [[1], 7, [2]], "7"),
    ],
)
def test_frame_value_that_cannot_be_converted_names_its_row(
    column: str, values: list[object], words: str
) -> None:
    frame = pd.DataFrame(
        {"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [40, 40, 40], "output_tokens": [1, 1, 1]}
    )
    frame[column] = pd.Series(values, dtype=object)
    if column == "prefix_hashes":
        frame["prefix_block_tokens"] = 16
    with pytest.raises(traces.TraceError) as info:
        traces.from_frame(frame, name="frame")
    err = info.value
    assert err.field == column and err.row == values.index(
        next(v for v in values if words in repr(v))
    )
    assert words in str(err) and "(" not in err.message
