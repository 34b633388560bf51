"""Binary search for the end of a monotone predicate's true prefix, written once.

The engine asks "how many steps fit?" in several places (decode runs within a time
budget, pooled growth within the free blocks); each is the largest ``x`` in a range at
which a predicate true-then-false still holds. Kept free of any engine import so the
compiled build (mypyc) compiles it on its own.
"""

# fragsim: compiled
from __future__ import annotations

from collections.abc import Callable


def last_true(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """The largest ``x`` in ``[lo, hi]`` with ``fits(x)``, for ``fits`` true then false
    on ``[lo, hi]`` and true at ``lo`` (assumed, not evaluated).

    Evaluates ``fits(hi)`` first (the whole range often fits), then bisects: at most
    ``1 + ceil(log2(hi - lo))`` evaluations. With ``hi <= lo`` it returns ``hi`` when
    ``fits(hi)``, else ``lo``."""
    if fits(hi):
        return hi
    return last_true_between(lo, hi, fits)


def last_true_between(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """:func:`last_true` once the bracket is known: ``fits(lo)`` holds and ``fits(hi)``
    does not (neither is evaluated again)."""
    while hi - lo > 1:  # invariant: fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
