"""Turn a raw Arrow table read from one format into the canonical table, checking it.

Every check is vectorised over the chunk; the first offending row (lowest row number)
is reported as a :class:`TraceError`. Rules:

- token counts (``prompt_tokens``, ``output_tokens`` and their source names) must be
  present, finite, whole and at most ``MAX_TOKENS``; a prompt has at least 1 token (a
  request without one cannot be served), an output at least 0 (kept as written: 0 is a
  request that ends with its prefill, e.g. a failed BurstGPT request kept with
  ``keep_failed``);
- ``num_samples`` and ``beam_width`` whole and >= 1; ``prefix_block_tokens`` whole and
  >= 0, and > 0 on every row that has prefix hashes; hash lists hold no nulls and no
  more hashes than the prompt has blocks (``ceil(prompt_tokens / prefix_block_tokens)``);
- ``arrival_s`` (or the source timestamp) present, finite and in ``[0, MAX_ARRIVAL_S]``
  seconds from the start of the trace (:mod:`traces.bounds`); Azure timestamps parse
  (:mod:`traces.timestamps`: zone offsets are converted to UTC) and none is earlier
  than the first chunk's earliest, from which arrivals are counted;
- ``request_id`` present where the file has the column (uniqueness is checked over the
  whole trace by ``load``); without the column, data rows are numbered from 0.

Rows are numbered from 0 over the data rows of the file; lines from 1 with the header as
line 1 (CSV) or the first object as line 1 (JSONL). An error re-reads the file up to its
row (:func:`traces.locate.record_at`) for the exact line and the value as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.bounds import MAX_ARRIVAL_S
from traces.errors import TraceError
from traces.formats import MOONCAKE_BLOCK_TOKENS, Format
from traces.records import int64_problem, int64_text_ok, overflow_problem, record_at
from traces.schema import ARROW_SCHEMA, OPTIONAL_DEFAULTS
from traces.timestamps import EXPECTED as TIMESTAMP_EXPECTED
from traces.timestamps import timestamps_ns

MAX_TOKENS: Final = 1 << 40


@dataclass
class ReadContext:
    """Per-read state (one per ``load``/``iter_chunks`` call, never shared)."""

    path: Path | None
    line_base: int | None  # line of data row 0 (2 for CSV, 1 for JSONL); None for Parquet
    keep_failed: bool = False
    row_offset: int = 0
    t0_ns: int | None = None  # Azure: the first row's timestamp
    dropped_failed: int = 0
    arrivals_s: np.ndarray | None = None  # length-only files: arrival per data row
    notes: list[str] = field(default_factory=list)
    container: str | None = None  # "csv" / "jsonl": errors re-read the row from the file

    def error(
        self,
        i: int | None,
        message: str,
        *,
        field: str | None = None,
        expected: str | None = None,
        got: object = None,
        as_written: bool = True,
    ) -> TraceError:
        """The error for chunk row ``i``: its data row, its exact line and (with
        ``as_written``, when ``got`` is the cell of ``field``) the cell's text as the
        file wrote it, read back from a CSV or JSONL file. A value read as infinite from
        a finite number's text is named for what it is: too many digits, or an
        exponent beyond a double's."""
        row = None if i is None else self.row_offset + i
        line = None if row is None or self.line_base is None else row + self.line_base
        written = None
        if self.path is not None and row is not None and self.container in ("csv", "jsonl"):
            rec = record_at(self.path, self.container, row)
            if rec is not None:
                line = rec.line
                if as_written and got is not None and field is not None:
                    written = rec.cells.get(field)
        if isinstance(got, float) and np.isinf(got) and written is not None:
            message = overflow_problem(written) or message
        return TraceError(
            self.path,
            message,
            row=row,
            line=line,
            field=field,
            expected=expected,
            got=got,
            written=written,
        )


