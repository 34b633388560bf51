"""Fuzz: random bytes, truncated and mangled files fed to every loader. Each call either
loads a valid canonical table or raises TraceError; no other exception escapes."""

from __future__ import annotations

import io
import tempfile
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traces
from traces.arrivals import PoissonArrival
from traces.schema import ARROW_SCHEMA

SEEDS: dict[str, bytes] = {
    "canonical.csv": (
        b"request_id,arrival_s,prompt_tokens,output_tokens,prefix_hashes,prefix_block_tokens\n"
        b"0,0.5,100,20,1 2,64\n1,1.25,30,5,,0\n2,2.0,70,9,1 3,64\n"
    ),
    "canonical.jsonl": (
        b'{"request_id": 0, "arrival_s": 0.5, "prompt_tokens": 100, "output_tokens": 20, '
        b'"prefix_hashes": [1, 2], "prefix_block_tokens": 64, "session_id": null}\n'
        b'{"request_id": 1, "arrival_s": 1.0, "prompt_tokens": 3, "output_tokens": 2}\n'
    ),
    "azure.csv": (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        b"2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.2000000,12,1\n"
    ),
    "vidur.csv": b"arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.314579,396,109\n",
    "lengths.csv": b"num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n290,905,1195,0.32\n",
    "mooncake.jsonl": (
        b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
        b'{"timestamp": 40, "input_length": 100, "output_length": 3, "hash_ids": [0]}\n'
    ),
    "burstgpt.csv": (
        b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
    ),
}


def _parquet_seed() -> bytes:
    table = pa.table(
        {
            "request_id": [0, 1],
            "arrival_s": [0.0, 1.0],
            "prompt_tokens": [5, 6],
            "output_tokens": [1, 2],
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


SEEDS["canonical.parquet"] = _parquet_seed()
FORMATS = [None, *traces.FORMATS]


def _every_loader(path: Path) -> None:
    for fmt in FORMATS:
        for call in ("load", "chunks"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if call == "load":
                        df = traces.load(path, format=fmt, arrivals=PoissonArrival(rate_per_s=1.0))
                        assert list(df.columns) == ARROW_SCHEMA.names
                        assert df["arrival_s"].is_monotonic_increasing
                    else:
                        for chunk in traces.iter_chunks(
                            path, format=fmt, chunk_rows=2, arrivals=PoissonArrival(rate_per_s=1.0)
                        ):
                            assert (chunk["prompt_tokens"] >= 0).all()
            except traces.TraceError as exc:
                assert str(path) in str(exc) or exc.path == str(path)


mangle = st.one_of(
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=400)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=6),
    ),
    st.tuples(st.just("drop_line"), st.integers(min_value=0, max_value=5)),
    st.tuples(st.just("append"), st.binary(max_size=40)),
)


def _apply(data: bytes, op: tuple) -> bytes:  # type: ignore[type-arg]
    kind, arg = op
    if kind == "truncate":
        return data[: arg % (len(data) + 1)]
    if kind == "flip":
        out = bytearray(data)
        for pos, value in arg:
            if out:
                out[pos % len(out)] = value
        return bytes(out)
    if kind == "drop_line":
        lines = data.split(b"\n")
        del lines[arg % len(lines)]
        return b"\n".join(lines)
    return data + arg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(sorted(SEEDS)), ops=st.lists(mangle, min_size=1, max_size=3))
def test_mangled_files_load_or_raise_trace_error(seed: str, ops: list) -> None:  # type: ignore[type-arg]
    data = SEEDS[seed]
    for op in ops:
        data = _apply(data, op)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / seed
        path.write_bytes(data)
        _every_loader(path)


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=300), ext=st.sampled_from([".csv", ".jsonl", ".parquet", ".txt"]))
def test_random_bytes_load_or_raise_trace_error(data: bytes, ext: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"random{ext}"
        path.write_bytes(data)
        _every_loader(path)


def test_every_truncation_of_every_seed() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in SEEDS.items():
            step = max(1, len(data) // 40)
            for cut in range(0, len(data), step):
                path = Path(tmp) / name
                path.write_bytes(data[:cut])
                _every_loader(path)
