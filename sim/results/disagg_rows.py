"""``fragsim run``'s table rows of a summary's ``fleet.disagg`` section (light: no
pandas, so the command's module may import it at the top)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.results.summary_fleet import Disagg, RoleMemory

Num = Callable[[float | None, str], object]
"""How a number is shown: its value and a format spec to a cell (``None``: a dash)."""


def disagg_rows(section: Disagg, num: Num) -> list[tuple[str, object]]:
    """``fragsim run``'s table rows of the section: the transfers (started, landed, KV
    sent, mean and p99 time), the refused hand-offs by cause and by fate, then each
    role's memory (used share, the fragmentation ratio, allocation failures,
    preemptions), prefill first; numbers shown through ``num``."""
    t = section.transfers
    rows: list[tuple[str, object]] = [
        ("P/D: KV transfers started", t.started),
        ("  landed", t.landed),
        ("  KV sent (GB)", num(t.kv_bytes / 1e9, ",.1f")),
        ("  transfer mean (s)", num(t.mean_s, ".3f")),
        ("  transfer p99 (s)", num(t.p99_s, ".3f")),
        ("  hand-offs refused", sum(section.refusals.values())),
    ]
    rows += [(f"  refused: {cause}", n) for cause, n in section.refusals.items()]
    rows += [(f"  fate: {fate}", n) for fate, n in section.fates.items()]
    for role, memory in (("prefill", section.prefill), ("decode", section.decode)):
        rows += _role_rows(role, memory, num)
    return rows


def _role_rows(role: str, m: RoleMemory, num: Num) -> list[tuple[str, object]]:
    ratio = m.largest_contiguous_free_block_ratio
    return [
        (f"P/D {role}: replicas", len(m.replicas)),
        ("  mean KV used", num(m.mean_used_share, ".1%")),
        ("  largest_contiguous_free_block_ratio min", num(ratio.min, ".3f")),
        ("  largest_contiguous_free_block_ratio mean", num(ratio.mean, ".3f")),
        ("  samples below the ratio alert", num(ratio.share_of_samples_below_alert, ".1%")),
        ("  allocation failures", m.allocation_failures),
        ("  preemptions", m.preemptions),
    ]
