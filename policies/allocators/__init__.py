"""KV-cache allocation policies over one replica's pool; see ``base`` for the contract
and ``registry`` for the names a scenario uses."""

from policies.allocators.base import (
    Allocation,
    Allocator,
    AllocStats,
    Failure,
    FailureCause,
    PoolSpec,
    classify,
)

__all__ = [
    "AllocStats",
    "Allocation",
    "Allocator",
    "Failure",
    "FailureCause",
    "PoolSpec",
    "classify",
]
