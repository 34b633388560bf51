"""Property: a CSV or JSONL trace that fails to load fails at a named line. Cells mix
what pyarrow's parser trips on (quotes opened and not closed, quoted line breaks, null
markers, padded numbers, signs, hex, 5,000-digit numbers, 1e999, byte-order marks):
every TraceError names its line, and none falls back to pyarrow's own message."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traces

CELLS = st.one_of(
    st.sampled_from(
        [
            *("0", "1", "10", "-1", "1.5", "", " 7 ", "\t7", "NA", "nan", "null", "1e999"),
            *("inf", "9" * 25, "9" * 5000, "\ufeff1", '"', '"3"', '"4\n"', '"5', 'x"y'),
            *("1 2", '""', '"1\n2"', "0x10", "+5", "\r", "1,2"),
        ]
    ),
    st.text(alphabet='0123456789.,"\n\r \te-+x\ufeff', max_size=8),
)
HEADERS = st.sampled_from(
    [
        "request_id,arrival_s,prompt_tokens,output_tokens",
        "arrival_s,prompt_tokens,output_tokens,prefix_hashes,prefix_block_tokens",
        "Timestamp,Model,Request tokens,Response tokens",
        "arrived_at,num_prefill_tokens,num_decode_tokens",
    ]
)
JSON_VALUES = st.sampled_from(
    [
        *("0", "1", "1.5", "-1", "1e999", "2e308", "1.5e309", "1.55e310", "9" * 30, "9" * 5000),
        *("NaN", "Infinity", "true", "null", '"1"', "[1, 2]", "[1, 1e999]", "{}", "1e-999"),
        "[" + "9" * 30 + "]",
    ]
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(name: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", traces.TraceWarning)
                traces.load(path)
        except traces.TraceError as err:
            assert err.line is not None, str(err)
            assert "pyarrow" not in str(err), str(err)


@SETTINGS
@given(
    header=HEADERS,
    rows=st.lists(st.lists(CELLS, min_size=2, max_size=6), min_size=1, max_size=6),
    bom=st.booleans(),
)
def test_bad_csv_fails_at_a_named_line(header: str, rows: list[list[str]], bom: bool) -> None:
    text = header + "\n" + "".join(",".join(r) + "\n" for r in rows)
    _check("t.csv", (b"\xef\xbb\xbf" if bom else b"") + text.encode())


@SETTINGS
@given(
    rows=st.lists(st.tuples(JSON_VALUES, JSON_VALUES, JSON_VALUES, JSON_VALUES), max_size=5),
    lead=st.sampled_from(["", "\ufeff", " ", "x"]),
)
def test_bad_jsonl_fails_at_a_named_line(rows: list[tuple[str, ...]], lead: str) -> None:
    lines = ['{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}']
    lines += [
        f'{lead}{{"arrival_s": {a}, "prompt_tokens": {p}, "output_tokens": {o}, '
        f'"prefix_hashes": {h}, "prefix_block_tokens": 16}}'
        for a, p, o, h in rows
    ]
    _check("t.jsonl", ("\n".join(lines) + "\n").encode())
