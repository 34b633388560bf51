"""``fragsim run``'s table rows of a summary's ``offload`` section (light: no pandas,
so the command's module may import it at the top)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.results.summary_model import Offload


def offload_rows(section: Offload) -> list[tuple[str, object]]:
    """``fragsim run``'s table rows of the section: per tier its hits and misses, the
    tokens and time its loads took, evictions, and its pool's ratio."""
    rows: list[tuple[str, object]] = []
    for t in section.tiers:
        ratio = t.largest_contiguous_free_block_ratio.min
        rows += [
            (f"offload {t.kind} ({t.allocator}): hits", t.hits),
            ("  misses", t.misses),
            ("  tokens loaded", t.hit_tokens),
            ("  load time added to TTFT (s)", f"{t.load_s:,.2f}"),
            ("  evictions", t.evictions),
            ("  largest_contiguous_free_block_ratio min", "-" if ratio is None else f"{ratio:.3f}"),
        ]
    return rows
