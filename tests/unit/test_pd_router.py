"""The P/D router over hand-made views: prefill choice among the prefill replicas, the
decode choice among decode replicas whose free extent less its promises fits, and the
promises it keeps."""

from __future__ import annotations

import dataclasses

import pytest

from policies.routing.base import NO_REQUEST
from policies.routing.pd import PrefillDecode
from policies.routing.registry import parse_router


@dataclasses.dataclass(frozen=True)
class View:
    replica_id: int
    up: bool = True
    restarts: int = 0
    waiting_requests: int = 0
    outstanding_requests: int = 0
    in_flight_requests: int = 0
    largest_free_extent_tokens: int = 10_000
    kv_usage: float = 0.0


def _router(decode: str = "least_outstanding") -> PrefillDecode:
    router = parse_router({"kind": "pd", "decode": decode}).build()
    assert isinstance(router, PrefillDecode)
    router.assign([0, 1], [2, 3, 4])
    return router


def test_the_prefill_choice_is_the_least_loaded_up_prefill_replica() -> None:
    views = [View(0, outstanding_requests=3), View(1, outstanding_requests=1), View(2)]
    assert _router().choose(NO_REQUEST, views) == 1
    views[1] = View(1, up=False)
    assert _router().choose(NO_REQUEST, views) == 0
    assert _router().choose(NO_REQUEST, [View(0, up=False), View(1, up=False), View(2)]) is None


def test_unassigned_it_is_least_outstanding_over_every_replica() -> None:
    router = PrefillDecode()
    views = [View(0, outstanding_requests=2), View(1, outstanding_requests=0)]
    assert router.choose(NO_REQUEST, views) == 1


@pytest.mark.parametrize(("decode", "want"), [("least_outstanding", 4), ("best_fit", 3)])
def test_the_decode_choice_fits_the_kv_then_follows_its_rule(decode: str, want: int) -> None:
    views = [
        View(0),
        View(1),
        View(2, largest_free_extent_tokens=900, outstanding_requests=0),  # does not fit
        View(3, largest_free_extent_tokens=1_200, outstanding_requests=5),
        View(4, largest_free_extent_tokens=8_000, outstanding_requests=1),
    ]
    assert _router(decode).choose_decode(1_000, views) == want


def test_promised_room_is_not_promised_twice_and_comes_back() -> None:
    router = _router()
    views = [View(0), View(1), View(2, largest_free_extent_tokens=1_500)]
    assert router.choose_decode(1_000, views) == 2
    router.reserve(2, 1_000)
    assert router.choose_decode(1_000, views) is None  # 500 left unpromised
    router.release(2, 1_000)
    assert router.promised_tokens == {}
    assert router.choose_decode(1_000, views) == 2
    with pytest.raises(AssertionError):
        router.release(2, 1)
