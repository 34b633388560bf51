"""The slow path of a broken JSON Lines trace (:func:`traces.locate.locate` calls
:func:`locate_jsonl`): one streamed pass with Python's ``json`` module naming the first
record pyarrow could not read -- a byte-order mark inside the file, invalid JSON (with
its reason and column), a key given twice, a number beyond a double, a value that does
not convert to its column's type."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from traces.errors import TraceError
from traces.formats import BOM, KeyTwice
from traces.records import (
    DECIMAL_RE,
    _json_object,
    _jsonl_records,
    _Number,
    _significant,
    bom_error,
    expected_text,
    int64_problem,
    int64_text_ok,
    json_text,
    utf8_error,
)


def locate_jsonl(path: Path, types: dict[str, pa.DataType]) -> TraceError | None:
    for row, (line, raw) in enumerate(_jsonl_records(path)):
        if raw.lstrip(b" \t").startswith(BOM):
            return bom_error(path, row, line, "<record>", raw[:40].decode("utf-8", "replace"))
        try:
            obj = _json_object(raw)
        except KeyTwice as exc:
            return TraceError(
                path,
                "key given twice in one object",
                row=row,
                line=line,
                field=exc.key,
                expected="each key once per JSON object",
            )
        except UnicodeDecodeError:
            bad = utf8_error(path)
            if bad is not None:
                return bad
            return _not_json(path, row, line, raw, "not UTF-8 text")
        except json.JSONDecodeError as exc:
            return _not_json(
                path, row, line, raw, f"not valid JSON: {exc.msg} at column {exc.colno}"
            )
        except RecursionError:
            return _not_json(path, row, line, raw, "not valid JSON: nested too deeply")
        if not isinstance(obj, dict):
            return TraceError(
                path,
                "not a JSON object",
                row=row,
                line=line,
                field="<record>",
                expected="one JSON object per line",
                written=json_text(obj),
            )
        huge = next(((k, v) for k, v in obj.items() if not _json_doubles_ok(v)), None)
        if huge is not None:  # pyarrow's parser refuses it in any field, read or not
            return TraceError(
                path,
                "number beyond the range of a double (about 1.8e308)",
                row=row,
                line=line,
                field=huge[0],
                expected="a number within a double's range",
                written=json_text(huge[1]),
            )
        for name, t in types.items():
            value = obj.get(name)
            if not _json_ok(value, t):
                text = json_text(value)
                message = "cannot parse value"
                if isinstance(value, _Number) and pa.types.is_integer(t):
                    message = int64_problem(value)
                elif isinstance(value, list) and pa.types.is_list(t):
                    bad = next(v for v in value if not _json_int(v))
                    if isinstance(bad, _Number) and int64_problem(bad) != message:
                        message = f"list element {bad[:20]}: {int64_problem(bad)}"
                return TraceError(
                    path,
                    message,
                    row=row,
                    line=line,
                    field=name,
                    expected=expected_text(t),
                    written=text,
                )
    return None


def _not_json(path: Path, row: int, line: int, raw: bytes, message: str) -> TraceError:
    return TraceError(
        path,
        message,
        row=row,
        line=line,
        field="<record>",
        expected="one JSON object per line",
        written=raw[:200].decode("utf-8", "replace").strip(),
    )


def _json_int(value: object) -> bool:
    if not isinstance(value, _Number):
        return False
    return int64_text_ok(str(value))


def _json_double_ok(text: str) -> bool:
    """pyarrow's JSON parser (RapidJSON) reads ``text`` without "Number too big": a
    positive exponent may exceed 308 only by the fraction digits it reads (at most 17
    significant ones, leading zeros of ``0.000...`` counted). Other numbers too big for
    a double are read as infinite (and refused later, with their row)."""
    m = DECIMAL_RE.fullmatch(text)
    if m is None or m.group(3) is None or m.group(3).startswith("-"):
        return True
    whole, frac = m.group(1), m.group(2) or ""
    exponent = m.group(3).lstrip("+").lstrip("0") or "0"
    if len(exponent) > 6:
        return False
    sig_whole = _significant(whole)
    lead = len(frac) - len(frac.lstrip("0")) if sig_whole == 0 else 0
    read = min(len(frac), lead + max(0, 17 - sig_whole))
    return int(exponent) <= 308 + read


def _json_doubles_ok(value: object) -> bool:
    """Every number in ``value`` (nested) passes :func:`_json_double_ok`."""
    if isinstance(value, _Number):
        return _json_double_ok(value)
    if isinstance(value, list):
        return all(_json_doubles_ok(v) for v in value)
    if isinstance(value, dict):
        return all(_json_doubles_ok(v) for v in value.values())
    return True


def _json_ok(value: object, t: pa.DataType) -> bool:
    if value is None:
        return True  # missing values are reported by validation, with the row
    if pa.types.is_list(t):
        return isinstance(value, list) and all(_json_int(v) for v in value)
    if pa.types.is_integer(t):
        return _json_int(value)
    if pa.types.is_floating(t):
        return isinstance(value, _Number) and _json_double_ok(value)
    return True
