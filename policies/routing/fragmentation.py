"""Fragmentation-aware routing: send a request where it fits in one piece.

A contiguous allocator can refuse a request at high free memory because no single free
extent is long enough. The router reads each up replica's largest free extent and sends
the request to one whose extent holds the request's need -- prompt + output tokens times
its sequences (``RouteRequest.need_tokens``) -- choosing best fit: the smallest such
largest extent, so the long extents stay whole for the long requests; ties by fewer
outstanding requests, then the lowest index. When no replica fits, the least outstanding
(the request will wait or be refused there, as anywhere). On a paged pool the largest
extent is all free memory, so the rule becomes "the fullest replica that still fits".
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.routing.base import Router, RouteRequest, RouterView, least, outstanding, up_indices


class FragmentationAware(Router):
    """See the module docstring."""

    def choose(self, request: RouteRequest, views: Sequence[RouterView]) -> int | None:
        ups = up_indices(views)
        need = request.need_tokens
        extents = {i: views[i].largest_free_extent_tokens for i in ups}
        fitting = [i for i in ups if extents[i] >= need]
        if fitting:
            return min(fitting, key=lambda i: (extents[i], views[i].outstanding_requests, i))
        return least(views, ups, outstanding)