def _floats(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if not pa.types.is_floating(col.type):
        col = pc.cast(col, pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def check_counts(ctx: ReadContext, x: np.ndarray, name: str, minimum: int = 0) -> np.ndarray:
    """``x`` as int64 after checking every value is a whole number in [minimum, MAX_TOKENS]."""
    with np.errstate(invalid="ignore"):
        nonfinite = ~np.isfinite(x)
        frac = ~nonfinite & (x != np.floor(x))
        out_of_range = ~nonfinite & ((x < minimum) | (x > MAX_TOKENS))
    bad = nonfinite | frac | out_of_range
    if bad.any():
        i = int(np.argmax(bad))
        what = (
            "missing or NaN"
            if np.isnan(x[i])
            else "not a whole number"
            if frac[i]
            else "out of range"
        )
        if np.isinf(x[i]):
            what = "infinite"
        raise ctx.error(i, what, field=name, expected=_count_range(minimum, x[i]), got=float(x[i]))
    return x.astype(np.int64)


def counts(
    ctx: ReadContext, table: pa.Table, name: str, minimum: int = 0, default: int | None = None
) -> np.ndarray:
    """Column ``name`` as int64 token/multiplicity counts, checked; integer columns
    (Parquet, canonical frames) skip the float detour. Nulls take ``default`` if given."""
    col = table.column(name)
    if not pa.types.is_integer(col.type):
        x = _floats(table, name)
        if default is not None:
            x = np.where(np.isnan(x), float(default), x)
        return check_counts(ctx, x, name, minimum)
    if col.null_count:
        if default is None:
            i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise ctx.error(
                i, "missing or NaN", field=name, expected=f"a whole number >= {minimum}"
            )
        col = pc.fill_null(col, default)
    x = np.asarray(col.to_numpy(), dtype=np.int64)
    if len(x) and (int(x.min()) < minimum or int(x.max()) > MAX_TOKENS):
        i = int(np.argmax((x < minimum) | (x > MAX_TOKENS)))
        raise ctx.error(
            i, "out of range", field=name, expected=_count_range(minimum, x[i]), got=int(x[i])
        )
    return x


def _count_range(minimum: int, value: float) -> str:
    """What a count must be, for a message: its bound on the side ``value`` broke."""
    if value > MAX_TOKENS:
        return f"a whole number <= {MAX_TOKENS:,} (2**40, traces.validate.MAX_TOKENS)"
    return f"a whole number >= {minimum}"


def check_min(
    ctx: ReadContext, x: np.ndarray, name: str, minimum: int, *, where: np.ndarray
) -> None:
    """Counts already checked >= 0 must also be >= ``minimum`` on the rows ``where``."""
    bad = where & (x < minimum)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i, "out of range", field=name, expected=f"a whole number >= {minimum}", got=int(x[i])
        )


def _azure_arrivals(ctx: ReadContext, t: pa.Table, ns: np.ndarray) -> np.ndarray:
    """Seconds since the trace's start: the earliest timestamp of the first chunk (the
    first row's in a sorted file); an earlier one in a later chunk is an error."""
    t0 = ctx.t0_ns or 0
    before = ns < t0
    if before.any():
        i = int(np.argmax(before))
        raise ctx.error(
            i,
            "timestamp before the trace's start",
            field="TIMESTAMP",
            expected=f"a time at or after the earliest of the first chunk "
            f"({np.datetime64(t0, 'ns')})",
            got=t.column("TIMESTAMP")[i].as_py(),
        )
    return check_arrivals(ctx, (ns - t0) / 1e9, "TIMESTAMP")


def check_finite(ctx: ReadContext, x: np.ndarray, name: str) -> np.ndarray:
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i, "missing or not finite", field=name, expected="a finite number", got=float(x[i])
        )
    return x


def check_arrivals(ctx: ReadContext, x: np.ndarray, name: str, unit_s: float = 1.0) -> np.ndarray:
    """``x`` (arrival times in units of ``unit_s`` seconds) after checking each is finite
    and within ``[0, MAX_ARRIVAL_S]`` seconds of the trace's start."""
    check_finite(ctx, x, name)
    limit = MAX_ARRIVAL_S / unit_s
    bad = (x < 0) | (x > limit)
    if bad.any():
        i = int(np.argmax(bad))
        unit = "seconds" if unit_s == 1.0 else "milliseconds"
        raise ctx.error(
            i,
            "negative arrival time" if x[i] < 0 else "arrival too late",
            field=name,
            expected=f"{unit} from the start of the trace, in [0, {limit:.0e}] "
            "(traces.bounds.MAX_ARRIVAL_S)",
            got=float(x[i]),
        )
    return x


