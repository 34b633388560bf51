"""The trace formats fragsim reads, and how a file's format is told from its header.

Each :class:`Format` names the source columns it needs, the Arrow type each is read as
(token counts are read as float64 so that NaN, fractions and negatives can be reported
precisely by :mod:`traces.validate`; Azure timestamps as text, parsed by
:mod:`traces.timestamps`), and the containers it comes in.

Detection (:func:`detect_format`) looks only at the header: the CSV header line, the keys
of the first JSON object, or the Parquet schema. Every format whose columns overlap the
header is scored by (all required columns present, number present); the best wins, so a
canonical header missing one column is still read as canonical and then rejected with
"missing column", and a Vidur header (``arrived_at`` + lengths) beats the length-only
format. No overlap at all is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from traces.errors import TraceError

F64 = pa.float64()
I64 = pa.int64()
LIST_I64 = pa.list_(pa.int64())


@dataclass(frozen=True)
class Format:
    """One source format: which columns it needs and how they are read."""

    name: str
    containers: tuple[str, ...]
    required: tuple[str, ...]
    optional: tuple[str, ...]
    types: Mapping[str, pa.DataType]
    description: str


CANONICAL_TYPES: Final[Mapping[str, pa.DataType]] = MappingProxyType(
    {
        "request_id": I64,
        "arrival_s": F64,
        "prompt_tokens": F64,
        "output_tokens": F64,
        "prefix_hashes": LIST_I64,
        "prefix_block_tokens": F64,
        "num_samples": F64,
        "beam_width": F64,
        "session_id": I64,
    }
)

FORMATS: Final[Mapping[str, Format]] = MappingProxyType(
    {
        f.name: f
        for f in (
            Format(
                "canonical",
                ("csv", "jsonl", "parquet"),
                ("arrival_s", "prompt_tokens", "output_tokens"),
                (
                    "request_id",
                    "prefix_hashes",
                    "prefix_block_tokens",
                    "num_samples",
                    "beam_width",
                    "session_id",
                ),
                CANONICAL_TYPES,
                "fragsim's own schema (traces/schema.py), CSV / JSONL / Parquet; "
                "without request_id, data rows are numbered from 0",
            ),
            Format(
                "azure",
                ("csv",),
                ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
                (),
                {"TIMESTAMP": pa.string(), "ContextTokens": F64, "GeneratedTokens": F64},
                "Azure LLM inference trace 2023 / 2024 (arrival = TIMESTAMP - first row's)",
            ),
            Format(
                "vidur",
                ("csv",),
                ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
                (),
                {"arrived_at": F64, "num_prefill_tokens": F64, "num_decode_tokens": F64},
                "Vidur processed trace (arrived_at in seconds)",
            ),
            Format(
                "mooncake",
                ("jsonl",),
                ("timestamp", "input_length", "output_length"),
                ("hash_ids",),
                {"timestamp": F64, "input_length": F64, "output_length": F64, "hash_ids": LIST_I64},
                "Mooncake JSONL (timestamp in ms, hash_ids over 512-token blocks)",
            ),
            Format(
                "burstgpt",
                ("csv",),
                ("Timestamp", "Request tokens", "Response tokens"),
                ("Model", "Total tokens", "Log Type"),
                {"Timestamp": F64, "Request tokens": F64, "Response tokens": F64},
                "BurstGPT CSV (Timestamp in s; rows with 0 response tokens are failures)",
            ),
            Format(
                "lengths",
                ("csv",),
                ("num_prefill_tokens", "num_decode_tokens"),
                ("num_total_tokens", "pd_ratio"),
                {"num_prefill_tokens": F64, "num_decode_tokens": F64},
                "length-only stats (Vidur / Sarathi); arrivals come from an arrival process",
            ),
        )
    }
)

MOONCAKE_BLOCK_TOKENS: Final = 512
PARQUET_MAGIC: Final = b"PAR1"


@dataclass(frozen=True)
class Header:
    """What :func:`read_header` found: the container and the column names, in order."""

    container: str
    columns: tuple[str, ...]


def read_header(path: Path) -> Header:
    """Sniff the container (by extension, then content) and read the column names."""
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise TraceError(path, f"cannot read file ({exc.strerror or exc})") from None
    if not head.strip():
        raise TraceError(path, "empty file", line=1, expected="a header and at least one row")
    if path.suffix.lower() == ".parquet" or head.startswith(PARQUET_MAGIC):
        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(path, f"not a readable Parquet file ({exc})") from None
        return Header("parquet", tuple(names))
    first = head.lstrip(b"\xef\xbb\xbf").lstrip().split(b"\n", 1)[0].strip()
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError(
            path, "header is not UTF-8 text", line=1, expected="a CSV header or a JSON object"
        ) from None
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(
                path,
                f"first line is not valid JSON ({exc.msg})",
                line=1,
                expected="a JSON object per line",
            ) from None
        if not isinstance(obj, dict):
            raise TraceError(
                path, "first line is not a JSON object", line=1, expected="a JSON object per line"
            )
        return Header("jsonl", tuple(str(k) for k in obj))
    return Header("csv", tuple(c.strip().strip('"').strip() for c in text.split(",")))


def detect_format(path: str | Path, header: Header | None = None) -> Format:
    """The format whose columns best match the header; raises :class:`TraceError` if none does."""
    path = Path(path)
    header = header or read_header(path)
    cols = set(header.columns)
    best: tuple[tuple[bool, int], Format] | None = None
    for fmt in FORMATS.values():
        if header.container not in fmt.containers and header.container != "parquet":
            continue
        present = len(cols & set(fmt.required))
        if present == 0:
            continue
        score = (present == len(fmt.required), present)
        if best is None or score > best[0]:
            best = (score, fmt)
    if best is None:
        known = "; ".join(f"{f.name}: {', '.join(f.required)}" for f in FORMATS.values())
        raise TraceError(
            path,
            "unrecognised header",
            line=1,
            expected=f"the columns of a known format ({known})",
            got=", ".join(header.columns)[:200],
        )
    return best[1]


def check_columns(path: Path, fmt: Format, header: Header) -> None:
    """Raise naming the first required column of ``fmt`` the header lacks."""
    for name in fmt.required:
        if name not in header.columns:
            raise TraceError(
                path,
                "missing column",
                line=1 if header.container != "parquet" else None,
                field=name,
                expected=f"a {name!r} column for format {fmt.name!r}",
                got=", ".join(header.columns)[:200],
            )
