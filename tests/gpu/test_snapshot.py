"""Snapshot analysis on hand-made ``torch.cuda.memory_snapshot()`` lists."""

import pytest

pytestmark = pytest.mark.gpu

from gpu_backend.snapshot import pick_stats, summarize_snapshot  # noqa: E402


def test_totals_and_largest_inactive_block() -> None:
    segments = [
        {
            "total_size": 20 << 20,
            "blocks": [
                {"size": 8 << 20, "state": "active_allocated"},
                {"size": 4 << 20, "state": "inactive"},
                {"size": 8 << 20, "state": "active_pending_free"},
            ],
        },
        {"total_size": 2 << 20, "blocks": [{"size": 2 << 20, "state": "inactive"}]},
    ]
    s = summarize_snapshot(segments)
    assert (s.segments, s.reserved_bytes, s.allocated_bytes) == (2, 22 << 20, 16 << 20)
    assert (s.inactive_bytes, s.inactive_blocks, s.largest_inactive_bytes) == (6 << 20, 2, 4 << 20)
    assert s.largest_free_ratio == pytest.approx(4 / 6)


def test_empty_snapshot_and_missing_stats() -> None:
    s = summarize_snapshot([])
    assert s.reserved_bytes == 0 and s.largest_free_ratio is None
    assert pick_stats({"num_ooms": 3})["num_ooms"] == 3
    assert pick_stats({})["num_alloc_retries"] == 0