def parse_hash_strings(ctx: ReadContext, col: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """CSV cells of space-separated integers ("" = no hashes) -> list<int64>.

    Also accepts a bracketed, comma-separated list (``[1, 2]``, as ``DataFrame.to_csv``
    writes Python lists)."""
    if pc.any(pc.match_substring_regex(col, r"[\[\],]")).as_py():
        col = pc.replace_substring_regex(col, r"[\[\],]", " ")
    arr = pc.utf8_trim_whitespace(col)
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    arr = pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)
    parts = pc.split_pattern_regex(arr, pattern=r"\s+")
    lengths = pc.fill_null(pc.list_value_length(parts), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(parts)
    try:
        ints = pc.cast(values, pa.int64())
    except pa.ArrowInvalid:
        bad = np.array([not int64_text_ok(v) for v in values.to_pylist()], dtype=bool)
        k = int(np.argmax(bad))
        i = int(np.searchsorted(np.cumsum(lengths), k, side="right"))
        problem = int64_problem(values[k].as_py())
        raise ctx.error(
            i,
            "bad prefix hash" if problem == "cannot parse value" else f"prefix hash: {problem}",
            field=name,
            expected="space-separated integers in [-2**63, 2**63)",
            got=values[k].as_py(),
            as_written=False,
        ) from None
    return list_from(lengths, ints)


def list_from(lengths: np.ndarray, values: pa.Array) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def check_hashes(
    ctx: ReadContext, col: pa.Array, block: np.ndarray, prompt: np.ndarray, name: str
) -> pa.Array:
    """Hash lists: nulls become empty lists; elements must not be null; block > 0 where
    used; no more hashes than the prompt has (started) blocks."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(col)
    if values.null_count:
        k = int(np.argmax(values.is_null().to_numpy(zero_copy_only=False)))
        i = int(np.searchsorted(np.cumsum(lengths), k, side="right"))
        raise ctx.error(i, "null prefix hash", field=name, expected="a list of integers")
    bad = (lengths > 0) & (block <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i,
            "prefix hashes without a block size",
            field="prefix_block_tokens",
            expected="a block size > 0 on rows with prefix hashes",
            got=int(block[i]),
        )
    blocks = -(-prompt // np.maximum(block, 1))
    bad = (lengths > 0) & (lengths > blocks)
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.error(
            i,
            f"{int(lengths[i])} prefix hashes for a {int(prompt[i])}-token prompt "
            f"in {int(block[i])}-token blocks",
            field=name,
            expected=f"at most {int(blocks[i])} (one per block the prompt starts)",
        )
    return list_from(lengths, values)


def _canonical(ctx: ReadContext, fmt: Format, t: pa.Table) -> dict[str, object]:
    n = t.num_rows
    names = t.column_names
    cols: dict[str, object] = {}
    if "request_id" in names:
        rid = t.column("request_id")
        if rid.null_count:
            i = int(np.argmax(rid.is_null().to_numpy(zero_copy_only=False)))
            raise ctx.error(i, "missing request id", field="request_id", expected="an integer")
        cols["request_id"] = rid.to_numpy()
    else:  # no ids in the file: number data rows from 0, as the other formats do
        cols["request_id"] = np.arange(ctx.row_offset, ctx.row_offset + n, dtype=np.int64)
    cols["arrival_s"] = check_arrivals(ctx, _floats(t, "arrival_s"), "arrival_s")
    cols["prompt_tokens"] = counts(ctx, t, "prompt_tokens", minimum=1)
    cols["output_tokens"] = counts(ctx, t, "output_tokens")
    for name, minimum in (("num_samples", 1), ("beam_width", 1), ("prefix_block_tokens", 0)):
        if name in names:
            cols[name] = counts(ctx, t, name, minimum, default=int(OPTIONAL_DEFAULTS[name]))  # type: ignore[call-overload]
    block = np.asarray(cols.get("prefix_block_tokens", np.zeros(n, np.int64)))
    if "prefix_hashes" in names:
        col = t.column("prefix_hashes")
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = parse_hash_strings(ctx, col, "prefix_hashes")
        prompt = np.asarray(cols["prompt_tokens"])
        cols["prefix_hashes"] = check_hashes(ctx, col, block, prompt, "prefix_hashes")
    if "session_id" in names:
        cols["session_id"] = t.column("session_id")
    return cols


def to_canonical(ctx: ReadContext, fmt: Format, t: pa.Table) -> pa.Table:
    """Validate one raw chunk of format ``fmt`` and map it to :data:`ARROW_SCHEMA`."""
    n = t.num_rows
    ids = np.arange(ctx.row_offset, ctx.row_offset + n, dtype=np.int64)
    if fmt.name == "canonical":
        cols = _canonical(ctx, fmt, t)
    elif fmt.name == "azure":
        ns, bad, why = timestamps_ns(t.column("TIMESTAMP"))
        if bad is not None:
            text = t.column("TIMESTAMP")[bad].as_py()
            raise ctx.error(
                bad,
                why or "cannot parse timestamp",
                field="TIMESTAMP",
                expected=TIMESTAMP_EXPECTED,
                got=None if why == "missing timestamp" else text,
            )
        if ctx.t0_ns is None and n:
            ctx.t0_ns = int(ns.min())  # the first row's in a sorted file
        cols = {
            "request_id": ids,
            "arrival_s": _azure_arrivals(ctx, t, ns),
            "prompt_tokens": counts(ctx, t, "ContextTokens", minimum=1),
            "output_tokens": counts(ctx, t, "GeneratedTokens"),
        }
    elif fmt.name == "vidur":
        cols = {
            "request_id": ids,
            "arrival_s": check_arrivals(ctx, _floats(t, "arrived_at"), "arrived_at"),
            "prompt_tokens": counts(ctx, t, "num_prefill_tokens", minimum=1),
            "output_tokens": counts(ctx, t, "num_decode_tokens"),
        }
    elif fmt.name == "lengths":
        assert ctx.arrivals_s is not None, "length-only files need arrival times"
        cols = {
            "request_id": ids,
            "arrival_s": ctx.arrivals_s[ctx.row_offset : ctx.row_offset + n],
            "prompt_tokens": counts(ctx, t, "num_prefill_tokens", minimum=1),
            "output_tokens": counts(ctx, t, "num_decode_tokens"),
        }
    elif fmt.name == "mooncake":
        prompt = counts(ctx, t, "input_length", minimum=1)
        cols = {
            "request_id": ids,
            "arrival_s": check_arrivals(ctx, _floats(t, "timestamp"), "timestamp", 1e-3) / 1000.0,
            "prompt_tokens": prompt,
            "output_tokens": counts(ctx, t, "output_length"),
        }
        if "hash_ids" in t.column_names:
            block = np.full(n, MOONCAKE_BLOCK_TOKENS, dtype=np.int64)
            hashes = check_hashes(ctx, t.column("hash_ids"), block, prompt, "hash_ids")
            lengths = pc.list_value_length(hashes).to_numpy(zero_copy_only=False)
            cols["prefix_hashes"] = hashes
            cols["prefix_block_tokens"] = np.where(lengths > 0, block, 0)
    elif fmt.name == "burstgpt":
        out = counts(ctx, t, "Response tokens")
        prompt = counts(ctx, t, "Request tokens")
        kept = np.ones(n, dtype=bool) if ctx.keep_failed else out > 0
        check_min(ctx, prompt, "Request tokens", 1, where=kept)  # failed rows are dropped
        cols = {
            "request_id": ids,
            "arrival_s": check_arrivals(ctx, _floats(t, "Timestamp"), "Timestamp"),
            "prompt_tokens": prompt,
            "output_tokens": out,
        }
    else:  # pragma: no cover - FORMATS and this function are kept in step
        raise AssertionError(fmt.name)
    table = assemble(cols, n)
    if fmt.name == "burstgpt" and not ctx.keep_failed:
        failed = np.asarray(cols["output_tokens"]) == 0
        if failed.any():
            ctx.dropped_failed += int(failed.sum())
            table = table.filter(pa.array(~failed))
    return table


def assemble(cols: dict[str, object], n: int) -> pa.Table:
    """Build an :data:`ARROW_SCHEMA` table, filling absent optional columns with defaults."""
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for f in ARROW_SCHEMA:
        value = cols.get(f.name)
        if value is None:
            if f.name == "prefix_hashes":
                value = list_from(np.zeros(n, np.int64), pa.array([], pa.int64()))
            elif f.name == "session_id":
                value = pa.nulls(n, pa.int64())
            else:
                value = np.full(n, OPTIONAL_DEFAULTS[f.name], dtype=np.int64)
        if isinstance(value, pa.Array | pa.ChunkedArray):
            arrays.append(value.cast(f.type))
        else:
            arrays.append(pa.array(value, type=f.type))
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)
