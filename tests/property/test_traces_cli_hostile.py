"""Hostile trace files through ``fragsim trace describe``, in process: random bytes,
huge numbers, NaN/inf, negative values, empty files, duplicate columns and keys, wrong
types, bad options. Each run ends with exit 0, or exit 2 and exactly one ``error:``
line on stderr (``warning:`` lines aside); never a traceback; within a time bound."""

from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli import app

runner = CliRunner()
TIME_BOUND_S = 10.0
COLUMNS = [
    "request_id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "prefix_hashes",
    "prefix_block_tokens",
    "num_samples",
    "beam_width",
    "session_id",
    "arrived_at",
    "num_prefill_tokens",
    "num_decode_tokens",
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
    "TIMESTAMP",
    "ContextTokens",
    "GeneratedTokens",
    "Request tokens",
    "Response tokens",
    "Timestamp",
    " arrival_s ",
    "",
]
NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, -(2**63) - 1, 1e300, -1e300, 0.5, 1e-300]),
)
TEXT_CELLS = st.one_of(
    NUMBERS.map(str),
    st.sampled_from(["", "nan", "NaN", "inf", "-inf", "abc", "1 2 3", "[1, 2]", '"x"', "1e999"]),
    st.sampled_from(["2023-11-16 18:15:46.6805900", "2024-05-10 00:00:00+25:00", "\u00e9"]),
    st.text(max_size=20),
    st.just("x" * 3000),
)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def csv_files(draw: st.DrawFn) -> bytes:
    header = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=7))
    rows = draw(
        st.lists(
            st.lists(TEXT_CELLS, min_size=len(header) - 1, max_size=len(header) + 1),
            max_size=6,
        )
    )
    text = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):  # a byte that is not UTF-8 somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\r"])) + data[at:]
    return data


@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        keys = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=6))
        parts = [f"{json.dumps(k)}: {_json(draw(JSON_VALUES))}" for k in keys]  # keys may repeat
        lines.append("{" + ", ".join(parts) + "}")
    if draw(st.booleans()):
        lines.insert(
            draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "[1]", "{", "nul"]))
        )
    return ("\n".join(lines) + "\n").encode()


def _json(value: object) -> str:
    return json.dumps(value).replace("Infinity", "1e999").replace("NaN", "1e999")


@st.composite
def parquet_files(draw: st.DrawFn) -> bytes:
    names = draw(st.lists(st.sampled_from(COLUMNS[:9]), min_size=1, max_size=6))
    n = draw(st.integers(0, 4))
    kinds = {
        "int": st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n).map(
            lambda v: pa.array(v, pa.int64())
        ),
        "float": st.lists(st.floats(), min_size=n, max_size=n).map(
            lambda v: pa.array(v, pa.float64())
        ),
        "text": st.lists(st.text(max_size=5), min_size=n, max_size=n).map(pa.array),
        "bool": st.lists(st.booleans(), min_size=n, max_size=n).map(pa.array),
        "null": st.just(pa.nulls(n)),
    }
    arrays = [draw(st.sampled_from(sorted(kinds)).flatmap(lambda k: kinds[k])) for _ in names]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names), buf)
    return buf.getvalue()


FILES = st.one_of(
    st.tuples(st.just(".csv"), csv_files()),
    st.tuples(st.just(".jsonl"), jsonl_files()),
    st.tuples(st.just(".parquet"), parquet_files()),
    st.tuples(st.sampled_from([".csv", ".jsonl", ".parquet", ".txt"]), st.binary(max_size=200)),
    st.tuples(
        st.sampled_from([".csv", ".jsonl"]), st.sampled_from([b"", b"\n\n", b"\xef\xbb\xbf"])
    ),
)
OPTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("--rate"), st.sampled_from(["1", "0", "-2", "inf", "nan", "1e-300", "2e6"])
        ),
        st.tuples(st.just("--seed"), st.sampled_from(["0", "-1", "7", str(2**70)])),
        st.tuples(st.just("--format"), st.sampled_from(["canonical", "lengths", "azure", "bogus"])),
        st.tuples(st.just("--strict"), st.just(None)),
        st.tuples(st.just("--keep-failed"), st.just(None)),
        st.tuples(st.just("--json"), st.just(None)),
    ),
    max_size=3,
)


def _check_describe(name: str, data: bytes, options: list[tuple[str, str | None]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"hostile{name}"
        path.write_bytes(data)
        args = ["trace", "describe", str(path)]
        for opt, value in options:
            args += [opt] if value is None else [opt, value]
        start = time.perf_counter()
        result = runner.invoke(app, args)
        elapsed = time.perf_counter() - start
    assert elapsed < TIME_BOUND_S, (args, elapsed)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        repr(result.exception),
    )
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert all(line.startswith(("error: ", "warning: ")) for line in lines), result.stderr
    if result.exit_code == 0:
        assert errors == [], result.stderr
    else:
        assert result.exit_code == 2, (args, result.exit_code, result.stderr)
        assert len(errors) == 1, result.stderr


@settings(
    max_examples=120,
    deadline=int(TIME_BOUND_S * 1000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(file=FILES, options=OPTIONS)
def test_describe_survives_hostile_files(
    file: tuple[str, bytes], options: list[tuple[str, str | None]]
) -> None:
    _check_describe(file[0], file[1], options)
