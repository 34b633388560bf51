"""Control characters in CSV/JSONL headers and cells: refused, and escaped in messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from traces.errors import TraceError, quote, shown
from traces.loaders import load_table

ROWS = "100,1.0,5,5\n200,2.0,5,5\n"


@pytest.mark.parametrize(
    "header",
    [
        "\0request_id,arrival_s,prompt_tokens,output_tokens",
        "request_id,arrival_s,prompt\0_tokens,output_tokens",
        "request_id,arrival_s,prompt_tokens,output_tokens,\x1bnote",
        "request_id,arrival_s,prompt_tokens,output_tokens,re\u200bquest_id",
    ],
)
def test_control_character_in_csv_header_refused(tmp_path: Path, header: str) -> None:
    p = tmp_path / "n.csv"
    p.write_bytes((header + "\n" + ROWS).encode())
    with pytest.raises(TraceError) as exc:
        load_table(p)
    err = exc.value
    assert err.line == 1 and err.field is not None
    text = str(err)
    assert str(p) in text and "line 1" in text and "control" in text
    assert text.isprintable()  # escaped, never raw
    assert quote(err.field) in text


def test_control_character_in_jsonl_key_refused(tmp_path: Path) -> None:
    p = tmp_path / "n.jsonl"
    p.write_text(
        '{"\\u0000request_id": 1, "arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 5}\n'
    )
    with pytest.raises(TraceError) as exc:
        load_table(p)
    assert exc.value.line == 1 and exc.value.field == "\0request_id"


def test_nul_in_cell_is_escaped_in_message(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_bytes(b"request_id,arrival_s,prompt_tokens,output_tokens\n100,1.0,5\0,5\n")
    with pytest.raises(TraceError) as exc:
        load_table(p)
    text = str(exc.value)
    assert "\0" not in text and text.isprintable()
    assert text.endswith("got '5\\x00'")


def test_shown_plain_verbatim_control_quoted() -> None:
    assert shown("-3") == "-3"
    assert shown("") == "''"
    assert shown("5\0") == "'5\\x00'"
    assert shown("a\x1bb") == "'a\\x1bb'"
    assert str(TraceError("f", "m", written="x\x07")).endswith("got 'x\\x07'")
