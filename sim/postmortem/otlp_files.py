"""The files of an OTLP span log, from names on disk to JSON objects, trusting nothing
(:mod:`sim.postmortem.otlp_log` parses the objects as OTLP).

Names. A span file is named ``*.json`` or ``*.jsonl``, optionally followed by ``.gz`` or
``.zst`` (:func:`is_span_name`); a folder's span files are read in name order. An entry
with such a name (or ``nodes.csv`` / ``nodes.parquet`` / ``requests.*`` beside them) must
be a regular file once symbolic links are followed: a dangling symlink, a symlink loop,
a FIFO, a socket, a device or a folder under that name is refused by name and kind
(:func:`check_regular`), never skipped and never opened (opening a FIFO for reading
blocks until a writer comes). Entries with other names are not read.

Bytes. The content decides, not the name (:func:`open_lines`): a file starting with
gzip's magic bytes (``1f 8b``) is gunzipped (several members: one stream), one starting
with zstd's (``28 b5 2f fd``) is unzstd'ed (by pyarrow's zstd codec; several frames:
one stream), so ``spans.jsonl`` holding gzip is read like ``spans.jsonl.gz``. The
Collector's file exporter with ``compression: zstd`` and no native compression writes
*records* instead: a 4-byte big-endian length, then one zstd frame holding one
``ExportTraceServiceRequest``; such a file (a length, then zstd's magic) is read record
by record, each record counting as one line. Other compressions (xz, bzip2, zip, lz4,
snappy) are refused by name. A stream that is damaged or truncated is refused naming
the line it had reached.

Lines. One JSON object per line (:func:`documents`), at most :data:`MAX_LINE_BYTES`
long once decompressed; blank lines are skipped; a UTF-8
byte-order mark at the start of the first line is skipped. A line must be UTF-8 (else
its byte and offset are named), strict JSON (no ``NaN`` / ``Infinity``, no number of
more than 4,300 digits, no key given twice in one object) nested at most
:data:`MAX_JSON_DEPTH` levels (OTLP needs about 12, plus an attribute value's own
arrays). Every refusal is one :class:`~sim.postmortem.log.LogError` naming the
file and line.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Final

import pyarrow as pa

from sim.fields import JsonObject, JsonValue
from sim.postmortem.log import LogError
from traces.formats import KeyTwice, unique_pairs

SPAN_SUFFIXES: Final = (".json", ".jsonl")
COMPRESSED_SUFFIXES: Final = (".gz", ".zst")
"""A span file's name may end in one of these after its span suffix (``spans.jsonl.gz``)."""
MAX_JSON_DEPTH: Final = 64
"""Most levels of arrays and objects one line may nest (OTLP's own structure is about 12)."""
MAX_LINE_BYTES: Final = 256 << 20
"""The longest line (one export request) read: 256 MiB, decompressed (a compressed file
of zeros without a newline would otherwise fill memory)."""
CHUNK_BYTES: Final = 1 << 20
GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
REFUSED_MAGIC: Final = {
    b"\xfd7zXZ\x00": "xz",
    b"BZh": "bzip2",
    b"PK\x03\x04": "zip",
    b"\x04\x22\x4d\x18": "lz4",
    b"\xff\x06\x00\x00sNaPpY": "snappy",
}
"""Leading bytes of compressions the reader does not decompress -> their names."""
_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_TOO_DEEP: Final = object()
_REGULAR: Final = "a regular file (save a pipe's or a socket's output to a file first)"


def is_span_name(name: str) -> bool:
    """Whether a file named ``name`` is read as spans: ``*.json`` / ``*.jsonl``, maybe
    followed by ``.gz`` / ``.zst``."""
    stem, dot, last = name.rpartition(".")
    if dot and f".{last}" in COMPRESSED_SUFFIXES:
        name = stem
    return name.endswith(SPAN_SUFFIXES) and not name.startswith(SPAN_SUFFIXES)


def span_entries(folder: Path) -> list[Path]:
    """The entries of ``folder`` named as span files (:func:`is_span_name`), in name
    order, whatever they are: :func:`check_regular` tells a file from the rest."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise LogError(folder, f"cannot list the folder ({exc.strerror or exc})") from None
    return [folder / name for name in names if is_span_name(name)]


def present(path: Path) -> bool:
    """Whether anything is at ``path``, a dangling symlink included."""
    return os.path.lexists(path)


def check_regular(path: Path) -> None:
    """Refuse ``path`` unless it is a regular file once symbolic links are followed,
    naming what it is instead (without opening it)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            target = os.readlink(path)
            raise LogError(
                path, f"a dangling symlink (to {target}, which does not exist)", expected=_REGULAR
            ) from None
        raise LogError(path, "no such file", expected="an OTLP JSON file or folder") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LogError(path, "a symlink loop", expected=_REGULAR) from None
        raise LogError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise LogError(path, f"{kind}, not a regular file", expected=_REGULAR)


