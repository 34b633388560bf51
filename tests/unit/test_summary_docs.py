"""docs/outputs.md's field table is the summary model's, generated: a field added to the
model without a docstring, or the page edited by hand, fails here."""

from __future__ import annotations

from pathlib import Path

from sim.results.summary_fields import BEGIN, END, field_rows, field_table
from sim.results.summary_model import Summary

PAGE = Path(__file__).parents[2] / "docs" / "outputs.md"


def test_the_page_holds_the_generated_table() -> None:
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == field_table(), "regenerate: sim.results.summary_fields.field_table()"


def test_every_field_is_documented_and_listed() -> None:
    rows = field_rows()
    assert all(doc for _, _, doc in rows), [path for path, _, doc in rows if not doc]
    paths = {path for path, _, _ in rows}
    assert set(Summary.model_fields) <= paths
    assert {"fleet.pools[].latency.kind", "alerts[].firings", "memory.waste_breakdown"} <= paths
