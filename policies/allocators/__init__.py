"""KV-cache allocation policies over one replica's pool; see ``base`` for the contract,
``pooled`` for the block-pooled growth seam (``paged``, ``vm_paged``), ``registry`` for
the names a scenario uses and ``diagnostics`` for read-only analyses."""

from policies.allocators.base import (
    Allocation,
    Allocator,
    AllocStats,
    Failure,
    FailureCause,
    PoolSpec,
    classify,
)
from policies.allocators.pooled import PooledAllocator, as_pooled

__all__ = [
    "AllocStats",
    "Allocation",
    "Allocator",
    "Failure",
    "FailureCause",
    "PoolSpec",
    "PooledAllocator",
    "as_pooled",
    "classify",
]