def _open(path: Path) -> IO[bytes]:
    """``path`` opened for reading, refused unless a regular file; opened non-blocking,
    so that a FIFO put there after :func:`check_regular` is refused, not waited on."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LogError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LogError(path, "not a regular file", expected=_REGULAR)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline) of ``path``, decompressed as its first
    bytes say (module docstring); the file is closed when the iterator is."""
    with _open(path) as f:
        head = f.read(8)
        f.seek(0)
        for magic, name in REFUSED_MAGIC.items():
            if head.startswith(magic):
                raise LogError(
                    path,
                    f"a file compressed with {name}",
                    line=1,
                    expected="OTLP JSON, plain or compressed with gzip or zstd",
                )
        if head.startswith(GZIP_MAGIC):
            yield from _stream_lines(path, "gzip", gzip.GzipFile(fileobj=f, mode="rb").read)
        elif head.startswith(ZSTD_MAGIC):
            stream = pa.CompressedInputStream(pa.PythonFile(f, mode="r"), "zstd")
            yield from _stream_lines(path, "zstd", stream.read)
        elif len(head) == 8 and head[4:].startswith(ZSTD_MAGIC):
            yield from _records(path, f)
        else:
            yield from _stream_lines(path, None, f.read)


def _stream_lines(
    path: Path, codec: str | None, read: Callable[[int], bytes]
) -> Iterator[tuple[int, bytes]]:
    """Lines of a byte stream read in chunks (a line may span many chunks); a stream the
    codec cannot decompress is an error at the line it had reached."""
    pending: list[bytes] = []
    line, pending_bytes = 1, 0
    while True:
        try:
            chunk = read(CHUNK_BYTES)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            why = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise LogError(
                path,
                f"damaged or truncated {codec or 'file'} at or after this line ({why})",
                line=line,
                expected=f"a whole {codec} stream" if codec else "a readable file",
            ) from None
        if not chunk:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if pending_bytes + end - start > MAX_LINE_BYTES:
                raise _too_long(path, line)
            pending.append(chunk[start:end])
            yield line, b"".join(pending)
            pending, start, line, pending_bytes = [], end + 1, line + 1, 0
        pending.append(chunk[start:])
        pending_bytes += len(chunk) - start
        if pending_bytes > MAX_LINE_BYTES:
            raise _too_long(path, line)
    tail = b"".join(pending)
    if tail:
        yield line, tail


def _records(path: Path, f: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """The Collector's length-prefixed zstd records, each one line."""
    record = 0
    while head := f.read(4):
        record += 1
        size = int.from_bytes(head, "big")
        data = f.read(size) if len(head) == 4 else b""
        if len(data) < size or len(head) < 4:
            raise LogError(
                path,
                "truncated zstd record",
                line=record,
                expected=f"a 4-byte length and that many bytes (record {record})",
                written=f"{len(data)} of {size} bytes" if len(head) == 4 else f"{len(head)} bytes",
            )
        try:
            text = pa.CompressedInputStream(pa.BufferReader(data), "zstd").read(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise LogError(
                path,
                f"damaged zstd record ({' '.join(str(exc).split())[:160]})",
                line=record,
                expected="one zstd frame per length-prefixed record",
            ) from None
        if len(text) > MAX_LINE_BYTES:
            raise _too_long(path, record)
        yield record, text.rstrip(b"\n")


def objects(doc: JsonObject, key: str) -> list[JsonObject]:
    """The objects of the list ``doc[key]`` (none where it is no list; items that are no
    object are left out)."""
    items = doc.get(key)
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _too_long(path: Path, line: int) -> LogError:
    return LogError(
        path,
        f"line longer than {MAX_LINE_BYTES:,} bytes",
        line=line,
        expected="one ExportTraceServiceRequest per line (otlp_files.MAX_LINE_BYTES)",
    )


def documents(path: Path) -> Iterator[tuple[int, JsonObject]]:
    """(line number, JSON object) per non-blank line of ``path`` (module docstring)."""
    for line, raw in open_lines(path):
        if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogError(
                path,
                f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset {exc.start} of the "
                "line)",
                line=line,
                expected="UTF-8 JSON (a compressed file: gzip or zstd; OTLP protobuf is not read)",
            ) from None
        yield line, _json(path, line, text)


def _json(path: Path, line: int, text: str) -> JsonObject:
    def constant(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(text, object_pairs_hook=unique_pairs, parse_constant=constant)
    except KeyTwice as exc:
        raise LogError(
            path, "JSON key given twice in one object", line=line, field=exc.key,
            expected="each key once (a JSON reader would keep either)",
        ) from None  # fmt: skip
    except json.JSONDecodeError as exc:
        raise LogError(path, f"not JSON: {exc.msg} (column {exc.colno})", line=line) from None
    except RecursionError:
        doc = _TOO_DEEP  # deeper than the parser goes: deeper than the bound
    except ValueError as exc:  # a bare NaN / Infinity, an integer of > 4,300 digits
        why = " ".join(str(exc).split())[:160]
        if "digits" in why:
            why = "an integer of more than 4,300 digits"
        raise LogError(path, f"not JSON: {why}", line=line, expected="strict JSON") from None
    too_deep = doc is _TOO_DEEP or _deeper_than(doc, MAX_JSON_DEPTH)
    if too_deep:
        raise LogError(
            path,
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels",
            line=line,
            expected="an ExportTraceServiceRequest (about 12 levels; otlp_files.MAX_JSON_DEPTH)",
        )
    if not isinstance(doc, dict):
        raise LogError(
            path, "not a JSON object", line=line, expected="an ExportTraceServiceRequest"
        )
    return doc


def _deeper_than(doc: JsonValue, limit: int) -> bool:
    """Whether ``doc`` nests arrays/objects more than ``limit`` levels (iteratively)."""
    stack = [(doc, 1)] if isinstance(doc, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        values = node.values() if isinstance(node, dict) else node
        stack.extend((v, depth + 1) for v in values if isinstance(v, dict | list))
    return False
