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

import csv
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from traces.errors import TraceError, has_control, reader_says

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
BOM: Final = b"\xef\xbb\xbf"  # UTF-8 byte-order mark: accepted once, at the start of a file


@dataclass(frozen=True)
class Header:
    """What :func:`read_header` found: the container and the column names, in order
    (CSV names trimmed of spaces and quotes; ``raw`` keeps them as written, which is how
    pyarrow's CSV reader names them)."""

    container: str
    columns: tuple[str, ...]
    raw: tuple[str, ...] = ()

    def raw_names(self) -> dict[str, str]:
        """Trimmed name -> name as written."""
        return dict(zip(self.columns, self.raw or self.columns, strict=True))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_regular_file(path: Path) -> None:
    """Raise unless ``path`` is a regular file (symbolic links followed). Traces are read
    more than once (header, data, and on error the slow path), so a pipe, whose data can
    be read only once, is refused instead of blocking."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        why = exc.strerror or str(exc)
        if os.path.islink(path):  # dangling, or a loop (ELOOP)
            why = f"a symlink to {os.readlink(path)}: {why}"
        raise TraceError(path, f"cannot read file ({why})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise TraceError(
            path,
            f"not a regular file ({kind})",
            expected="a trace file on disk (save a pipe's output to a file first)",
        )


def _duplicate(path: Path, names: list[str], line: int | None) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen and name:
            raise TraceError(
                path,
                "column given twice",
                line=line,
                field=name,
                expected="each column name once",
            )
        seen.add(name)


class KeyTwice(ValueError):
    """A JSON object gives ``key`` twice (JSON parsers keep the last silently)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"key {key!r} given twice")


def unique_pairs(items: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for :func:`json.loads` that raises :class:`KeyTwice`."""
    out: dict[str, object] = {}
    for key, value in items:
        if key in out:
            raise KeyTwice(key)
        out[key] = value
    return out


def _control(path: Path, names: list[str], line: int | None) -> None:
    """Refuse a column name holding a control or invisible character (NUL, ESC, U+200B):
    it would otherwise be read as an unknown column and ignored, silently."""
    for name in names:
        if has_control(name):
            raise TraceError(
                path,
                "column name holds a control or invisible character",
                line=line,
                field=name,
                expected="column names of printable characters only",
            )


def read_header(path: Path) -> Header:
    """Sniff the container (by extension, then content) and read the column names.
    A UTF-8 byte-order mark at the start of the file is skipped (as pyarrow does).
    Refuses non-regular files, empty files, a header that is not UTF-8 or holds another
    byte-order mark, and a column name given twice."""
    check_regular_file(path)
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
            raise TraceError(
                path,
                f"not a readable Parquet file: damaged, truncated or not Parquet "
                f"({reader_says(exc)})",
                expected="a Parquet file written whole",
            ) from None
        _control(path, names, None)
        _duplicate(path, names, None)
        return Header("parquet", tuple(names))
    body = head[len(BOM) :] if head.startswith(BOM) else head
    first = re.split(rb"\r\n|\r|\n", body.lstrip(), maxsplit=1)[0].strip()
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = len(head) - len(body.lstrip()) + exc.start
        raise TraceError(
            path,
            f"header is not UTF-8 text (byte 0x{first[exc.start]:02x} at byte offset {offset})",
            line=1,
            expected="a CSV header or a JSON object",
        ) from None
    if "\ufeff" in text:
        raise TraceError(
            path,
            "byte-order mark (U+FEFF) inside the header (a second one, or one after a space)",
            line=1,
            expected="a byte-order mark only at the very start of the file",
            got=text[:40],
        )
    if text.startswith("{"):
        try:
            obj = json.loads(
                text,
                object_pairs_hook=unique_pairs,
                parse_int=str,  # keys are all it needs: no int() of a 5,000-digit number
                parse_float=str,
                parse_constant=str,
            )
        except KeyTwice as exc:
            raise TraceError(
                path,
                "key given twice in one object",
                row=0,
                line=1,
                field=exc.key,
                expected="each key once per JSON object",
            ) from None
        except (ValueError, RecursionError) as exc:
            why = (
                exc.msg
                if isinstance(exc, json.JSONDecodeError)
                else "nested too deeply"
                if isinstance(exc, RecursionError)
                else "cannot be read"
            )
            raise TraceError(
                path,
                f"first line is not valid JSON ({why})",
                line=1,
                expected="a JSON object per line",
            ) from None
        if not isinstance(obj, dict):
            raise TraceError(
                path, "first line is not a JSON object", line=1, expected="a JSON object per line"
            )
        keys = [str(k) for k in obj]
        _control(path, keys, 1)
        return Header("jsonl", tuple(keys))
    try:
        raw = next(csv.reader([text]), [])
    except csv.Error:
        raise TraceError(
            path, "header is not a CSV line", line=1, expected="a CSV header", got=text[:80]
        ) from None
    columns = [c.strip().strip('"').strip() for c in raw]
    _control(path, columns, 1)
    _duplicate(path, columns, 1)
    return Header("csv", tuple(columns), tuple(raw))


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
