"""How tables and reports label the summary's keys (no heavy imports: the CLI reads this
at start-up)."""

from __future__ import annotations

WASTE_LABELS = {
    "token_states": "token states",
    "reservation": "reservation",
    "internal_fragmentation": "internal fragmentation",
    "external_fragmentation_free": "external fragmentation & free",
}
"""The waste breakdown's shares (``memory.waste_breakdown`` keys, in order) and how tables
label them: the fourth is everything no request reserved, free memory included
(DESIGN.md's definition), so its label says both."""
